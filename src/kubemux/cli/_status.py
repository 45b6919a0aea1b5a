"""``kubemux status``: the contexts and their states, once or followed."""

from __future__ import annotations

import argparse
import contextlib
from typing import TextIO

import anyio
import anyio.abc
import anyio.to_thread

from .._errors import KubemuxError
from .._redact import redact_text, redact_url, terminal_safe
from .._registry.registry import WatcherRegistry
from .._registry.status import RegistryStatus
from .._resources import parse_resource
from ._output import startup, state_text, table


# ---------------------------------------------------------------------- status
async def status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.follow:
        return await _follow_status(args, out)
    registry = WatcherRegistry.from_kubeconfig(args.kubeconfig, follow=False)
    failed: list[str] = []
    async with registry:
        # the table shows every context's error: the library's warnings would repeat them
        with startup(getattr(args, "verbose", 0)):
            if args.probe:
                resource = parse_resource(args.probe)

                async def probe(name: str) -> None:
                    with contextlib.suppress(KubemuxError), anyio.move_on_after(args.timeout):
                        await registry.watch(name, resource)
                    if registry.store(name, resource) is None:
                        failed.append(name)

                async with anyio.create_task_group() as tg:
                    for name in registry.contexts:
                        tg.start_soon(probe, name)
            out.write(_status_text(registry.status()))
    if failed:
        names = ", ".join(repr(n) for n in sorted(failed))
        print(
            terminal_safe(
                f"kubemux: error: the probe of {args.probe} failed in {len(failed)} of "
                f"{len(registry.contexts)} contexts: {names}"
            ),
            file=err,
        )
        return 1
    return 0


async def _follow_status(args: argparse.Namespace, out: TextIO) -> int:
    """Print the status table, then again each time it reads differently (Ctrl-C ends)."""
    autowatch = [parse_resource(args.probe)] if args.probe else []
    registry = WatcherRegistry.from_kubeconfig(args.kubeconfig, autowatch=autowatch)
    # the table shows every error, and again when it changes: no warnings beside it
    async with registry:
        with startup(getattr(args, "verbose", 0)), anyio.move_on_after(args.duration):
            last = ""
            while True:
                version = registry.status_version
                text = _status_text(registry.status())
                if text != last:
                    out.write(("\n" if last else "") + text)
                    out.flush()
                    last = text
                await registry.wait_status_change(version)
                await anyio.sleep(0.2)  # one table for a burst of changes
    return 0


def _status_text(st: RegistryStatus) -> str:
    cur = st.current_context
    text = table(
        ["", "CONTEXT", "STATE", "SERVER", "USER", "NAMESPACE", "OBJECTS", "ERROR"],
        [
            [
                "*" if c.name == cur else "",
                c.name,
                state_text(c.state),
                redact_url(c.server),
                c.user_name,
                c.namespace or "",
                str(sum(i.objects for i in c.informers)) if c.informers else "",
                redact_text(c.last_error or ""),
            ]
            for c in st.contexts.values()
        ],
    )
    text += "".join(
        terminal_safe(redact_text(f"invalid context {name!r}: {why}")) + "\n"
        for name, why in st.invalid_contexts.items()
    )
    text += "".join(
        terminal_safe(redact_text(f"kubeconfig error in {path}: {err}")) + "\n"
        for path, err in st.kubeconfig_errors.items()
    )
    return text
