"""``kubemux relay``: a headless registry leading shared watches."""

from __future__ import annotations

import argparse
import os
from typing import Any, TextIO

import anyio
import anyio.abc
import anyio.to_thread

from .._redact import redact_url
from .._registry.registry import WatcherRegistry
from .._resources import parse_resource
from ._output import KUBECONFIG_HELP


# ---------------------------------------------------------------------- relay (shared watches)
def add_parser(sub: Any) -> None:
    r = sub.add_parser(
        "relay",
        help="lead shared watches for other replicas (headless)",
        description="Run a headless registry that leads the shared watches of every context "
        "of the kubeconfig (kubemux.share, docs/sharing.md), so that replicas started with "
        "share_lead=False (dashboards) can follow them. Runs until interrupted.",
    )
    r.add_argument("--share", required=True, metavar="URL", help="the Redis URL (redis://...)")
    r.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    r.add_argument(
        "--resource",
        nargs="+",
        default=["pods"],
        help="resources every context watches (default: pods)",
    )
    r.add_argument("--prefix", default="kubemux", help="Redis key prefix (default kubemux)")
    r.add_argument("--duration", type=float, default=None, help=argparse.SUPPRESS)


async def relay(args: argparse.Namespace, out: TextIO) -> int:
    import signal

    from ..share import Redis

    for name in args.resource:
        parse_resource(name)  # a usage error before anything starts
    paths = args.kubeconfig.split(os.pathsep) if args.kubeconfig else None
    # a relay leads what no replica in the placement hash is preferred for (issue 22)
    share = Redis(args.share, prefix=args.prefix, placement=False)
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
