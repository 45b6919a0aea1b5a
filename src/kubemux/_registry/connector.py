"""The seam through which a context generation gets its data.

A :class:`Connector` turns a :class:`ContextConfig` into a :class:`Connection` (an async
context manager: entering it connects, leaving it closes everything it opened). A
connection builds one :class:`SlotSource` per informer slot: the thing that fills the
slot's store, through the store's writer (which announces every change to the store's
listeners: a source passes nothing on by hand). HTTP to the API server (:class:`HttpConnector`) is
the only connector built in; credentials that refresh live below it (in the client), and a
shared-watch engine wraps it (it decides per slot whether to run the HTTP informer or to
follow another replica's).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import anyio.abc

from .._auth.pool import CredentialPool
from .._auth.provider import CredentialStatus
from .._cache.store import Store
from .._errors import KubemuxError, UnknownResource
from .._http.client import ContextClient, open_client
from .._informer.discovery import Discovery, resolve
from .._informer.informer import Informer, InformerKey, InformerStatus
from .._informer.served import ServedWatch
from .._kubeconfig.load import ContextConfig
from .._resources import Resource, known_resource, parse_resource
from .._settings import WatchSettings

__all__ = [
    "Connection",
    "Connector",
    "HttpConnection",
    "HttpConnector",
    "SharedConnector",
    "Sharing",
    "SlotSource",
]

log = logging.getLogger(__name__)


class SlotSource(Protocol):
    """Keeps one slot's store filled. :class:`~kubemux._informer.informer.Informer` is one."""

    @property
    def has_synced(self) -> bool: ...

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Fill the store, report ``task_status.started()``, then keep it current until
        cancelled. Raises (a :class:`KubemuxError`) before ``started()`` when the first
        sync fails; failures after it are retried inside."""

    def status(self) -> InformerStatus: ...


class Connection(Protocol):
    """One context generation's link to its data."""

    async def resources(self) -> tuple[Resource, ...]:
        """What the cluster serves (discovery, preferred versions)."""

    async def resolve(self, name: str) -> Resource:
        """What a kubectl-style name means on this cluster.

        Raises:
            UnknownResource: the cluster serves nothing of that name.
        """

    def resolve_cached(self, name: str) -> Resource | None:
        """:meth:`resolve` from what is already known, without I/O; None if unknown."""

    def credential_status(self) -> CredentialStatus | None:
        """The refreshing credential's state (never the credential), if any."""

    def source(
        self,
        resource: Resource,
        key: InformerKey,
        *,
        store: Store,
        on_state: Callable[[], None],
    ) -> SlotSource:
        """What fills ``store`` for ``key`` (``on_state``: called when its status changes)."""


class Connector(Protocol):
    """Connects a context generation: ``async with connector.connect(cfg) as conn``.

    Entering may take time (exec plugins, TLS files) and is cancelled when the generation
    is stopped or its start time limit passes; it raises a :class:`KubemuxError` when the
    context cannot be used.

    The registry enters :meth:`open` for its whole lifetime, before any generation connects
    and until every one has ended: a connector opens there whatever it shares between
    generations (a shared-watch engine its session) and closes it on exit.
    """

    def open(self) -> contextlib.AbstractAsyncContextManager[None]: ...

    def connect(
        self, config: ContextConfig
    ) -> contextlib.AbstractAsyncContextManager[Connection]: ...


class SharedConnector(Connector, Protocol):
    """A connector that shares its slots with other replicas (``kubemux.share``)."""

    def placement_status(self) -> object:
        """This replica's part in sharing, for ``status().share`` (None: nothing to say)."""


class Sharing(Protocol):
    """What ``WatcherRegistry(share=...)`` takes: a share engine (``kubemux.share.Redis``),
    which wraps the registry's HTTP connector in its own. The registry knows engines only
    through this: the share package sits above it and is imported by nothing below."""

    def connector(self, http: Connector, *, can_lead: bool) -> SharedConnector:
        """A connector that runs ``http``'s slots shared through this engine (``can_lead``:
        False, only follow)."""


class HttpConnection:
    """Informers talking HTTP to the context's API server through one client."""

    __slots__ = ("_discovery_failed", "client", "discovery", "served", "settings")

    def __init__(self, client: ContextClient, settings: WatchSettings) -> None:
        self.client = client
        self.settings = settings
        # a miss refreshes at once (a CRD installed a moment ago must resolve); the
        # client's rate limiter bounds what a stream of unknown names can cost
        self.discovery = Discovery(client, min_refresh_interval=0.0)
        self._discovery_failed = False
        self.served = ServedWatch(client, self.discovery, settings)  # a CRD that comes back

    async def resources(self) -> tuple[Resource, ...]:
        return await self.discovery.resources()

    def credential_status(self) -> CredentialStatus | None:
        return self.client.credential_status()

    async def resolve(self, name: str) -> Resource:
        known = known_resource(name)
        if known is not None:  # built-ins mean the same on every cluster: no request
            return known
        try:
            resource = await self.discovery.resolve(name)
        except UnknownResource:
            self._discovery_works()
            raise
        except KubemuxError as exc:
            # a server whose discovery fails (or is missing) still serves the built-ins
            try:
                resource = parse_resource(name)
            except ValueError:
                raise exc from None
            if not self._discovery_failed:
                self._discovery_failed = True
                log.warning(
                    "context %r: discovery failed (%s); using the built-in resource table",
                    self.client.context,
                    exc,
                )
            return resource
        self._discovery_works()
        return resource

    def _discovery_works(self) -> None:
        """Discovery answered: a failure it had no longer holds (the next one is logged)."""
        if self._discovery_failed:
            self._discovery_failed = False
            log.info("context %r: discovery works again", self.client.context)

    def resolve_cached(self, name: str) -> Resource | None:
        builtin = known_resource(name)
        if builtin is not None:
            return builtin
        known = self.discovery.cached()
        if known is not None:
            try:
                return resolve(name, known, context=self.client.context)
            except UnknownResource:
                return None
        try:
            return parse_resource(name)
        except ValueError:
            return None

    def source(
        self,
        resource: Resource,
        key: InformerKey,
        *,
        store: Store,
        on_state: Callable[[], None],
    ) -> SlotSource:
        informer = Informer(  # the format of key.view: objects or the server's rows
            self.client,
            resource,
            key,
            settings=self.settings,
            store=store,
            on_state=on_state,
        )
        informer.wait_served = self.served.wait
        return informer


class HttpConnector:
    """The built-in connector: one kubernetes-asyncio client per generation, credentials
    from one pool (contexts sharing a user share its exec plugin, token file, OIDC)."""

    __slots__ = ("credentials", "settings")

    def __init__(self, settings: WatchSettings, credentials: CredentialPool | None = None) -> None:
        self.settings = settings
        self.credentials = credentials if credentials is not None else CredentialPool()

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """Nothing to open: every generation opens its own client."""
        yield

    def connect(self, config: ContextConfig) -> contextlib.AbstractAsyncContextManager[Connection]:
        return self.connect_http(config)

    @contextlib.asynccontextmanager
    async def connect_http(self, config: ContextConfig) -> AsyncIterator[HttpConnection]:
        """:meth:`connect`, typed: for a connector that builds on the HTTP one (sharing)."""
        async with open_client(config, credentials=self.credentials) as client:
            yield HttpConnection(client, self.settings)
