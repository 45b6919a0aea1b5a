"""``kubemux dashboard`` and ``kubemux demo``: the web dashboard, real or simulated."""

from __future__ import annotations

import argparse
import contextlib
import functools
import ipaddress
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import anyio
import anyio.abc
import anyio.to_thread

from .._kubeconfig.load import load_kubeconfig
from .._resources import parse_resource
from ._output import CommandError
from ._watch import watch as _watch_command


# ---------------------------------------------------------------------- dashboard
def load_dashboard() -> ModuleType:
    """Import :mod:`kubemux.dashboard`.

    Raises:
        CommandError: Its dependencies (the ``dashboard`` extra) are missing.
    """
    try:
        import kubemux.dashboard
    except ImportError as exc:
        raise CommandError(
            f"the dashboard needs starlette and uvicorn (pip install 'kubemux[dashboard]'): {exc}"
        ) from exc
    return kubemux.dashboard


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _serve(server: Any, duration: float | None, announce: Callable[[str], None]) -> None:
    """Run a DashboardServer until Ctrl-C (or for ``duration`` seconds)."""
    async with anyio.create_task_group() as tg:

        async def run(*, task_status: anyio.abc.TaskStatus[str]) -> None:
            await server.serve(task_status=task_status)
            tg.cancel_scope.cancel("the dashboard stopped")

        async def stop_later(delay: float) -> None:
            await anyio.sleep(delay)
            server.shutdown()

        url: str = await tg.start(run)
        announce(url)
        if duration is not None:
            tg.start_soon(stop_later, duration)


async def _open_browser(url: str) -> None:
    import webbrowser

    await anyio.to_thread.run_sync(webbrowser.open, url)


async def dashboard(args: argparse.Namespace, out: TextIO) -> int:
    module = load_dashboard()
    parse_resource(args.resource)
    load_kubeconfig(args.kubeconfig)  # fail now, with one line, rather than in the server
    local = _is_loopback(args.host)
    users = bool(getattr(args, "user_tokens", False))
    cert, key = getattr(args, "tls_cert_file", None), getattr(args, "tls_private_key_file", None)
    if (cert is None) != (key is None):
        raise CommandError("--tls-cert-file and --tls-private-key-file go together")
    app = module.create_app(
        kubeconfig=args.kubeconfig,
        resource=args.resource,
        allowed_hosts=module.LOCAL_HOSTS if local else None,
        user_tokens=users,
    )
    server = module.DashboardServer(
        app, host=args.host, port=args.port, ssl_certfile=cert, ssl_keyfile=key
    )

    async with anyio.create_task_group() as tg:

        def announce(url: str) -> None:
            out.write(f"kubemux dashboard: open {url}  (Ctrl-C to stop)\n")
            if users:
                out.write("each user logs in with their own token and sees what it may list\n")
                if cert is None and not local:
                    out.write(
                        f"warning: listening on {args.host} without TLS: tokens and session "
                        "cookies cross the network in clear (--tls-cert-file)\n"
                    )
            elif not local:
                out.write(
                    f"warning: listening on {args.host}: the dashboard has no authentication; "
                    "anyone who can reach it sees your clusters\n"
                )
            out.flush()
            if args.open:
                tg.start_soon(_open_browser, url)

        await _serve(server, args.duration, announce)
    return 0


# ---------------------------------------------------------------------- demo
async def demo(args: argparse.Namespace, out: TextIO) -> int:
    from ..testing import FakeCluster, simulate_workload, write_kubeconfig

    module = None if args.watch else load_dashboard()
    n = max(1, args.contexts)
    with tempfile.TemporaryDirectory(prefix="kubemux-demo-") as tmp:
        path = Path(tmp) / "config"
        clusters = [FakeCluster(name=f"sim-{i}", tokens={f"token-{i}"}) for i in range(n + 1)]
        async with contextlib.AsyncExitStack() as stack:
            for c in clusters:
                await stack.enter_async_context(c)
            names = [f"sim-{i}" for i in range(n)]
            live = dict(zip(names, clusters[:n], strict=True))
            write_kubeconfig(path, live)
            async with anyio.create_task_group() as tg:
                for i, c in enumerate(clusters):
                    tg.start_soon(functools.partial(simulate_workload, c, seed=i))
                editor = functools.partial(
                    _edit_kubeconfig, path, live, clusters[n], args.edit_period, out
                )
                if module is None:
                    out.write(
                        f"kubemux demo: {n} simulated contexts, kubeconfig at {path}\n"
                        "Ctrl-C to stop.\n\n"
                    )
                    out.flush()
                    tg.start_soon(editor)
                    args.kubeconfig, args.all_contexts, args.context = str(path), True, None
                    args.namespace, args.output, args.no_snapshot = None, None, False
                    args.resource, args.names, args.all_namespaces = "pods", [], True
                    args.selector = args.field_selector = None
                    with anyio.move_on_after(args.duration):
                        await _watch_command(args, out, sys.stderr)
                else:
                    app = module.create_app(kubeconfig=str(path), title="kubemux demo")
                    server = module.DashboardServer(app, host="127.0.0.1", port=args.port)

                    def announce(url: str) -> None:
                        out.write(
                            f"kubemux demo: {n} simulated contexts, kubeconfig at {path}\n"
                            f"Open {url} to watch them live. The kubeconfig is edited every "
                            f"{args.edit_period:g}s. Ctrl-C to stop.\n\n"
                        )
                        out.flush()
                        tg.start_soon(editor)
                        if args.open:
                            tg.start_soon(_open_browser, url)

                    await _serve(server, args.duration, announce)
                tg.cancel_scope.cancel("demo finished")
    return 0


async def _edit_kubeconfig(
    path: Path, live: dict[str, Any], spare: Any, period: float, out: TextIO
) -> None:
    from ..testing import FakeCluster, FakeContext, write_kubeconfig

    step = 0
    extra = f"sim-{len(live)}"
    with_extra = False
    while True:
        await anyio.sleep(period)
        step += 1
        if step % 3 == 1:
            with_extra = True
            note = f"added context {extra!r}"
        elif step % 3 == 2:
            first = next(iter(live))
            target = live[first]
            cluster = target.cluster if isinstance(target, FakeContext) else target
            assert isinstance(cluster, FakeCluster)
            token = f"rotated-{step}"
            cluster.tokens.add(token)
            live[first] = FakeContext(cluster=cluster, token=token)
            note = f"rotated the token of {first!r} (reload)"
        else:
            with_extra = False
            note = f"removed context {extra!r}"
        contexts: dict[str, Any] = dict(live)
        if with_extra:
            contexts[extra] = spare
        write_kubeconfig(path, contexts)
        out.write(f"--- kubeconfig edited: {note}\n")
        out.flush()
