"""Run this process N times: together they open one watch per cluster identity and resource.

    python examples/shared_watches.py redis://127.0.0.1:6379/0 [KUBECONFIG]

Needs the ``share`` extra (``pip install 'kubemux[share]'``) and a Redis server. Each
replica prints every context's share role whenever it changes (one leader per cluster
identity, the others follow). `tests/test_share_registry.py` runs it.
"""

from __future__ import annotations

import sys

import anyio

import kubemux
from kubemux.share import Redis


def roles(registry: kubemux.WatcherRegistry) -> dict[str, str | None]:
    """context -> the share role of its pods informer (leader, follower or local)."""
    return {
        name: informer.share_role
        for name, context in registry.status().contexts.items()
        for informer in context.informers
        if informer.resource == "pods" and informer.has_synced
    }


async def main(
    redis_url: str, kubeconfig: str | None = None, *, once: bool = False
) -> dict[str, str | None]:
    share = Redis(redis_url)  # share_lead=False below would only follow (a dashboard)
    registry = kubemux.WatcherRegistry.from_kubeconfig(kubeconfig, share=share)
    async with registry:
        for context in registry.contexts:
            await registry.watch(context, "pods")  # synced, as leader or follower
        shown = None
        while True:
            version = registry.status_version
            now = roles(registry)
            if now != shown:
                print(", ".join(f"{c}: {r}" for c, r in now.items()))
                shown = now
            if once:
                return now
            await registry.wait_status_change(version)  # a role change moves it too


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
