"""From generations to subscribers: the change callbacks of slots, final changes, snapshots."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable

from ._codec import Entry
from ._context import ContextGeneration, Slot, iter_synced
from ._fanout import Change, Fanout
from ._informer import InformerKey

__all__ = ["Publisher"]


class Publisher:
    """Turns what generations apply to their stores into :class:`Change`\\ s for a fanout,
    and feeds each generation's event index from its event slots."""

    __slots__ = ("_event_keys", "_fanout")

    def __init__(self, fanout: Fanout, event_keys: frozenset[InformerKey]) -> None:
        self._fanout = fanout
        self._event_keys = event_keys

    def for_slot(
        self, gen: ContextGeneration, slot: Slot
    ) -> Callable[[str, Entry, Entry | None], None]:
        """The change callback of one slot (called synchronously for every change)."""
        fanout = self._fanout
        context, resource, number, view = gen.key, slot.key.resource, gen.number, slot.key.view
        feeds_index = slot.key in self._event_keys

        def publish(kind: str, obj: Entry, old: Entry | None) -> None:
            if len(fanout):
                fanout.publish(
                    Change.from_entry(context, resource, kind, obj, number, view=view),
                    obj.namespace,
                )
            if feeds_index:
                index = gen.event_index
                if index is not None:
                    index.apply(kind, obj)

        return publish

    def final(self, gen: ContextGeneration, resource: str, kind: str, view: str) -> None:
        """A generation's last word about a resource: ``RESET`` or ``REMOVED``."""
        self._fanout.publish(Change(gen.key, resource, kind, None, gen.number, view=view), None)

    @staticmethod
    def snapshot(
        gens: Iterable[ContextGeneration],
        resources: Container[str] | None,
        namespace: str | frozenset[str] | None,
        view: str,
    ) -> list[Change]:
        """ADDED changes replaying what the synced slots of ``gens`` announced so far."""
        initial: list[Change] = []
        seen: set[tuple[str, str, str, str]] = set()
        for gen, slot, source in iter_synced(gens, resources):
            if slot.key.view != view:
                continue
            if isinstance(namespace, frozenset):
                entries = [e for ns in sorted(namespace) for e in source.snapshot_entries(ns)]
            else:
                entries = source.snapshot_entries(namespace)
            for e in entries:
                ident = (gen.key, slot.key.resource, e.namespace, e.name)
                if ident not in seen:
                    seen.add(ident)
                    initial.append(
                        Change.from_entry(
                            gen.key,
                            slot.key.resource,
                            "ADDED",
                            e,
                            gen.number,
                            snapshot=True,
                            view=view,
                        )
                    )
        return initial
