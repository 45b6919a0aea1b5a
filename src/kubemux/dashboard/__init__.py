"""The reference dashboard: a live web view of every kubeconfig context, mountable.

Installed with the ``dashboard`` extra (``pip install 'kubemux[dashboard]'``: starlette,
uvicorn, httptools)::

    from kubemux.dashboard import create_app

    app = create_app()           # owns a registry from the kubeconfig in its lifespan
    app = create_app(registry)   # serves a registry you own; mount it in your app

``create_app`` returns a Starlette (ASGI) app serving pages, a JSON API and server-sent
events; ``DashboardServer`` runs one with uvicorn inside the current event loop. ``kubemux
demo`` and ``kubemux dashboard`` use both. See ``README.md`` beside this file.
"""

from __future__ import annotations

try:
    from .app import LOCAL_HOSTS as LOCAL_HOSTS
    from .app import Dashboard as Dashboard
    from .app import create_app as create_app
    from .server import DashboardServer as DashboardServer
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    if exc.name not in ("starlette", "uvicorn"):
        raise
    raise ImportError(
        f"kubemux.dashboard needs the 'dashboard' extra (pip install 'kubemux[dashboard]'): {exc}",
        name=exc.name,
    ) from exc

__all__ = ["LOCAL_HOSTS", "Dashboard", "DashboardServer", "create_app"]
