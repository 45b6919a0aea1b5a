"""A watch answered from the cache (:func:`serve_watch`): its format, filter and lifetime
from the request, written by its store's broadcaster through :func:`~.reads.stream_watch`,
and, when the server offers it (:data:`~.._watch.flow.DETACH`, the proxy's HTTP/2 side),
without its task once its starting point is written."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Receive, Scope, Send

from ..._resources import Resource
from .._query.options import ListOptions, plan_watch, watch_timeout
from .._query.selectors import ObjectFilter
from .._watch.flow import DETACH, ON_DISCONNECT, Flow
from .._watch.watch import ObjectWatchFormat, TableWatchFormat, WatchFormat
from .reads import ReadRequest, stream_watch
from .served import ServedStore
from .table_join import served_columns

__all__ = ["serve_watch"]


async def serve_watch(
    served: ServedStore,
    resource: Resource,
    read: ReadRequest,
    options: ListOptions,
    scope: Scope,
    receive: Receive,
    send: Send,
    flow: Flow,
    hold: Callable[[], Callable[[], None]],
) -> None:
    """Serve one watch of ``served``; ``hold`` counts it once more (its watch slot), for
    as long as it goes on without its task, and gives the release."""
    plan = plan_watch(options)
    fmt: WatchFormat
    if read.view == "table":
        fmt = TableWatchFormat(
            served_columns(served), read.include_object, f"meta.k8s.io/{read.table_version}"
        )
    else:
        fmt = ObjectWatchFormat(resource.kind, resource.api_version)
    filt = ObjectFilter(read.namespace, options.label_selector, options.field_selector)
    lifetime = watch_timeout(options.timeout_seconds)
    await stream_watch(
        lambda write, detach: served.broadcaster.serve(
            plan, fmt, filt, write, watch_timeout=lifetime, flow=flow, detach=detach
        ),
        receive,
        send,
        lag=served.lag,
        flow=flow,
        touch=served.touch,
        disconnect_hook=scope.get(ON_DISCONNECT),
        detach=scope.get(DETACH),
        keep=hold,
    )
