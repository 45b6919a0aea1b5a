"""Floors: what answers shown through the proxy tell later reads to wait for.

(Monotonic reads, :mod:`.freshness`, generalise the read-your-writes marks below: any
answer passed through or served raises its resource's mark.)

A write (POST, PUT, PATCH, DELETE) through the proxy answers with the object as the API
server stored it, whose ``metadata.resourceVersion`` is the write's (a DELETE's answer
carries the deletion's, as etcd3's store writes it; a deletecollection's List carries each
deleted item's). :class:`WriteMarks` remembers the highest such version per (context,
resource); a later read of that resource through the proxy waits, bounded, until the
informer's store has reached it (and goes upstream if it does not in time), so it sees the
write. A DELETE answered with a bare ``Status`` (kinds that do not return the object) gives
no version: the read then waits until the object is gone from the store.

Marks are global, not per client (stronger than client-go's guarantee, and a client cannot
be told apart from another behind one token), bounded in number, and forgotten after
:attr:`WriteMarks.ttl` seconds (by then the informer has either caught up or failed, and
reads come from the cache or fall back to upstream anyway).
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable

import msgspec

from ..._cache.snapshot import Key
from ..._wire.versions import rv_int

__all__ = ["WriteMark", "WriteMarks", "bound_context", "written_version"]

MarkKey = tuple[str, str, str]  # context, group, plural


class _Meta(msgspec.Struct, gc=False):
    resourceVersion: str = ""


class _Item(msgspec.Struct, gc=False):
    metadata: _Meta | None = None


class _Answer(msgspec.Struct, gc=False):
    kind: str = ""
    metadata: _Meta | None = None
    items: list[_Item] | None = None


_decoder = msgspec.json.Decoder(_Answer)


def bound_context(context: str, who: str) -> str:
    """What continue tokens are bound to: the context, and with ``--user-tokens`` the user
    (``who``, a key of their identity), so one user's pages never continue another's."""
    return f"{context}\x00{who}" if who else context


def written_version(body: bytes) -> int | None:
    """The resourceVersion a write's answer carries (the highest of a List's items), or
    None for an answer without one (a ``Status``, or not JSON)."""
    try:
        answer = _decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    best = (rv_int(answer.metadata.resourceVersion) or 0) if answer.metadata is not None else 0
    for item in answer.items or ():
        if item.metadata is not None:
            best = max(best, rv_int(item.metadata.resourceVersion) or 0)
    return best or None


@dataclasses.dataclass(slots=True)
class WriteMark:
    """What reads of one resource wait for.

    Attributes:
        resource_version: The store must have reached this version (0: nothing): a
            version the resource's own watch will bring (a write's, an object's).
        gone: Objects deleted without a version in the answer: the store must lack them.
        expires: Monotonic time after which the mark is forgotten.
        namespaces: ``resource_version`` per namespace it came from (``""``: none
            known, or cluster-scoped), at most :attr:`WriteMarks.max_namespaces`.
        listed: A List's resourceVersion shown (passed through): the store must have
            reached it too, though the resource's watch may bring it late (a quiet
            resource hears the server's later versions only in bookmarks).
    """

    resource_version: int = 0
    gone: set[Key] = dataclasses.field(default_factory=set)
    expires: float = 0.0
    listed: int = 0
    namespaces: dict[str, int] = dataclasses.field(default_factory=dict)

    def in_namespace(self, namespace: str | None) -> int:
        """The version a store of ``namespace`` alone must reach (None: a cluster-wide
        store, all of them): a namespace's watch never brings another's versions."""
        if namespace is None:
            return self.resource_version
        return max(self.namespaces.get(namespace, 0), self.namespaces.get("", 0))


class WriteMarks:
    """The marks of recent writes through the proxy (see the module docstring).

    Args:
        ttl: Seconds a mark is kept after its last write.
        max_marks: Most (context, resource) marks kept; the oldest go first.
        max_gone: Most deleted-object keys kept per mark.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        ttl: float = 60.0,
        max_marks: int = 4096,
        max_gone: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_marks = max_marks
        self.max_gone = max_gone
        self.max_namespaces = 256
        self._clock = clock
        self._marks: OrderedDict[MarkKey, WriteMark] = OrderedDict()

    def __len__(self) -> int:
        return len(self._marks)

    def __repr__(self) -> str:
        return f"<WriteMarks marks={len(self._marks)}>"

    def record(
        self,
        context: str,
        group: str,
        plural: str,
        resource_version: int | None,
        gone: Key | None = None,
        *,
        listed: int | None = None,
        namespace: str | None = None,
    ) -> None:
        """An answer shown: later reads wait for ``resource_version`` (and for ``gone``
        to be absent, when a write's answer had no version; and for ``listed``, a List's
        version)."""
        if not resource_version and gone is None and not listed:
            return
        key = (context, group, plural)
        mark = self._marks.pop(key, None) or WriteMark()
        if resource_version:
            mark.resource_version = max(mark.resource_version, resource_version)
            within = mark.namespaces
            ns = namespace or ""
            if ns in within or len(within) < self.max_namespaces:
                within[ns] = max(within.get(ns, 0), resource_version)
            else:  # too many: every namespace's store waits for it
                within[""] = max(within.get("", 0), resource_version)
        elif gone is not None and len(mark.gone) < self.max_gone:
            mark.gone.add(gone)
        if listed:
            mark.listed = max(mark.listed, listed)
        mark.expires = self._clock() + self.ttl
        self._marks[key] = mark
        while len(self._marks) > self.max_marks:
            self._marks.popitem(last=False)

    def get(self, context: str, group: str, plural: str) -> WriteMark | None:
        """The mark reads of the resource wait for, or None."""
        key = (context, group, plural)
        mark = self._marks.get(key)
        if mark is None:
            return None
        if mark.expires <= self._clock():
            del self._marks[key]
            return None
        return mark

    def floor(self, context: str, group: str, plural: str) -> int:
        """The version reads of the resource must reach now (0: none)."""
        mark = self.get(context, group, plural)
        return max(mark.resource_version, mark.listed) if mark is not None else 0

    def forget(self, context: str) -> None:
        """Drop every mark of ``context`` (its stores were cleared: it stopped, or reloaded
        perhaps onto another cluster, whose versions are not comparable)."""
        for key in [k for k in self._marks if k[0] == context]:
            del self._marks[key]

    def satisfied(self, context: str, group: str, plural: str, gone: set[Key]) -> None:
        """Forget the deleted keys a read found absent (a later object of the same name is
        a new one, which reads must not wait to vanish)."""
        mark = self._marks.get((context, group, plural))
        if mark is not None:
            mark.gone -= gone
            if not mark.gone and not mark.resource_version and not mark.listed:
                del self._marks[(context, group, plural)]
