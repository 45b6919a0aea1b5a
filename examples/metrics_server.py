"""Prometheus metrics for every context of a kubeconfig, on an aiohttp server.

    python examples/metrics_server.py [KUBECONFIG]
    curl http://127.0.0.1:9108/metrics

Needs the `metrics` extra (prometheus-client). `tests/test_docs.py` scrapes it.
"""

from __future__ import annotations

import sys

import anyio
import prometheus_client
from aiohttp import web

import kubemux
import kubemux.metrics


def make_app(registry: kubemux.WatcherRegistry) -> web.Application:
    """An aiohttp app serving ``GET /metrics`` for ``registry``."""
    prom = prometheus_client.CollectorRegistry()  # or the global prometheus_client.REGISTRY
    kubemux.metrics.register(registry, prom)  # read at each scrape, nothing per event

    async def metrics(request: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(prom)  # on the event loop: no thread
        return web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


async def main(kubeconfig: str | None = None, port: int = 9108) -> None:
    async with kubemux.WatcherRegistry.from_kubeconfig(kubeconfig, autowatch=["pods"]) as registry:
        runner = web.AppRunner(make_app(registry))
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", port).start()
            print(f"serving http://127.0.0.1:{port}/metrics")
            await anyio.sleep_forever()
        finally:
            await runner.cleanup()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else None)
