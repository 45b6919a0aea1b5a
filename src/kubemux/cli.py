"""The ``kubemux`` command: ``watch``, ``status``, ``demo``, ``dashboard``.

Errors are one line on stderr naming the problem, printed once, with exit status 1 (2 for
usage errors); a closed pipe (``kubemux watch pods | head``) ends the command quietly.
``demo`` and ``dashboard`` serve :mod:`kubemux.dashboard` (it needs the ``dashboard`` extra:
starlette, sse-starlette, uvicorn).

Everything written for a terminal (tables, log lines, errors) shows control characters as
escapes and server URLs without their ``user:password@``: names, phases and messages come
from clusters and kubeconfigs, which must not be able to drive the terminal. ``-o json``
writes the objects exactly. Logging: ``-v`` (info), ``-vv`` (debug), or ``KUBEMUX_LOG``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import ipaddress
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import anyio
import anyio.abc
import anyio.to_thread
import orjson

from . import __version__
from ._errors import ContextNotFound, KubemuxError
from ._fanout import Change
from ._kubeconfig import load_kubeconfig
from ._redact import redact_text, redact_url, terminal_safe
from ._registry import WatcherRegistry
from ._resources import parse_resource
from ._status import RegistryStatus

__all__ = ["main", "run"]

LEVELS = ("debug", "info", "warning", "error", "critical")

log = logging.getLogger(__name__)


class CommandError(Exception):
    """A problem the command reports as one line (not a kubemux error)."""


_KUBECONFIG_HELP = (
    "kubeconfig path(s), os.pathsep-separated (default: $KUBECONFIG or ~/.kube/config)"
)
_VERBOSE_HELP = "log more: -v info, -vv debug (or KUBEMUX_LOG=debug|info|warning|error)"
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
    p.add_argument("--version", action="version", version=f"kubemux {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help=_VERBOSE_HELP)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS, help=_VERBOSE_HELP
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    w = sub.add_parser(
        "watch",
        parents=[common],
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
        parents=[common],
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
        parents=[common],
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
        parents=[common],
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
    level = os.environ.get("KUBEMUX_LOG", "").strip().lower()
    if level and level not in LEVELS:
        print(
            f"kubemux: error: KUBEMUX_LOG={terminal_safe(level)!s} is not one of "
            f"{', '.join(LEVELS)}",
            file=sys.stderr,
        )
        return 2
    configure_logging(args.verbose, level or None)
    try:
        return anyio.run(_run_parsed, args, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BaseExceptionGroup as group:
        if all(isinstance(e, KeyboardInterrupt) for e in _leaves(group)):
            return 130
        raise
    finally:
        if _PIPE_CLOSED in _OUTCOME:
            _silence_stdout()


class SafeFormatter(logging.Formatter):
    """``kubemux: LEVEL: message``, with URL userinfo redacted and control characters
    escaped (in the message and in any traceback)."""

    def __init__(self) -> None:
        super().__init__("kubemux: %(levelname)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        return terminal_safe(redact_text(super().formatMessage(record)))

    def formatException(self, ei: Any) -> str:
        return terminal_safe(redact_text(super().formatException(ei)), newlines=True)

    def formatStack(self, stack_info: str) -> str:
        return terminal_safe(redact_text(super().formatStack(stack_info)), newlines=True)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is now (tests swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


class _StartupFilter(logging.Filter):
    """While a command starts, the library's warnings are held back: the command reports
    the same failure itself, once (as its error, or in its status table)."""

    quiet = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.quiet or record.levelno >= logging.ERROR:
            return True
        name = record.name
        return name == __name__ or not (name == "kubemux" or name.startswith("kubemux."))


_STARTUP = _StartupFilter()


def configure_logging(verbose: int = 0, level: str | None = None) -> None:
    """Log to stderr through :class:`SafeFormatter`: ``verbose`` 1 is info, 2 is debug;
    ``level`` (``KUBEMUX_LOG``) applies when it says more. Idempotent."""
    wanted = logging.WARNING
    if level is not None:
        wanted = getattr(logging, level.upper())
    if verbose:
        wanted = min(wanted, logging.INFO if verbose == 1 else logging.DEBUG)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    handler = _StderrHandler()
    handler.setFormatter(SafeFormatter())
    handler.addFilter(_STARTUP)
    root.addHandler(handler)
    logging.getLogger("kubemux").setLevel(wanted)
    root.setLevel(min(logging.WARNING, wanted) if wanted <= logging.DEBUG else logging.WARNING)


@contextlib.contextmanager
def _startup(verbose: int) -> Iterator[None]:
    """Hold the library's warnings back while a command starts, or while it shows a table
    that holds the same errors (unless ``-v``)."""
    if verbose:
        yield
        return
    _STARTUP.quiet = True
    try:
        yield
    finally:
        _STARTUP.quiet = False


async def run(
    argv: Sequence[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run a ``kubemux`` command in the running event loop (for tests and embedding).

    Usage errors raise ``SystemExit`` like the command does; other errors are printed as
    one line on ``stderr`` and give exit status 1. Logging is left as the caller set it.
    """
    args = _parser().parse_args(argv)
    return await _run_parsed(args, stdout or sys.stdout, stderr or sys.stderr)


_REPORTED = (KubemuxError, ValueError, OSError, CommandError)
_PIPE_CLOSED = "pipe closed"
_OUTCOME: set[str] = set()


def _is_closed_pipe(exc: BaseException) -> bool:
    return isinstance(exc, BrokenPipeError) or (
        isinstance(exc, OSError)
        and exc.errno in (errno.EPIPE, errno.ECONNRESET)
        and not isinstance(exc, KubemuxError)
    )


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush cannot fail noisily."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
        pass


def _report(exc: BaseException, err: TextIO) -> None:
    print(f"kubemux: error: {terminal_safe(redact_text(_one_line(exc)))}", file=err)


async def _run_parsed(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        return await _dispatch(args, out, err)
    except BaseException as exc:
        leaves = _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
        if any(_is_closed_pipe(e) for e in leaves):  # `kubemux watch pods | head`
            _OUTCOME.add(_PIPE_CLOSED)
            return 0
        if len(leaves) == 1 and isinstance(leaves[0], _REPORTED):
            _report(leaves[0], err)
            return 1
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions inside ``group``, however nested."""
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _one_line(exc.exceptions[0])
    return " ".join(str(exc).split()) or type(exc).__name__


async def _dispatch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.command == "relay":
        return await _relay(args, out)
    if args.command == "watch":
        return await _watch(args, out)
    if args.command == "status":
        return await _status(args, out, err)
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
    safe = [terminal_safe(c) for c in cells]
    return "  ".join(c.ljust(w) for c, w in zip(safe, widths, strict=False)).rstrip() + "\n"


async def _watch(args: argparse.Namespace, out: TextIO) -> int:
    resource = parse_resource(args.resource)
    registry = WatcherRegistry.from_kubeconfig(
        args.kubeconfig,
        follow=True,
        autowatch=[resource] if args.all_contexts else (),
    )
    printer = _Printer(out, args.output)
    async with registry:
        with _startup(getattr(args, "verbose", 0)):
            contexts = await _start_watch(registry, args, resource)
        with anyio.move_on_after(args.duration):
            async with registry.subscribe(
                resource, contexts, namespace=args.namespace, snapshot=not args.no_snapshot
            ) as changes:
                async for change in changes:
                    printer(change)
    return 0


async def _start_watch(
    registry: WatcherRegistry, args: argparse.Namespace, resource: Any
) -> list[str] | None:
    """The contexts to follow (None: all), their watchers started: a context named on the
    command line that fails is the command's error; with -A, a warning each."""
    if args.all_contexts:
        with anyio.move_on_after(10):
            for name in list(registry.contexts):
                try:
                    await registry.watch(name, resource)
                except KubemuxError as exc:
                    log.warning("context %r: %s", name, exc)
        return None
    contexts: list[str] = args.context or (
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
    for name in contexts:
        await registry.watch(name, resource, args.namespace)
    return contexts


# ---------------------------------------------------------------------- status
async def _status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.follow:
        return await _follow_status(args, out)
    registry = WatcherRegistry.from_kubeconfig(args.kubeconfig, follow=False)
    failed: list[str] = []
    async with registry:
        # the table shows every context's error: the library's warnings would repeat them
        with _startup(getattr(args, "verbose", 0)):
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
        with _startup(getattr(args, "verbose", 0)), anyio.move_on_after(args.duration):
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
                _state(c.state),
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


def _state(state: object) -> str:
    """A state's text, whether a plain string or a ``str`` enum member."""
    return str(getattr(state, "value", state))


def _table(header: list[str], rows: list[list[str]]) -> str:
    """Aligned columns; every cell shown terminal-safe (its control characters escaped)."""
    rows = [[terminal_safe(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n"
        for r in [header, *rows]
    )


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
            f"the dashboard needs starlette, sse-starlette and uvicorn "
            f"(pip install 'kubemux[dashboard]'): {exc}"
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


async def _dashboard(args: argparse.Namespace, out: TextIO) -> int:
    module = load_dashboard()
    parse_resource(args.resource)
    load_kubeconfig(args.kubeconfig)  # fail now, with one line, rather than in the server
    local = _is_loopback(args.host)
    app = module.create_app(
        kubeconfig=args.kubeconfig,
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
    from .testing import FakeCluster, simulate_workload, write_kubeconfig

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
