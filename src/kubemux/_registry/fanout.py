"""Subscriptions: every change, to every interested subscriber, without ever waiting for one.

Each subscriber has a bounded buffer. Publishing is synchronous and never blocks: a
subscriber whose buffer is full is closed with :class:`SubscriberOverflow` (it can
resubscribe with ``snapshot=True`` to start again from the current state). An informer is
therefore never slowed down by a slow consumer, and memory per subscriber is bounded by its
buffer.

A snapshot is delivered from a list taken at subscribe time, in the same synchronous step
that registers the subscriber, so there is no gap and no duplicate between the snapshot and
the live changes that follow.
"""

from __future__ import annotations

import builtins
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, Callable, Container, Iterable, Mapping
from types import TracebackType
from typing import Any, Self

import anyio
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._errors import SubscriberOverflow
from .._wire.codec import Entry, lenient_loads
from .._wire.types import View

__all__ = ["Change", "ChangeType", "Fanout", "Subscription"]

ChangeType = str
"""``ADDED``, ``MODIFIED``, ``DELETED``: object changes. ``RESET``: forget what you hold for
this (context, resource); fresh ADDEDs follow (a reload or a relist after a reload).
``REMOVED``: the context was stopped (removed from the kubeconfig or stopped by hand)."""


class Change:
    """One change seen by a subscriber. Immutable.

    Attributes:
        context: The kubeconfig context.
        resource: The resource's full name (``pods``, ``deployments.apps``).
        type: See :data:`ChangeType`.
        generation: The context generation that produced the change.
        snapshot: True for the ADDEDs that replay the store at subscribe time.
        namespace: The object's namespace (``""`` if cluster-scoped or no object).
        name: The object's name (``""`` if no object).
        view: ``"objects"`` (full objects, from ``watch()``) or ``"table"`` (rows of
            server-side columns, from ``table()``: ``object`` is ``{"cells", "metadata"}``);
            a :class:`~kubemux.View` (the strings are taken too).
    """

    __slots__ = (
        "_object",
        "_raw",
        "context",
        "generation",
        "name",
        "namespace",
        "resource",
        "snapshot",
        "type",
        "view",
    )

    context: str
    resource: str
    type: ChangeType
    generation: int
    snapshot: bool
    view: View
    namespace: str
    name: str
    _object: Mapping[str, Any] | None
    _raw: bytes | None

    def __init__(
        self,
        context: str,
        resource: str,
        type: ChangeType,
        object: Mapping[str, Any] | None = None,
        generation: int = 0,
        snapshot: bool = False,
        *,
        raw: bytes | None = None,
        namespace: str | None = None,
        name: str | None = None,
        view: View | str = View.OBJECTS,
    ) -> None:
        meta = (object or {}).get("metadata") or {}
        setattr_ = super().__setattr__
        setattr_("context", context)
        setattr_("resource", resource)
        setattr_("type", type)
        setattr_("generation", generation)
        setattr_("snapshot", snapshot)
        setattr_("view", view if view.__class__ is View else View(view))
        setattr_(
            "namespace", namespace if namespace is not None else str(meta.get("namespace") or "")
        )
        setattr_("name", name if name is not None else str(meta.get("name") or ""))
        setattr_("_object", object)
        setattr_("_raw", raw)

    @classmethod
    def from_entry(
        cls,
        context: str,
        resource: str,
        type: ChangeType,
        entry: Entry,
        generation: int,
        snapshot: bool = False,
        view: View | str = View.OBJECTS,
    ) -> Change:
        """A change whose object is decoded only if somebody reads it."""
        return cls(
            context,
            resource,
            type,
            None,
            generation,
            snapshot,
            raw=entry.raw,
            namespace=entry.namespace,
            name=entry.name,
            view=view,
        )

    @property
    def object(self) -> Mapping[str, Any] | None:
        """The object (its final state for DELETED); ``None`` for RESET and REMOVED.

        Decoded on first access and shared by every subscriber: treat it as read-only.
        """
        if self._object is None and self._raw is not None:
            super().__setattr__("_object", lenient_loads(self._raw))
        return self._object

    @property
    def raw(self) -> bytes | None:
        """The object's JSON bytes (no decode needed to pass it on)."""
        if self._raw is None and self._object is not None:
            super().__setattr__("_raw", orjson.dumps(self._object))
        return self._raw

    def __setattr__(self, name: str, value: builtins.object) -> None:
        raise AttributeError("Change is immutable")

    def __eq__(self, other: builtins.object) -> bool:
        if not isinstance(other, Change):
            return NotImplemented
        return (
            self.context,
            self.resource,
            self.type,
            self.namespace,
            self.name,
            self.generation,
            self.raw,
        ) == (
            other.context,
            other.resource,
            other.type,
            other.namespace,
            other.name,
            other.generation,
            other.raw,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"Change({self.context!r}, {self.resource!r}, {self.type}, {where})"


class Subscription:
    """An async iterator of :class:`Change`; returned by ``registry.subscribe(...)``.

    Use it as ``async with registry.subscribe(...) as changes: async for change in changes``.
    It is registered (and its snapshot taken) when the ``async with`` is entered, and removed
    when it is left, so one that is never entered holds nothing. Iteration ends when the
    subscription is closed; it raises :class:`SubscriberOverflow` if this subscriber fell
    more than its buffer behind.
    """

    def __init__(
        self,
        fanout: Fanout,
        *,
        resource: str | Container[str] | None,
        contexts: frozenset[str] | None,
        namespace: str | frozenset[str] | None,
        buffer_size: int,
        snapshot: Callable[[], Iterable[Change]] | None = None,
        view: View | str = View.OBJECTS,
    ) -> None:
        self._fanout = fanout
        self.resource = resource
        self._resources = frozenset((resource,)) if isinstance(resource, str) else resource
        self.view = View(view)
        self.contexts = contexts
        self.namespace = namespace
        self.buffer_size = buffer_size
        self._take_snapshot = snapshot
        self._send: MemoryObjectSendStream[Change] | None = None
        self._receive: MemoryObjectReceiveStream[Change] | None = None
        self._snapshot: deque[Change] = deque()
        self._overflowed = False
        self._state = "new"  # new -> open -> closed
        self.delivered = 0

    def __repr__(self) -> str:
        return (
            f"<Subscription {self._state} resource={self.resource} pending={self.pending} "
            f"delivered={self.delivered}>"
        )

    def wants(
        self, context: str, resource: str, namespace: str | None, view: View = View.OBJECTS
    ) -> bool:
        """Whether a change about (context, resource, namespace) is for this subscriber."""
        return (
            view == self.view
            and (self._resources is None or resource in self._resources)
            and (self.contexts is None or context in self.contexts)
            and (
                self.namespace is None
                or namespace is None
                or (
                    self.namespace == namespace
                    if isinstance(self.namespace, str)
                    else namespace in self.namespace
                )
            )
        )

    def _offer(self, change: Change) -> None:
        send = self._send
        if send is None or self._overflowed:
            return
        try:
            send.send_nowait(change)
        except anyio.WouldBlock:
            self._overflowed = True
            self._fanout.overflows += 1
            send.close()
            self._fanout._discard(self)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._fanout._discard(self)

    def __aiter__(self) -> Subscription:
        return self

    def _stream(self) -> MemoryObjectReceiveStream[Change]:
        if self._receive is None:
            raise RuntimeError(
                "enter the subscription first: `async with registry.subscribe(...) as changes`"
            )
        return self._receive

    async def __anext__(self) -> Change:
        receive = self._stream()
        if self._snapshot:
            self.delivered += 1
            return self._snapshot.popleft()
        try:
            change = await receive.receive()
        except anyio.EndOfStream:
            if self._overflowed:
                raise SubscriberOverflow(
                    f"subscriber fell more than {self.buffer_size} changes behind and was "
                    "closed; resubscribe with snapshot=True"
                ) from None
            raise StopAsyncIteration from None
        except anyio.ClosedResourceError:
            raise StopAsyncIteration from None
        self.delivered += 1
        return change

    def receive_nowait(self) -> Change:
        """The next change if one is ready; raises ``anyio.WouldBlock`` otherwise."""
        receive = self._stream()
        if self._snapshot:
            self.delivered += 1
            return self._snapshot.popleft()
        change = receive.receive_nowait()
        self.delivered += 1
        return change

    @property
    def pending(self) -> int:
        """Changes buffered and not yet read."""
        buffered = 0 if self._receive is None else self._receive.statistics().current_buffer_used
        return len(self._snapshot) + buffered

    def close(self) -> None:
        """Stop receiving; the iterator ends once the buffer is drained. Idempotent."""
        self._fanout._discard(self)
        if self._send is not None:
            self._send.close()

    async def aclose(self) -> None:
        """Unregister and drop everything buffered. Idempotent."""
        self.close()
        if self._receive is not None:
            self._receive.close()
        self._snapshot.clear()
        self._state = "closed"

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError(f"a Subscription can be entered once (it is {self._state})")
        self._send, self._receive = anyio.create_memory_object_stream[Change](self.buffer_size)
        # snapshot and registration in one synchronous step: no gap, no duplicate
        if self._take_snapshot is not None:
            self._snapshot.extend(self._take_snapshot())
            self._take_snapshot = None
        self._fanout._add(self)
        self._state = "open"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class Fanout:
    """The set of live subscriptions and the synchronous publish path."""

    def __init__(self) -> None:
        self._subs: dict[int, Subscription] = {}
        self.overflows = 0  # subscribers closed for falling behind, ever

    def __len__(self) -> int:
        return len(self._subs)

    def subscribe(
        self,
        *,
        resource: str | Container[str] | None,
        contexts: Iterable[str] | None,
        namespace: str | frozenset[str] | None,
        buffer_size: int,
        snapshot: Callable[[], Iterable[Change]] | None = None,
        view: View | str = View.OBJECTS,
    ) -> Subscription:
        """A subscriber, registered when entered; ``snapshot()`` is delivered first."""
        return Subscription(
            self,
            resource=resource,
            contexts=frozenset(contexts) if contexts is not None else None,
            namespace=namespace,
            buffer_size=buffer_size,
            snapshot=snapshot,
            view=view,
        )

    def _add(self, sub: Subscription) -> None:
        self._subs[id(sub)] = sub

    def publish(self, change: Change, namespace: str | None) -> None:
        """Offer ``change`` to every interested subscriber. Never blocks."""
        if not self._subs:
            return
        for sub in list(self._subs.values()):
            if sub.wants(change.context, change.resource, namespace, change.view):
                sub._offer(change)

    def named_contexts(self) -> set[str]:
        """The contexts that open subscriptions name explicitly (``contexts=[...]``)."""
        named: set[str] = set()
        for sub in self._subs.values():
            if sub.contexts is not None:
                named.update(sub.contexts)
        return named

    def _discard(self, sub: Subscription) -> None:
        self._subs.pop(id(sub), None)

    def close_all(self) -> None:
        for sub in list(self._subs.values()):
            sub.close()

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncGenerator[None]:
        """Every subscription ends when the block does (after its last change)."""
        try:
            yield
        finally:
            self.close_all()
