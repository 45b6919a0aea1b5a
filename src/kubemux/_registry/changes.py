"""From generations to subscribers: the listener of each slot's store, final changes,
snapshots."""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Mapping, Sequence

from .._cache.stream import StoreListener
from .._informer.informer import InformerKey
from .._resources import Resource
from .._wire.codec import StoreChange
from .._wire.types import View
from .connector import SlotSource
from .context import ContextGeneration, Slot
from .fanout import Change, Fanout, Subscription

__all__ = ["Publisher", "ResourceNames", "SlotPublisher", "iter_synced", "scope", "subscription"]


class Publisher:
    """Turns what generations apply to their stores into :class:`Change`\\ s for a fanout,
    and feeds each generation's event index from its event slots."""

    __slots__ = ("_event_keys", "_fanout")

    def __init__(self, fanout: Fanout, event_keys: frozenset[InformerKey]) -> None:
        self._fanout = fanout
        self._event_keys = event_keys

    def for_slot(self, gen: ContextGeneration, slot: Slot) -> StoreListener:
        """The listener of one slot's store (the generation installs it)."""
        return SlotPublisher(self._fanout, gen, slot, feeds_index=slot.key in self._event_keys)

    def final(self, gen: ContextGeneration, resource: str, kind: str, view: View) -> None:
        """A generation's last word about a resource: ``RESET`` or ``REMOVED``."""
        self._fanout.publish(Change(gen.key, resource, kind, None, gen.number, view=view), None)

    @staticmethod
    def snapshot(
        gens: Iterable[ContextGeneration],
        resources: Container[str] | None,
        namespace: str | frozenset[str] | None,
        view: View,
    ) -> list[Change]:
        """ADDED changes replaying what the synced slots of ``gens`` announced so far."""
        initial: list[Change] = []
        seen: set[tuple[str, str, str, str]] = set()
        for gen, slot, _source in iter_synced(gens, resources):
            if slot.key.view != view:
                continue
            writer = slot.store.writer
            if isinstance(namespace, frozenset):
                entries = [e for ns in sorted(namespace) for e in writer.announced_entries(ns)]
            else:
                entries = writer.announced_entries(namespace)
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


class SlotPublisher(StoreListener):
    """One slot's store listener: each change as a :class:`Change` to the fanout (when
    anybody subscribes), and to the generation's event index (an events slot's)."""

    __slots__ = ("context", "fanout", "feeds_index", "gen", "held", "number", "resource", "view")

    def __init__(self, fanout: Fanout, gen: ContextGeneration, slot: Slot, *, feeds_index: bool):
        self.fanout = fanout
        self.gen = gen
        self.context, self.number = gen.key, gen.number
        self.resource, self.view = slot.key.resource, slot.key.view
        self.feeds_index = feeds_index
        self.held = slot.store.has_synced  # subscribers may hold its objects (handed over)

    def __repr__(self) -> str:
        return f"<SlotPublisher {self.context!r} #{self.number} {self.resource} {self.view}>"

    def changed(self, change: StoreChange) -> None:
        entry = change.entry
        fanout = self.fanout
        if len(fanout):
            fanout.publish(
                Change.from_entry(
                    self.context, self.resource, change.type, entry, self.number, view=self.view
                ),
                entry.namespace,
            )
        if self.feeds_index:
            index = self.gen.event_index
            if index is not None:
                index.apply(change.type, entry)

    def listed(
        self, resource_version: str, changes: Sequence[StoreChange], *, relist: bool
    ) -> None:
        self.held = True

    def cleared(self) -> None:
        """The store started over under a running generation (a list older than it had
        shown after a handover, or a new credential refused): subscribers forget it; fresh
        ADDEDs follow. Nothing is said for a store never listed, nor on a stop (the
        generation's final change says it)."""
        if self.gen.is_stopping or not self.held:
            return
        self.held = False
        self.fanout.publish(
            Change(self.context, self.resource, "RESET", None, self.number, view=self.view), None
        )
        if self.feeds_index and (index := self.gen.event_index) is not None:
            index.clear()


def scope(namespace: str | None, namespaces: Iterable[str] | None) -> str | frozenset[str] | None:
    """A subscription's namespace scope: one, several, or every one (None).

    Raises:
        ValueError: both given.
    """
    if namespaces is None:
        return namespace
    if namespace is not None or isinstance(namespaces, str):
        raise ValueError("give namespace or a list of namespaces, not both")
    return frozenset(namespaces)


def subscription(
    fanout: Fanout,
    gens: Mapping[str, ContextGeneration],
    names: Container[str] | None,
    contexts: Iterable[str] | None,
    namespace: str | frozenset[str] | None,
    *,
    snapshot: bool,
    buffer_size: int,
    view: View,
) -> Subscription:
    """A subscription to ``fanout`` (see :meth:`~kubemux.WatcherRegistry.subscribe`); its
    snapshot replays what the synced slots of the generations in ``gens`` (live) announced."""
    wanted = frozenset(contexts) if contexts is not None else None

    def take_snapshot() -> list[Change]:
        chosen = [g for g in gens.values() if wanted is None or g.key in wanted]
        return Publisher.snapshot(chosen, names, namespace, view)

    return fanout.subscribe(
        resource=names,
        contexts=wanted,
        namespace=namespace,
        buffer_size=buffer_size,
        snapshot=take_snapshot if snapshot else None,
        view=view,
    )


class ResourceNames:
    """Every name each watched resource goes by, for subscriptions made by a kubectl name.

    A name is resolved where a running context (or the built-in table) knows it; otherwise
    it is matched against the names of every resource an informer runs for, so a
    subscription made before its context starts still gets its changes.
    """

    __slots__ = ("_aliases",)

    def __init__(self) -> None:
        self._aliases: dict[str, frozenset[str]] = {}  # resource -> every name it goes by

    def learn(self, res: Resource) -> None:
        if res.name not in self._aliases:
            self._aliases[res.name] = _alias_names(res)

    def matcher(self, name: str, resolved: Iterable[str]) -> Container[str]:
        return _Names(frozenset(resolved), name.strip().lower(), self._aliases)


class _Names:
    """The resources a subscription's name means (a container of full names)."""

    __slots__ = ("_aliases", "_name", "_resolved")

    def __init__(
        self, resolved: frozenset[str], name: str, aliases: Mapping[str, frozenset[str]]
    ) -> None:
        self._resolved = resolved
        self._name = name
        self._aliases = aliases

    def __contains__(self, resource: object) -> bool:
        if resource in self._resolved:
            return True
        return isinstance(resource, str) and self._name in self._aliases.get(resource, ())

    def __iter__(self) -> Iterator[str]:  # for snapshots: what is known now
        yield from self._resolved
        for resource, names in list(self._aliases.items()):
            if self._name in names and resource not in self._resolved:
                yield resource


def _alias_names(res: Resource) -> frozenset[str]:
    """Every kubectl name of ``res`` (plural, singular, kind, short names, with group)."""
    base = {res.plural, res.singular, res.kind.lower(), *res.short_names}
    names = {n.lower() for n in base if n}
    if res.group:
        names |= {f"{n}.{res.group}" for n in list(names)}
        names.add(f"{res.plural}.{res.version}.{res.group}")
    return frozenset(names)


def iter_synced(
    generations: Iterable[ContextGeneration], resources: Container[str] | None
) -> Iterable[tuple[ContextGeneration, Slot, SlotSource]]:
    """(generation, slot, source) of every synced slot of running generations."""
    for gen in generations:
        if not gen.is_running:
            continue
        for slot in gen.slots.values():
            source = slot.source
            if resources is not None and slot.key.resource not in resources:
                continue
            if source is None or not slot.store.has_synced:
                continue
            yield gen, slot, source
