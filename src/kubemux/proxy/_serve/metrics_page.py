"""``/metrics`` at the proxy's root: the registry's metrics and the proxy's reads, in
Prometheus' text format (when ``prometheus-client`` is installed: ``kubemux[metrics]``).
Behind :class:`~kubemux.proxy.ProxyServer` it needs the token, as everything else."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["metrics_routes"]


def metrics_routes(proxy: Any) -> list[Route]:
    """The ``/metrics`` route of ``proxy`` (a :class:`~.app.Proxy`), or none without
    prometheus-client."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        from ...metrics import KubemuxCollector, ProxyReadsCollector
    except ImportError:  # pragma: no cover - depends on the install
        return []
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KubemuxCollector(proxy.registry))
    registry.register(ProxyReadsCollector(proxy))

    async def metrics(_request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return [Route("/metrics", metrics, methods=["GET"])]
