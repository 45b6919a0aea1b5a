"""The Kubernetes API of every kubeconfig context, served from kubemux's caches.

``kubemux proxy`` (the command) and :func:`create_app` (the same as an ASGI app) serve
``/clusters/{context}/...`` for each context of a :class:`~kubemux.WatcherRegistry`:
discovery from a per-context cache, LIST, GET and WATCH from kubemux's informers where the
answer can be the API server's own, and everything else (writes, subresources, logs,
exec, attach and port-forward over WebSocket) forwarded to the context's API server with
the context's credentials. :class:`ProxyServer` adds TLS, a bearer token, a Host check and
the kubeconfig that points kubectl at it. See ``docs/proxy.md``.

Needs the ``proxy`` extra (starlette, uvicorn, httptools, websockets, cryptography).
"""

from __future__ import annotations

from ._api.paths import decode_context as decode_context
from ._api.paths import encode_context as encode_context
from ._reads.freshness import ReadStatistics as ReadStatistics
from ._serve.app import Proxy as Proxy
from ._serve.app import ProxySettings as ProxySettings
from ._serve.app import ProxyStatistics as ProxyStatistics
from ._serve.app import create_app as create_app
from ._serve.server import ProxyServer as ProxyServer
from ._serve.tls import ProxyCertificates as ProxyCertificates
from ._serve.tls import make_certificates as make_certificates
from ._watch.watch import WatchLimits as WatchLimits  # downstream watches (ProxySettings.watch)

__all__ = [
    "Proxy",
    "ProxyCertificates",
    "ProxyServer",
    "ProxySettings",
    "ProxyStatistics",
    "ReadStatistics",
    "WatchLimits",
    "create_app",
    "decode_context",
    "encode_context",
    "make_certificates",
]
