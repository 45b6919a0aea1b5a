"""The ``kubemux`` command: ``get``, ``watch``, ``status``, ``demo``, ``dashboard``, ``relay``,
``proxy``.

One module per command (``_get``: get and watch, ``_status``, ``_dashboard``: dashboard and
demo, ``_relay``, ``_proxy``) and ``_output`` for what they share (logging, one-line errors, tables).

Errors are one line on stderr naming the problem, printed once, with exit status 1 (2 for
usage errors); a closed pipe (``kubemux watch pods | head``) ends the command quietly.
``demo`` and ``dashboard`` serve :mod:`kubemux.dashboard` (it needs the ``dashboard`` extra:
starlette, uvicorn).

Everything written for a terminal (tables, log lines, errors) shows control characters as
escapes and server URLs without their ``user:password@``: names, phases and messages come
from clusters and kubeconfigs, which must not be able to drive the terminal. ``-o json``
writes the objects exactly. Logging: ``-v`` (info), ``-vv`` (debug), or ``KUBEMUX_LOG``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

import anyio

from .._errors import exception_leaves
from .._redact import terminal_safe
from .._runtime import __version__
from . import _dashboard, _get, _proxy, _relay, _status, _watch
from ._limits import open_file_limits
from ._output import (
    KUBECONFIG_HELP,
    LEVELS,
    OUTCOME,
    PIPE_CLOSED,
    REPORTED,
    CommandError,
    SafeFormatter,
    configure_logging,
    is_closed_pipe,
    report,
    silence_stdout,
)

__all__ = ["CommandError", "SafeFormatter", "configure_logging", "main", "run"]

_VERBOSE_HELP = "log more: -v info, -vv debug (or KUBEMUX_LOG=debug|info|warning|error)"
_EXAMPLES = """examples:
  kubemux demo                  simulated clusters in the web dashboard (no cluster needed)
  kubemux dashboard             the web dashboard for your kubeconfig, on 127.0.0.1:8000
  kubemux get pods --all-contexts   every context's pods, with kubectl's columns
  kubemux get all -A --context a --context b  kubectl's `get all`, in two contexts
  kubemux watch pods -A --all-contexts  every pod of every context, live
  kubemux status --probe pods   which contexts answer, and how many pods each has
  kubemux status -f --probe pods  the same, kept up to date as contexts change
  kubemux proxy --write-kubeconfig ~/.kube/kubemux.yaml  kubectl's reads from the caches
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

    _get.add_parsers(sub, common)

    s = sub.add_parser(
        "status",
        parents=[common],
        help="a table of contexts and their states",
        description="Load the kubeconfig and show every context. With --probe, "
        "start a watcher for that resource in each context first.",
    )
    s.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
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
        "(it has no authentication of its own, unless --user-tokens).",
    )
    b.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
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
    b.add_argument(
        "--user-tokens",
        action="store_true",
        help="each user logs in with their own bearer token and sees only what it may list "
        "(checked by TokenReview and RBAC in each context; see docs/many-users.md)",
    )
    b.add_argument(
        "--tls-cert-file",
        default=None,
        help="serve HTTPS with this certificate (PEM; with --tls-private-key-file)",
    )
    b.add_argument("--tls-private-key-file", default=None, help="the certificate's key (PEM)")
    b.add_argument("--open", action="store_true", help="open the dashboard in a web browser")
    b.add_argument("--duration", type=float, default=None, help=argparse.SUPPRESS)
    _relay.add_parser(sub)
    _proxy.add_parser(sub, common)
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
        if all(isinstance(e, KeyboardInterrupt) for e in exception_leaves(group)):
            return 130
        raise
    finally:
        if PIPE_CLOSED in OUTCOME:
            silence_stdout()


async def run(
    argv: Sequence[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run a ``kubemux`` command in the running event loop (for tests and embedding).

    Usage errors raise ``SystemExit`` like the command does; other errors are printed as
    one line on ``stderr`` and give exit status 1. Logging is left as the caller set it.
    """
    args = _parser().parse_args(argv)
    return await _run_parsed(args, stdout or sys.stdout, stderr or sys.stderr)


async def _run_parsed(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        return await _dispatch(args, out, err)
    except BaseException as exc:
        leaves = exception_leaves(exc)
        if any(is_closed_pipe(e) for e in leaves):  # `kubemux watch pods | head`
            OUTCOME.add(PIPE_CLOSED)
            return 0
        if len(leaves) == 1 and isinstance(leaves[0], REPORTED):
            report(leaves[0], err)
            return 1
        raise


async def _dispatch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    with open_file_limits():  # each watch holds a connection: raise the soft limit first
        return await _command(args, out, err)


async def _command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.command == "relay":
        return await _relay.relay(args, out)
    if args.command == "proxy":
        return await _proxy.proxy(args, out, err)
    if args.command == "get" and not args.watch:
        return await _get.get(args, out, err)
    if args.command in ("get", "watch"):
        return await _watch.watch(args, out, err)
    if args.command == "status":
        return await _status.status(args, out, err)
    if args.command == "dashboard":
        return await _dashboard.dashboard(args, out)
    return await _dashboard.demo(args, out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
