"""What one kubeconfig sync changed (:class:`ContextDiff`), and the queue that carries diffs.

Split from :mod:`kubemux._kubeconfig.source`, which re-exports these names.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping

import anyio
import anyio.abc
import anyio.lowlevel

from .load import ContextConfig, KubeconfigSnapshot

__all__ = ["ContextDiff", "DiffStream", "diff_snapshots"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContextDiff:
    """What one sync changed.

    Attributes:
        added: Contexts that are new (or became valid), in merge order.
        removed: Names of contexts that are gone (or became invalid).
        changed: Contexts with the same name and a new fingerprint.
        snapshot: The whole state after this sync.
    """

    added: tuple[ContextConfig, ...]
    removed: tuple[str, ...]
    changed: tuple[ContextConfig, ...]
    snapshot: KubeconfigSnapshot

    @property
    def is_empty(self) -> bool:
        """True when no context was added, removed or changed."""
        return not (self.added or self.removed or self.changed)

    def __repr__(self) -> str:
        return (
            f"<ContextDiff added={[c.name for c in self.added]!r} removed={list(self.removed)!r} "
            f"changed={[c.name for c in self.changed]!r}>"
        )


def diff_snapshots(old: Mapping[str, ContextConfig], new: KubeconfigSnapshot) -> ContextDiff:
    """Compare the contexts before a sync with the snapshot after it.

    Costs one dict lookup per context; nothing else is looked at.
    """
    added: list[ContextConfig] = []
    changed: list[ContextConfig] = []
    for name, context in new.contexts.items():
        before = old.get(name)
        if before is None:
            added.append(context)
        elif before.fingerprint != context.fingerprint:
            changed.append(context)
    removed = tuple(name for name in old if name not in new.contexts)
    return ContextDiff(added=tuple(added), removed=removed, changed=tuple(changed), snapshot=new)


class DiffStream(anyio.abc.ObjectReceiveStream[ContextDiff]):
    """A bounded queue of diffs that coalesces instead of blocking the writer.

    When ``max_pending`` diffs are already waiting, the newest waiting diff is replaced by one
    diff spanning both syncs (recomputed from that diff's starting state), so the consumer
    still sees every net change, in order, just in fewer items.
    """

    def __init__(self, max_pending: int) -> None:
        if max_pending < 1:
            raise ValueError("max_pending_diffs must be at least 1")
        self._max_pending = max_pending
        # (contexts before the diff, diff)
        self._items: collections.deque[tuple[Mapping[str, ContextConfig], ContextDiff]] = (
            collections.deque()
        )
        self._send_closed = False
        self._receive_closed = False
        self._wakeup = anyio.Event()
        self.coalesced = 0

    def put(self, before: Mapping[str, ContextConfig], diff: ContextDiff) -> None:
        if self._receive_closed or self._send_closed:
            return
        if len(self._items) >= self._max_pending:
            first_before, _ = self._items.pop()
            diff = diff_snapshots(first_before, diff.snapshot)
            before = first_before
            self.coalesced += 1
        self._items.append((before, diff))
        self._wakeup.set()

    def close_sending(self) -> None:
        self._send_closed = True
        self._wakeup.set()

    def receive_nowait(self) -> ContextDiff:
        """Take the next diff without waiting.

        Raises:
            anyio.WouldBlock: None is waiting.
            anyio.EndOfStream: The source has closed and every diff has been taken.
            anyio.ClosedResourceError: This stream was closed with :meth:`aclose`.
        """
        if self._receive_closed:
            raise anyio.ClosedResourceError
        if self._items:
            return self._items.popleft()[1]
        if self._send_closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> ContextDiff:
        """Wait for the next diff.

        Cancelling it takes nothing off the queue.

        Raises:
            anyio.EndOfStream: The source has closed and every diff has been taken.
            anyio.ClosedResourceError: This stream was closed with :meth:`aclose`.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                item = self.receive_nowait()
            except anyio.WouldBlock:
                if not self._wakeup.is_set():
                    await self._wakeup.wait()
                self._wakeup = anyio.Event()
            else:
                await anyio.lowlevel.cancel_shielded_checkpoint()
                return item

    async def aclose(self) -> None:
        """Stop receiving: pending and future diffs are dropped. Not a blocking call."""
        self._receive_closed = True
        self._items.clear()
        self._wakeup.set()
        await anyio.lowlevel.checkpoint()

    def __len__(self) -> int:
        return len(self._items)
