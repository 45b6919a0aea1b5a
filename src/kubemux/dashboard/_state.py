"""The dashboard's state (:class:`Dashboard`) and the admission of event streams."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import anyio
import orjson
from starlette.applications import Starlette
from starlette.requests import Request

from kubemux import (
    ApiError,
    ClusterUnreachable,
    ContextNotFound,
    ContextRemoved,
    KubemuxError,
    NotSynced,
    Resource,
    ResourceNotFound,
    Store,
    WatcherRegistry,
    parse_resource,
)

from .._authz.authorizer import Authorizer, AuthorizerSettings
from ._broadcast import Hub
from ._context import StreamContext
from ._encoding import Encodings
from ._panel import Panel, build_panel
from ._responses import Problem
from ._sessions import Sessions
from ._signals import chain_exit_signals
from ._snapshots import SnapshotCache
from .views import status_payload

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["Dashboard", "Problem", "dashboard_of"]


def _metrics_module() -> ModuleType | None:
    """:mod:`kubemux.metrics` if ``prometheus-client`` is installed."""
    try:
        import kubemux.metrics
    except ImportError:
        return None
    return kubemux.metrics


CONTEXTS_TTL = 0.05  # seconds a contexts panel is shared before it is built again
ADMISSION_RATE = 200.0  # event streams started per second, at most, after a burst of
ADMISSION_BURST = 20


class Dashboard:
    """The app's state: settings, and the registry while the app runs.

    Args:
        registry: A running registry to serve; the app neither opens nor closes it. ``None``:
            the app opens its own from ``kubeconfig`` in its lifespan.
        kubeconfig: Kubeconfig path(s) for an own registry; ``None``: ``$KUBECONFIG`` or
            ``~/.kube/config``.
        resource: The default resource; an own registry watches it in every context.
        registry_options: More keyword arguments for ``WatcherRegistry.from_kubeconfig``.
        sync_timeout: How long an API call waits for a first LIST before answering 503.
        status_period: Longest delay before a change of state reaches the contexts panel.
        title: Shown in the page header.
        max_streams: Event streams served at once; one more is answered 503.
        stream_send_timeout: A stream whose client has not taken what was sent for this
            long is closed (a client that stopped reading holds nothing for ever).
        user_tokens: Serve each user what their own bearer token may list (a login page,
            a session cookie; see :mod:`._login` and ``docs/many-users.md``) instead of
            everything the kubeconfig's credentials read.
        max_sessions: Logged-in sessions at once, at most (``user_tokens``).
        session_ttl: Seconds a session lasts at most; never past its token's expiry.
        authorizer_settings: The contexts' authorizers' settings (``user_tokens``; the first
            settings a context's authorizer gets stay): ``local_allows=False`` for a
            cluster whose authorizer chain may deny before RBAC, ``token_ttl`` for how long
            a token the cluster stopped accepting keeps working.
    """

    def __init__(
        self,
        registry: WatcherRegistry | None = None,
        *,
        kubeconfig: str | Sequence[str] | None = None,
        resource: str = "pods",
        registry_options: Mapping[str, Any] | None = None,
        sync_timeout: float = 2.0,
        status_period: float = 1.0,
        title: str = "kubemux dashboard",
        max_streams: int = 200,
        stream_send_timeout: float = 15.0,
        user_tokens: bool = False,
        max_sessions: int = 1000,
        session_ttl: float = 8 * 3600.0,
        authorizer_settings: AuthorizerSettings | None = None,
    ) -> None:
        if registry is not None and not isinstance(registry, WatcherRegistry):
            raise TypeError(
                f"registry must be a WatcherRegistry or None, not {type(registry).__name__} "
                "(a kubeconfig path goes in kubeconfig=...)"
            )
        if registry is not None and (kubeconfig is not None or registry_options):
            raise ValueError("kubeconfig and registry_options are for an own registry only")
        self.kubeconfig = kubeconfig
        self.resource = parse_resource(resource)
        self.registry_options = dict(registry_options or {})
        self.sync_timeout = sync_timeout
        self.status_period = status_period
        self.title = title
        self.max_streams = max_streams
        self.stream_send_timeout = stream_send_timeout
        self.streams = 0  # open event streams
        self.stream_scopes: set[anyio.CancelScope] = set()  # cancelled by close_streams()
        self._next_admission = 0.0
        self.metrics = _metrics_module()
        # /metrics: the registry's collector is registered here for the lifespan
        self.prom: CollectorRegistry | None = None
        if self.metrics is not None:
            import prometheus_client

            self.prom = prometheus_client.CollectorRegistry()
        self._metrics_registered = False
        self.snapshots = SnapshotCache()
        self.encodings = Encodings()  # the app's own, as its snapshots
        # the pickers' questions to every context, answered from what is kept (._answers)
        self.answers: dict[str, Any] = {}
        # what the event streams read of the dashboard: they and the hub hold this, not it
        self.stream_context = StreamContext(
            title=title,
            sync_timeout=sync_timeout,
            status_period=status_period,
            stream_send_timeout=stream_send_timeout,
            snapshots=self.snapshots,
            encodings=self.encodings,
            running_registry=lambda: self.registry,
            contexts_json=self.contexts_json,
            panel=self.panel,
        )
        self.hub = Hub(self.stream_context)  # the event streams' views, run in the lifespan
        self._contexts_cache: tuple[int, float, bytes] | None = None
        self._panel_cache: tuple[int, float, Panel] | None = None
        self._external = registry
        self._registry: WatcherRegistry | None = registry
        self._closing: anyio.Event | None = None
        self._close_requested = False
        self._listeners: list[Callable[[BaseException | None], None]] = []
        self._unchain: Callable[[], None] | None = None  # see chain_exit_signals
        self.user_tokens = user_tokens
        self.sessions = Sessions(max_sessions=max_sessions, ttl=session_ttl)
        self.authorizer_settings = authorizer_settings
        self.authorizers: dict[str, Authorizer] = {}  # context -> its authorizer, once asked

    @property
    def registry(self) -> WatcherRegistry:
        """The running registry (an own one between lifespan startup and shutdown)."""
        if self._registry is None:
            raise Problem(503, "the dashboard is not running", retry_after=1)
        return self._registry

    def on_startup(self, callback: Callable[[BaseException | None], None]) -> None:
        """Call ``callback(None)`` once the registry runs, or ``callback(error)`` if it fails."""
        self._listeners.append(callback)

    def close_streams(self) -> None:
        """End every open event stream (before a server shutdown: they would hold it up)."""
        self._close_requested = True
        self._end_streams()

    def _end_streams(self) -> None:
        if self._closing is not None:
            self._closing.set()
        for scope in list(self.stream_scopes):
            scope.cancel("dashboard shutting down")

    def chain_exit_signals(self) -> None:
        """End the streams as soon as the server is told to exit (:mod:`._signals`);
        once, from the lifespan's start or, in a mounted app, from the first stream."""
        if self._unchain is None:
            self._unchain = chain_exit_signals(self.close_streams)

    async def admit(self) -> None:
        """Wait for a new stream's turn to start (an event stream's or a log's).

        Streams start at most ``ADMISSION_RATE`` a second after a burst of
        ``ADMISSION_BURST``: a thousand browsers connecting at once are spread over a few
        seconds, and the event loop keeps turning meanwhile (a queue of timers, no task).
        """
        self.chain_exit_signals()
        now = time.monotonic()
        turn = max(self._next_admission, now - ADMISSION_BURST / ADMISSION_RATE)
        self._next_admission = turn + 1 / ADMISSION_RATE
        if turn > now:
            await anyio.sleep(turn - now)
        if self._close_requested:
            raise Problem(503, "the dashboard is shutting down", retry_after=1)

    async def wait_closing(self) -> None:
        """Return once :meth:`close_streams` was called or the app shuts down."""
        if self._closing is None:
            self._closing = anyio.Event()
        if self._close_requested:
            self._closing.set()
        await self._closing.wait()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Open the registry for the app's lifetime (unless it was given one)."""
        self._closing = anyio.Event()
        self._close_requested = False
        self.chain_exit_signals()
        try:
            async with self._running():
                yield
        finally:
            if self._unchain is not None:
                self._unchain()
                self._unchain = None

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        if self._external is not None:
            for callback in self._listeners:
                callback(None)
            try:
                with self._registered(self._external):
                    async with self.hub.running():
                        yield
            finally:
                self._end_streams()
            return
        # The live table shows the server's columns: the table view is the one watch of the
        # default resource (an object page watches full objects while it is open).
        options: dict[str, Any] = {
            "autowatch": [self.resource],
            "autowatch_view": "table",
            **self.registry_options,
        }
        started = False
        try:
            async with WatcherRegistry.from_kubeconfig(self.kubeconfig, **options) as registry:
                self._registry = registry
                started = True
                for callback in self._listeners:
                    callback(None)
                try:
                    with self._registered(registry):
                        async with self.hub.running():
                            yield
                finally:
                    self._end_streams()
                    self._registry = None
                    self.sessions.clear()  # their users' rights came from this registry
                    self.authorizers.clear()
                    self.snapshots.clear()
                    self.answers.clear()
        except BaseException as exc:
            if not started:
                for callback in self._listeners:
                    callback(exc)
            raise

    @contextlib.contextmanager
    def _registered(self, registry: WatcherRegistry) -> Iterator[None]:
        """Report ``registry`` in :attr:`prom` (if ``prometheus-client`` is installed)."""
        if self.metrics is None or self.prom is None:
            yield
            return
        with self.metrics.registered(registry, self.prom):
            self._metrics_registered = True
            try:
                yield
            finally:
                self._metrics_registered = False

    def scrape(self) -> bytes:
        """The Prometheus text exposition of the registry's metrics.

        A mounted app has no lifespan: the registry is then registered for the scrape.
        """
        from prometheus_client import generate_latest as generate

        assert self.prom is not None
        if self._metrics_registered:
            return bytes(generate(self.prom))
        with self._registered(self.registry):
            return bytes(generate(self.prom))

    def contexts_json(self, version: int) -> bytes:
        """``status_payload`` encoded, shared by every stream and ``/api/contexts``.

        Recomputed when the registry's ``status_version`` moved, or after ``CONTEXTS_TTL``
        (object counts change without it).
        """
        now = time.monotonic()
        cached = self._contexts_cache
        if cached is not None and cached[0] == version and now - cached[1] < CONTEXTS_TTL:
            return cached[2]
        raw = orjson.dumps(status_payload(self.registry.status()))
        self._contexts_cache = (version, now, raw)
        return raw

    def panel(self, version: int) -> Panel:
        """The streams' contexts panel (:mod:`._panel`), built once for every stream; again
        when the registry's ``status_version`` moved, or after ``CONTEXTS_TTL``."""
        now = time.monotonic()
        cached = self._panel_cache
        if cached is not None and cached[0] == version and now - cached[1] < CONTEXTS_TTL:
            return cached[2]
        panel = build_panel(self.registry.status())
        self._panel_cache = (version, now, panel)
        return panel

    async def ready_store(self, context: str, resource: Resource) -> Store:
        """The context's synced store of ``resource``, starting its watcher if needed.

        Raises:
            Problem: 404 (unknown context or resource type), 503 (not synced within
                ``sync_timeout``, unreachable, reloading) or 502 (the API server refused).
        """
        registry = self.registry
        store = registry.store(context, resource)
        if store is not None:
            return store
        with anyio.move_on_after(self.sync_timeout):
            try:
                return await registry.watch(context, resource)
            except KubemuxError as exc:
                raise self.problem(exc, context) from exc
        raise Problem(
            503, f"{resource.name} in context {context!r} is not synced yet", retry_after=1
        )

    def problem(self, exc: KubemuxError, context: str) -> Problem:
        """The HTTP answer to a kubemux error."""
        message = str(exc)
        if isinstance(exc, ContextNotFound | ResourceNotFound):
            return Problem(404, message)
        if isinstance(exc, ContextRemoved | NotSynced):
            return Problem(503, message, retry_after=1)
        if isinstance(exc, ClusterUnreachable):
            return Problem(503, message, retry_after=self._retry_in(context))
        if isinstance(exc, ApiError):
            return Problem(502, message)
        return Problem(502, message)

    def _retry_in(self, context: str) -> float:
        ctx = self.registry.status().contexts.get(context)
        return ctx.retry_in if ctx is not None and ctx.retry_in else 1.0


def dashboard_of(request: Request) -> Dashboard:
    """The :class:`Dashboard` of the app serving ``request``."""
    dashboard = request.app.state.dashboard
    assert isinstance(dashboard, Dashboard)
    return dashboard
