"""``kubemux proxy``: every context's Kubernetes API, served from kubemux's caches."""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any, TextIO

import anyio
import anyio.abc

from .._kubeconfig.load import load_kubeconfig
from .._redact import redact_url, terminal_safe
from .._registry.registry import WatcherRegistry
from .._runtime import raise_fd_limit
from ._output import KUBECONFIG_HELP, CommandError

_DESCRIPTION = """\
Serve the Kubernetes API of every context of the kubeconfig on one local HTTPS port, under
/clusters/{context}/. Reads (LIST, GET, WATCH) are answered from kubemux's informers where
the answer can be the API server's own; discovery from a per-context cache; everything
else (writes, logs, exec, port-forward) goes to the context's API server with the
context's credentials. With --write-kubeconfig OUT, OUT points kubectl at the proxy (same
context names, namespaces and current context; the proxy's CA and token, no upstream
credential) and is kept current as the kubeconfig changes.

  kubemux proxy --write-kubeconfig ~/.kube/kubemux.yaml
  kubectl --kubeconfig ~/.kube/kubemux.yaml get pods -A
"""


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "proxy",
        parents=[common],
        help="serve every context's Kubernetes API from the caches (for kubectl)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--kubeconfig", action="append", default=None, metavar="PATH", help=KUBECONFIG_HELP
    )
    p.add_argument(
        "--address",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; anything else needs --allow-remote)",
    )
    p.add_argument("--port", type=int, default=8001, help="port (default 8001; 0: any free port)")
    p.add_argument(
        "--write-kubeconfig",
        metavar="OUT",
        default=None,
        help="write a kubeconfig for the proxy to OUT (mode 0600) and keep it current",
    )
    p.add_argument(
        "--share",
        metavar="URL",
        default=None,
        help="share upstream watches with other replicas through Redis (redis://...)",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow --address to be a non-loopback address (exposes your clusters to "
        "whoever holds the token)",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="answer nothing from the caches: forward every request (like kubectl proxy)",
    )
    p.add_argument(
        "--consistent-reads",
        action="store_true",
        help="reads with resourceVersion unset are at least as fresh as the API server when "
        "they arrive (a limit=1 LIST learns its version; the cache is waited for, else the "
        "read goes upstream). Default: monotonic, as fresh as the watch, never going back",
    )
    p.add_argument(
        "--user-tokens",
        action="store_true",
        help="every client sends its own bearer token for the context's cluster; reads "
        "from the caches are authorized per user as the API server would, everything else "
        "goes upstream with the user's token (the proxy issues and accepts no token of its "
        "own; --write-kubeconfig writes no credential)",
    )
    p.add_argument(
        "--audit-log",
        metavar="PATH",
        default=None,
        help="with --user-tokens: append a JSON line per request to PATH (who, what, "
        "answered from the cache, upstream or denied, status, bytes; never a token)",
    )
    p.add_argument("--duration", type=float, default=None, help=argparse.SUPPRESS)


def _paths(args: argparse.Namespace) -> list[str] | None:
    if not args.kubeconfig:
        return None
    paths: list[str] = []
    for item in args.kubeconfig:
        paths.extend(p for p in item.split(os.pathsep) if p)
    return paths or None


async def proxy(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        from ..proxy import ProxyServer, ProxySettings
        from ..proxy._serve.server import is_loopback
    except ImportError as exc:
        raise CommandError(
            "the proxy needs starlette, uvicorn, httptools, websockets and cryptography "
            f"(pip install 'kubemux[proxy]'): {exc}"
        ) from exc
    if not is_loopback(args.address) and not args.allow_remote:
        raise CommandError(
            f"--address {terminal_safe(args.address)} is not a loopback address: add "
            "--allow-remote to serve your clusters to the network"
        )
    if not 0 <= args.port <= 65535:
        raise CommandError(f"--port {args.port} is not a TCP port")
    paths = _paths(args)
    load_kubeconfig(paths)  # fail now, with one line, rather than inside the server
    before, now = raise_fd_limit() or (0, 0)
    share: Any = None
    if args.share:
        from ..share import Redis

        share = Redis(args.share)
    # the proxy answers what the API server answers: keep managedFields (kubemux drops
    # them by default to save memory)
    registry = WatcherRegistry.from_kubeconfig(paths, transform=None, share=share)
    if args.audit_log and not args.user_tokens:
        raise CommandError("--audit-log needs --user-tokens")
    settings = ProxySettings(
        cache_reads=not args.no_cache,
        consistent_reads=args.consistent_reads,
        user_tokens=args.user_tokens,
        audit_log=args.audit_log,
    )
    async with registry, anyio.create_task_group() as tg:
        server = ProxyServer(
            registry,
            address=args.address,
            port=args.port,
            allow_remote=args.allow_remote,
            settings=settings,
            tls_read_buffer=16 * 1024,  # not asyncio's 256 KiB per connection (watches)
        )
        url: str = await tg.start(_serve, server, tg)
        if args.write_kubeconfig:
            await anyio.to_thread.run_sync(server.write_kubeconfig, args.write_kubeconfig)
            tg.start_soon(server.follow_kubeconfig, args.write_kubeconfig)
        lines = [
            f"kubemux proxy: {len(registry.contexts)} contexts on {url}/clusters/{{context}}/"
            + (f" (sharing through {redact_url(args.share)})" if args.share else ""),
        ]
        if args.write_kubeconfig:
            target = terminal_safe(str(args.write_kubeconfig))
            lines.append(f"  kubectl --kubeconfig {target} get pods -A")
        else:
            lines.append("  (--write-kubeconfig OUT writes a kubeconfig for kubectl)")
        if before and now > before:
            lines.append(f"  open-file limit raised from {before} to {now}")
        if args.user_tokens:
            lines.append("  each client authenticates with its own token for the cluster")
        elif not is_loopback(args.address):
            lines.append(
                f"warning: listening on {terminal_safe(args.address)}: anyone who can reach "
                "it and holds the token in the kubeconfig acts with your clusters' credentials"
            )
        lines.append("Ctrl-C to stop.")
        out.write("\n".join(lines) + "\n")
        out.flush()
        tg.start_soon(_stop_on_signal, server)
        if args.duration is not None:
            await anyio.sleep(args.duration)
            server.shutdown()
    out.write("kubemux proxy: stopped\n")
    return 0


async def _serve(
    server: Any, tg: anyio.abc.TaskGroup, *, task_status: anyio.abc.TaskStatus[str]
) -> None:
    await server.serve(task_status=task_status)
    tg.cancel_scope.cancel("the proxy stopped")


async def _stop_on_signal(server: Any) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            server.shutdown()
            return
