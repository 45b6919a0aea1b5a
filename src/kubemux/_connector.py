"""The seam through which a context generation gets its data.

A :class:`Connector` turns a :class:`ContextConfig` into a :class:`Connection` (an async
context manager: entering it connects, leaving it closes everything it opened). A
connection builds one :class:`SlotSource` per informer slot: the thing that fills the
slot's store and reports its changes. HTTP to the API server (:class:`HttpConnector`) is
the only connector built in; credentials that refresh live below it (in the client), and a
shared-watch engine wraps it (it decides per slot whether to run the HTTP informer or to
follow another replica's).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from ._client import ContextClient, open_client
from ._codec import Entry
from ._informer import Informer, InformerKey, InformerStatus, OnChange
from ._kubeconfig import ContextConfig
from ._resources import Resource
from ._settings import WatchSettings
from ._store import Store

__all__ = ["Connection", "Connector", "HttpConnection", "HttpConnector", "SlotSource"]


class SlotSource(Protocol):
    """Keeps one slot's store filled. :class:`~kubemux._informer.Informer` is one."""

    @property
    def has_synced(self) -> bool: ...

    async def initial_sync(self) -> None:
        """Fill the store. Raises a :class:`KubemuxError` when that fails."""

    async def watch_forever(self) -> None:
        """Keep the store current until cancelled; failures are retried inside."""

    def status(self) -> InformerStatus: ...

    def snapshot_entries(self, namespace: str | None = None) -> list[Entry]:
        """The objects as announced to subscribers so far."""


class Connection(Protocol):
    """One context generation's link to its data."""

    def source(
        self,
        resource: Resource,
        key: InformerKey,
        *,
        store: Store,
        on_change: OnChange,
        on_state: Callable[[], None],
    ) -> SlotSource: ...


class Connector(Protocol):
    """Connects a context generation: ``async with connector.connect(cfg) as conn``.

    Entering may take time (exec plugins, TLS files) and is cancelled when the generation
    is stopped or its start time limit passes; it raises a :class:`KubemuxError` when the
    context cannot be used.
    """

    def connect(
        self, config: ContextConfig
    ) -> contextlib.AbstractAsyncContextManager[Connection]: ...


class HttpConnection:
    """Informers talking HTTP to the context's API server through one client."""

    __slots__ = ("client", "settings")

    def __init__(self, client: ContextClient, settings: WatchSettings) -> None:
        self.client = client
        self.settings = settings

    def source(
        self,
        resource: Resource,
        key: InformerKey,
        *,
        store: Store,
        on_change: OnChange,
        on_state: Callable[[], None],
    ) -> SlotSource:
        return Informer(
            self.client,
            resource,
            key,
            settings=self.settings,
            store=store,
            on_change=on_change,
            on_state=on_state,
        )


class HttpConnector:
    """The built-in connector: one kubernetes-asyncio client per generation."""

    __slots__ = ("settings",)

    def __init__(self, settings: WatchSettings) -> None:
        self.settings = settings

    @contextlib.asynccontextmanager
    async def connect(self, config: ContextConfig) -> AsyncIterator[Connection]:
        async with open_client(config) as client:
            yield HttpConnection(client, self.settings)
