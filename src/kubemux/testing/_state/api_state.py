"""The state the fake API server's handlers share, and the records tests read.

``ApiState`` holds the object store, the server's settings, the open watches, the recorded
requests and the scripted faults; ``_http.ApiServer`` adds the entry point and routing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from .._access.authorizer import Webhook
from .._access.identities import Identities
from .._access.rbac import Access
from .._access.tokens import AuthState
from .log_book import LogBook
from .resource import Watch
from .state import ObjectStore

__all__ = ["ApiState", "Fault", "RecordedRequest", "StreamingList"]

StreamingList = bool | Literal["ignore"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRequest:
    """One request as the fake cluster received it.

    Attributes:
        method: ``GET``, ``POST``, ...
        path: The URL path, percent-decoded.
        query: Query parameters (the last value wins when one repeats).
        token: The bearer token sent, or None.
        is_watch: True for ``watch=true`` / ``watch=1`` requests.
        verb: The Kubernetes verb (``get``, ``list``, ``watch``, ``create``, ``update``,
            ``patch``, ``delete``, ``deletecollection``; ``get`` for discovery and other
            non-resource paths).
        resource: The resource's full name (``pods``, ``deployments.apps``), or None.
        namespace: The namespace in the path, or None.
        name: The object's name, or None.
        subresource: ``status``, ``scale``, ``log``, ``exec``, ... or None.
        client_cert: The common name of the client certificate the connection presented,
            or None.
    """

    method: str
    path: str
    query: dict[str, str]
    token: str | None
    is_watch: bool
    # read from the path; not compared, so records built with the five fields above (before
    # these existed) still compare equal
    verb: str = dataclasses.field(default="", compare=False)
    resource: str | None = dataclasses.field(default=None, compare=False)
    namespace: str | None = dataclasses.field(default=None, compare=False)
    name: str | None = dataclasses.field(default=None, compare=False)
    subresource: str | None = dataclasses.field(default=None, compare=False)
    client_cert: str | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(slots=True)
class Fault:
    remaining: int
    status: int
    reason: str
    path_prefix: str | None
    watch: bool | None
    query_has: tuple[str, ...] = ()

    def matches(self, path: str, is_watch: bool, query: Mapping[str, str]) -> bool:
        if self.path_prefix is not None and not path.startswith(self.path_prefix):
            return False
        if any(key not in query for key in self.query_has):
            return False
        return self.watch is None or self.watch == is_watch


class ApiState:
    """What the fake API server's handlers share: the store, settings, open watches, faults.

    The request entry point and routing (``_http.ApiServer``) build on it; the handlers
    (``_watch_stream``, ``_rest``, ...) take it, so no handler module imports ``_http``.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        tokens: set[str] | None,
        bookmark_period: float,
        streaming_list: StreamingList,
        expired_as_http: bool,
        chunk_buffer: int = 2048,
        aggregated_discovery: bool = True,
        table_format: bool = True,
        auth: AuthState | None = None,
    ) -> None:
        if chunk_buffer < 1:
            raise ValueError(f"chunk_buffer must be positive, not {chunk_buffer}")
        self.store = store
        self.chunk_buffer = chunk_buffer
        self.auth = auth if auth is not None else AuthState(tokens)
        self.auth_required = self.auth.required
        self.tokens: set[str] = self.auth.tokens
        self.bookmark_period = bookmark_period
        self.streaming_list = streaming_list
        self.expired_as_http = expired_as_http
        self.aggregated_discovery = aggregated_discovery
        self.table_format = table_format
        self.access: dict[str, Access] = {}  # token -> its limits (absent: everything)
        self.identities = Identities(lambda: self.auth.clock())  # RBAC-governed user tokens
        self.webhook: Webhook | None = None  # an authorizer after RBAC (FakeCluster.webhook)
        # versions of POST /apis/authentication.k8s.io/<v>/selfsubjectreviews served (else 404)
        self.self_subject_review: frozenset[str] = frozenset(("v1", "v1beta1"))
        # (path, aggregated) -> a discovery document served as given (serve_discovery)
        self.discovery_overrides: dict[tuple[str, bool], Mapping[str, Any]] = {}
        self.requests: list[RecordedRequest] = []
        self.logs = LogBook()
        self.port_targets: dict[int, tuple[str, int]] = {}  # pods/portforward: port -> address
        self.upgrades = 0  # exec, attach and port-forward connections open
        self.watches: set[Watch] = set()
        self.faults: list[Fault] = []
        self.stalled = False
        self.watch_delay = 0.0  # seconds each batch of watch events is held (delay_watches)
        self.stopping = False
        self._gate = asyncio.Event()
        self._gate.set()
        self._waiters: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------------ change notification
    def notify(self) -> None:
        """Wake every :meth:`wait_changed` caller."""
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_changed(self, max_delay: float) -> None:
        """Return after the next notification, or after ``max_delay`` seconds."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max_delay):
                    await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    # ------------------------------------------------------------------ faults
    def stall(self) -> None:
        """Hold new requests and silence watch streams until :meth:`unstall`."""
        if not self.stalled:
            self.stalled = True
            self._gate = asyncio.Event()

    def unstall(self) -> None:
        """Release held requests; queued watch events flow again."""
        self.stalled = False
        self._gate.set()
        for watch in self.watches:
            watch.wake.set()

    def release(self) -> None:
        """Stop serving: end any stall; held requests and watch streams close their connections."""
        self.stopping = True
        self.stalled = False
        self._gate.set()
        for watch in self.watches:
            watch.wake.set()

    def drop_watches(self) -> int:
        """Abort every open watch stream; return how many."""
        for watch in self.watches:
            watch.dropped = True
            watch.wake.set()
        return len(self.watches)

    def end_watches(self) -> int:
        """End every open watch stream cleanly, as its ``timeoutSeconds`` would; return how many."""
        for watch in self.watches:
            watch.finished = True
            watch.wake.set()
        return len(self.watches)

    def compact(self) -> None:
        """Expire all history; open watches send what they had queued, then a 410, and end."""
        for watch in self.store.compact():
            watch.state.watchers.discard(watch)  # nothing after the compaction reaches it
            watch.expired = "The resourceVersion for the provided watch is too old."
            watch.wake.set()
        self.notify()

    async def held(self) -> None:
        """Wait while requests are held (:meth:`stall`), until unstalled or stopping."""
        while self.stalled and not self.stopping:
            await self._gate.wait()

    def take_fault(self, path: str, is_watch: bool, query: Mapping[str, str]) -> Fault | None:
        """The scripted fault this request meets, if any (counted down, dropped when spent)."""
        for fault in self.faults:
            if fault.matches(path, is_watch, query):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self.faults.remove(fault)
                return fault
        return None
