"""The ``kubemux`` command: ``watch``, ``status``, ``demo``, ``dashboard``.

Errors are one line on stderr naming the problem, with exit status 1 (2 for usage errors).
``demo`` and ``dashboard`` serve the web dashboard of ``examples/dashboard`` (it needs the
``dashboard`` extra: starlette, sse-starlette, uvicorn).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import ipaddress
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import anyio
import anyio.abc
import anyio.to_thread
import orjson

from ._errors import ContextNotFound, KubemuxError
from ._fanout import Change
from ._kubeconfig import load_kubeconfig
from ._registry import WatcherRegistry
from ._resources import parse_resource
from ._status import RegistryStatus

__all__ = ["main", "run"]

# a source checkout (or an editable install) has it under examples/; a wheel carries a copy
_SOURCE_DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "dashboard"
_WHEEL_DASHBOARD = Path(__file__).resolve().parent / "_dashboard"
DASHBOARD_DIR = _SOURCE_DASHBOARD if _SOURCE_DASHBOARD.is_dir() else _WHEEL_DASHBOARD


class CommandError(Exception):
    """A problem the command reports as one line (not a kubemux error)."""


_KUBECONFIG_HELP = (
    "kubeconfig path(s), os.pathsep-separated (default: $KUBECONFIG or ~/.kube/config)"
)
_EXAMPLES = """examples:
  kubemux demo                  simulated clusters in the web dashboard (no cluster needed)
  kubemux dashboard             the web dashboard for your kubeconfig, on 127.0.0.1:8000
  kubemux watch pods -A         every context's pods, live
  kubemux status --probe pods   which contexts answer, and how many pods each has
  kubemux status -f --probe pods  the same, kept up to date as contexts change
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kubemux",
        description="Live, cached views of Kubernetes resources across kubeconfig contexts.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    w = sub.add_parser(
        "watch",
        help="print live changes of a resource across contexts",
        description="Like `kubectl get -w`, across contexts, with a CONTEXT column: the "
        "current objects first, then every change. Contexts added to the kubeconfig while "
        "it runs are followed with --all-contexts.",
    )
    w.add_argument("resource", help="pods, deployments.apps, widgets.v1.example.com, ...")
    scope = w.add_mutually_exclusive_group()
    scope.add_argument(
        "--context",
        action="append",
        default=None,
        help="a context to watch (repeatable; default: the current context)",
    )
    scope.add_argument("-A", "--all-contexts", action="store_true", help="watch every context")
    w.add_argument("-n", "--namespace", default=None, help="only this namespace")
    w.add_argument(
        "-o",
        "--output",
        choices=("wide", "json"),
        default=None,
        help="wide: more columns; json: one JSON object per line",
    )
    w.add_argument("--kubeconfig", default=None, help=_KUBECONFIG_HELP)
    w.add_argument(
        "--no-snapshot", action="store_true", help="only new changes, not the current objects first"
    )
    w.add_argument("--duration", type=float, default=None, help=argparse.SUPPRESS)

    s = sub.add_parser(
        "status",
        help="a table of contexts and their states",
        description="Load the kubeconfig and show every context. With --probe, "
        "start a watcher for that resource in each context first.",
    )
    s.add_argument("--kubeconfig", default=None, help=_KUBECONFIG_HELP)
    s.add_argument(
        "--probe",
        metavar="RESOURCE",
        default=None,
        help="list this resource in every context (e.g. pods) to test connectivity",
    )
    s.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long a probe may take (default 10)",
    )
    s.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep following the kubeconfig and print the table again whenever it changes "
        "(with --probe, every context, also later ones, keeps watching that resource)",
    )
    s.add_argument("--duration", type=float, default=None, help=argparse.SUPPRESS)

    d = sub.add_parser(
        "demo",
        help="simulated clusters in a live web dashboard, no cluster needed",
        description="Start FakeClusters with a simulated workload (pods created, updated and "
        "deleted, events emitted), write a temporary kubeconfig and serve the dashboard on "
        "127.0.0.1. Every few seconds the kubeconfig is edited (a context is added, reloaded "
        "with a new token, removed) so you can watch the registry follow it. With --watch, "
        "print the changes in the terminal instead.",
    )
    d.add_argument(
        "--contexts", type=int, default=3, metavar="N", help="simulated contexts (default 3)"
    )
    d.add_argument(
        "--port", type=int, default=8000, help="dashboard port (default 8000; 0: any free port)"
    )
    d.add_argument(
        "--watch",
        action="store_true",
        help="no web server: print the changes in the terminal, like `kubemux watch`",
    )
    d.add_argument("--open", action="store_true", help="open the dashboard in a web browser")
    d.add_argument(
        "--edit-period",
        type=float,
        default=6.0,
        metavar="SECONDS",
        help="seconds between kubeconfig edits (default 6)",
    )
    d.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this many seconds (default: until Ctrl-C)",
    )

    b = sub.add_parser(
        "dashboard",
        help="serve the live web dashboard for your clusters",
        description="Serve the web dashboard for every context of the kubeconfig: the "
        "contexts and their state, a live table of a resource across contexts, each "
        "object's events. It listens on 127.0.0.1 only, unless --host says otherwise "
        "(it has no authentication of its own).",
    )
    b.add_argument("--kubeconfig", default=None, help=_KUBECONFIG_HELP)
    b.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free port)")
    b.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; anything else exposes your clusters)",
    )
    b.add_argument(
        "--resource",
        default="pods",
        help="the resource every context watches from the start (default pods)",
    )
    b.add_argument("--open", action="store_true", help="open the dashboard in a web browser")
    b.add_argument("--duration", type=float, default=None, help=argparse.SUPPRESS)
    _relay_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kubemux`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    # the library logs through `logging`; the command shows warnings as one tidy line each
    # (KUBEMUX_LOG=debug|info for more)
    level = os.environ.get("KUBEMUX_LOG", "warning").upper()
    logging.basicConfig(
        level=getattr(logging, level, logging.WARNING),
        format="kubemux: %(levelname)s: %(message)s",
    )
    try:
        return anyio.run(_run_parsed, args, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BaseExceptionGroup as group:
        if all(isinstance(e, KeyboardInterrupt) for e in _leaves(group)):
            return 130
        raise


async def run(
    argv: Sequence[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run a ``kubemux`` command in the running event loop (for tests and embedding).

    Usage errors raise ``SystemExit`` like the command does; other errors are printed as
    one line on ``stderr`` and give exit status 1.
    """
    args = _parser().parse_args(argv)
    return await _run_parsed(args, stdout or sys.stdout, stderr or sys.stderr)


_REPORTED = (KubemuxError, ValueError, OSError, CommandError)


async def _run_parsed(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        return await _dispatch(args, out)
    except _REPORTED as exc:
        print(f"kubemux: error: {_one_line(exc)}", file=err)
        return 1
    except BaseExceptionGroup as group:  # from a task group: report its one error
        leaves = _leaves(group)
        if len(leaves) == 1 and isinstance(leaves[0], _REPORTED):
            print(f"kubemux: error: {_one_line(leaves[0])}", file=err)
            return 1
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _one_line(exc.exceptions[0])
    return " ".join(str(exc).split()) or type(exc).__name__


async def _dispatch(args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "relay":
        return await _relay(args, out)
    if args.command == "watch":
        return await _watch(args, out)
    if args.command == "status":
        return await _status(args, out)
    if args.command == "dashboard":
        return await _dashboard(args, out)
    return await _demo(args, out)


# ---------------------------------------------------------------------- watch
class _Printer:
    def __init__(self, out: TextIO, output: str | None) -> None:
        self.out = out
        self.output = output
        self.header = False

    def __call__(self, change: Change) -> None:
        if self.output == "json":
            record = {
                "context": change.context,
                "resource": change.resource,
                "type": change.type,
                "object": change.object,
            }
            self.out.write(orjson.dumps(record).decode() + "\n")
            self.out.flush()
            return
        if not self.header:
            cols = ["CONTEXT", "EVENT", "NAMESPACE", "NAME", "STATUS"]
            if self.output == "wide":
                cols += ["NODE", "RESOURCEVERSION"]
            self.out.write(_row(cols, self.output))
            self.header = True
        obj: dict[str, Any] = dict(change.object or {})
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        phase = str((status or {}).get("phase") or "")
        if change.type in ("RESET", "REMOVED"):
            cells = [change.context, change.type, "", f"({change.resource})", ""]
        else:
            cells = [change.context, change.type, change.namespace, change.name, phase]
        if self.output == "wide":
            spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
            meta = obj.get("metadata") or {}
            cells += [str((spec or {}).get("nodeName") or ""), str(meta.get("resourceVersion", ""))]
        self.out.write(_row(cells, self.output))
        self.out.flush()


def _row(cells: list[str], output: str | None) -> str:
    widths = [14, 9, 12, 28, 10, 10, 10] if output == "wide" else [14, 9, 12, 28, 10]
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=False)).rstrip() + "\n"


async def _watch(args: argparse.Namespace, out: TextIO) -> int:
    resource = parse_resource(args.resource)
    registry = WatcherRegistry.from_kubeconfig(
        args.kubeconfig,
        follow=True,
        autowatch=[resource] if args.all_contexts else (),
    )
    printer = _Printer(out, args.output)
    async with registry:
        if args.all_contexts:
            contexts = None
        else:
            contexts = args.context or (
                [registry.current_context] if registry.current_context else []
            )
            if not contexts:
                raise ContextNotFound(
                    "(current)",
                    "the kubeconfig sets no current-context; use --context or --all-contexts",
                )
            for name in contexts:
                if name not in registry.contexts:
                    raise ContextNotFound(name)
        with anyio.move_on_after(args.duration):
            async with registry.subscribe(
                resource, contexts, namespace=args.namespace, snapshot=not args.no_snapshot
            ) as changes:
                if contexts is not None:
                    for name in contexts:
                        await registry.watch(name, resource, args.namespace)
                else:
                    with anyio.move_on_after(10):
                        for name in list(registry.contexts):
                            with contextlib.suppress(KubemuxError):
                                await registry.watch(name, resource)
                async for change in changes:
                    printer(change)
    return 0


# ---------------------------------------------------------------------- status
async def _status(args: argparse.Namespace, out: TextIO) -> int:
    if args.follow:
        return await _follow_status(args, out)
    registry = WatcherRegistry.from_kubeconfig(args.kubeconfig, follow=False)
    async with registry:
        if args.probe:
            resource = parse_resource(args.probe)

            async def probe(name: str) -> None:
                with contextlib.suppress(KubemuxError), anyio.move_on_after(args.timeout):
                    await registry.watch(name, resource)

            async with anyio.create_task_group() as tg:
                for name in registry.contexts:
                    tg.start_soon(probe, name)
        out.write(_status_text(registry.status()))
    return 0


async def _follow_status(args: argparse.Namespace, out: TextIO) -> int:
    """Print the status table, then again each time it reads differently (Ctrl-C ends)."""
    autowatch = [parse_resource(args.probe)] if args.probe else []
    registry = WatcherRegistry.from_kubeconfig(args.kubeconfig, autowatch=autowatch)
    async with registry:
        with anyio.move_on_after(args.duration):
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
    text = _table(
        ["", "CONTEXT", "STATE", "SERVER", "USER", "NAMESPACE", "OBJECTS", "ERROR"],
        [
            [
                "*" if c.name == cur else "",
                c.name,
                c.state,
                c.server,
                c.user_name,
                c.namespace or "",
                str(sum(i.objects for i in c.informers)) if c.informers else "",
                c.last_error or "",
            ]
            for c in st.contexts.values()
        ],
    )
    text += "".join(
        f"invalid context {name!r}: {why}\n" for name, why in st.invalid_contexts.items()
    )
    text += "".join(
        f"kubeconfig error in {path}: {err}\n" for path, err in st.kubeconfig_errors.items()
    )
    return text


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n"
        for r in [header, *rows]
    )


# ---------------------------------------------------------------------- dashboard
def load_dashboard() -> ModuleType:
    """Import the dashboard package of ``examples/dashboard`` (as ``kubemux_dashboard``).

    Raises:
        CommandError: It is not there (an installed wheel has no examples) or its
            dependencies (the ``dashboard`` extra) are missing.
    """
    name = "kubemux_dashboard"
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    init = DASHBOARD_DIR / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(DASHBOARD_DIR)]
    )
    if not init.is_file() or spec is None or spec.loader is None:
        raise CommandError(
            f"the dashboard is not installed (looked for {DASHBOARD_DIR}): it is part of a "
            "kubemux source checkout; `kubemux demo --watch` works without it"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        del sys.modules[name]
        raise CommandError(
            f"the dashboard needs starlette, sse-starlette and uvicorn "
            f"(pip install 'kubemux[dashboard]'): {exc}"
        ) from exc
    return module


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


async def _dashboard(args: argparse.Namespace, out: TextIO) -> int:
    module = load_dashboard()
    parse_resource(args.resource)
    load_kubeconfig(args.kubeconfig)  # fail now, with one line, rather than in the server
    local = _is_loopback(args.host)
    app = module.create_app(
        args.kubeconfig,
        resource=args.resource,
        allowed_hosts=module.LOCAL_HOSTS if local else None,
    )
    server = module.DashboardServer(app, host=args.host, port=args.port)

    async with anyio.create_task_group() as tg:

        def announce(url: str) -> None:
            out.write(f"kubemux dashboard: open {url}  (Ctrl-C to stop)\n")
            if not local:
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
async def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from .testing import FakeCluster, write_kubeconfig
    from .testing._workload import simulate_workload

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
                    args.resource = "pods"
                    with anyio.move_on_after(args.duration):
                        await _watch(args, out)
                else:
                    app = module.create_app(str(path), title="kubemux demo")
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
    from .testing import FakeCluster, FakeContext, write_kubeconfig

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


# ---------------------------------------------------------------------- relay (shared watches)
def _relay_parser(sub: Any) -> None:
    r = sub.add_parser(
        "relay",
        help="lead shared watches for other replicas (headless)",
        description="Run a headless registry that leads the shared watches of every context "
        "of the kubeconfig (kubemux.share, docs/sharing.md), so that replicas started with "
        "share_lead=False (dashboards) can follow them. Runs until interrupted.",
    )
    r.add_argument("--share", required=True, metavar="URL", help="the Redis URL (redis://...)")
    r.add_argument("--kubeconfig", default=None, help=_KUBECONFIG_HELP)
    r.add_argument(
        "--resource",
        nargs="+",
        default=["pods"],
        help="resources every context watches (default: pods)",
    )
    r.add_argument("--prefix", default="kubemux", help="Redis key prefix (default kubemux)")
    r.add_argument("--duration", type=float, default=None, help=argparse.SUPPRESS)


async def _relay(args: argparse.Namespace, out: TextIO) -> int:
    import signal

    from ._redact import redact_url
    from .share import Redis

    for name in args.resource:
        parse_resource(name)  # a usage error before anything starts
    paths = args.kubeconfig.split(os.pathsep) if args.kubeconfig else None
    share = Redis(args.share, prefix=args.prefix)
    registry = WatcherRegistry.from_kubeconfig(paths, autowatch=args.resource, share=share)
    async with registry, anyio.create_task_group() as tg:
        print(
            f"kubemux relay: leading {', '.join(args.resource)} for "
            f"{len(registry.contexts)} contexts through {redact_url(args.share)}",
            file=out,
        )
        out.flush()

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    tg.cancel_scope.cancel("kubemux relay: interrupted")

        tg.start_soon(stop_on_signal)
        if args.duration is not None:
            await anyio.sleep(args.duration)
            tg.cancel_scope.cancel("kubemux relay: duration over")
    print("kubemux relay: stopped", file=out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
