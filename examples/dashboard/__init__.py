"""A live dashboard of every kubeconfig context, built on kubemux.

``create_app(kubeconfig)`` returns a Starlette app that owns one ``WatcherRegistry`` in its
lifespan and serves pages, a JSON API and server-sent events; ``DashboardServer`` runs it
with uvicorn inside the current event loop. ``kubemux demo`` and ``kubemux dashboard`` use
both.
"""

from __future__ import annotations

from .app import LOCAL_HOSTS as LOCAL_HOSTS
from .app import Dashboard as Dashboard
from .app import create_app as create_app
from .server import DashboardServer as DashboardServer

__all__ = ["LOCAL_HOSTS", "Dashboard", "DashboardServer", "create_app"]
