"""A reload that keeps the cluster hands its caches to the next generation (issue 29, point 4).

Most reloads only change a credential: a rotated token, an exec plugin's arguments, a
renamed user entry. When the reloaded context still names the same cluster (the same
:attr:`~kubemux._kubeconfig.merge.ContextConfig.cluster_key`: server, CA bytes,
``tls-server-name``, ``insecure-skip-tls-verify``, ``proxy-url``), the old generation stops
*without clearing* its synced stores, and the new generation's slots take them over: the
same store objects, with their event history, their listeners (the proxy's watch views) and
the registry's subscriptions. The new informer's first LIST over a synced store is a relist:
what changed meanwhile is announced as the ADDED, MODIFIED and DELETED a watcher would have
seen, as after a 410. Nobody downstream notices; subscribers get no ``RESET``.

One owner at a time: all of it runs under the context's lock (``Generations.reload``); the
stores move only once the old generation has ended (its informers can no longer write), and
:meth:`~kubemux.WatcherRegistry.stop_watcher`, which takes the same lock, clears them on
whichever generation holds them. A stop that overruns ``stop_timeout`` hands nothing over:
the straggler clears its stores itself when it ends, with a final ``RESET``, as any reload
did before.

Time never goes back: each handed-over store gets a floor (its resourceVersion), and a first
LIST older than it starts the store over (its watches end; subscribers get a ``RESET``)
instead of showing a past after a newer present (:meth:`StoreWriter.set_floor`).

A reload that changes the cluster ends everything as before: a watch must never carry on
against another cluster.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable

from .._cache.store import Store
from .._informer.informer import InformerKey
from .._kubeconfig.load import ContextConfig
from .context import ContextGeneration
from .narrowing import Narrowed

__all__ = ["Kept", "adopt", "release", "release_untaken", "same_cluster", "stop_keeping"]

log = logging.getLogger(__name__)


def same_cluster(old: ContextConfig, new: ContextConfig | None) -> bool:
    """Whether ``new`` still talks to the cluster ``old`` did (a handover is safe)."""
    return new is not None and bool(old.cluster_key) and old.cluster_key == new.cluster_key


@dataclasses.dataclass(frozen=True, slots=True)
class Kept:
    """What an ended generation hands to its successor."""

    stores: dict[InformerKey, Store]
    narrowed: dict[InformerKey, Narrowed]
    notes: dict[str, str]


async def stop_keeping(
    gen: ContextGeneration,
    stop: Callable[[ContextGeneration, str, str | None], Awaitable[None]],
) -> Kept | None:
    """Stop ``gen`` (with ``stop``, bounded) keeping its synced stores; what it kept, or None
    when it did not end in time (then it clears them itself, with a final ``RESET``)."""
    gen.keep_stores = True
    await stop(gen, "reloaded (same cluster: its caches go on)", None)
    if not gen.is_done:  # still running: its informers may write yet; nothing moves
        gen.keep_stores, gen.final_change = False, "RESET"
        return None
    kept = Kept(dict(gen.kept), dict(gen.narrowed), dict(gen.notes))
    gen.kept.clear()
    for store in kept.stores.values():
        store.writer.set_floor(store.resource_version)
    log.info("context %r: %d caches handed to the next generation", gen.key, len(kept.stores))
    return kept


def adopt(gen: ContextGeneration, kept: Kept) -> dict[InformerKey, Store]:
    """Give the new generation what the old one narrowed; the stores, for ``ensure_slot``."""
    gen.narrowed.update(kept.narrowed)
    gen.notes.update(kept.notes)
    gen.reads_seen += sum(store.writer.reads() for store in kept.stores.values())  # not a use
    return kept.stores


def release(kept: Kept | None) -> None:
    """Nobody takes ``kept`` over (the registry is closing): clear its stores, as a stop does."""
    for store in kept.stores.values() if kept is not None else ():
        store.writer.clear()


def release_untaken(gen: ContextGeneration, stores: dict[InformerKey, Store]) -> None:
    """Clear the handed-over stores ``gen``'s slots did not take (a slot that already had
    a store of its own): nothing may be left holding watches that nobody feeds."""
    for key, store in stores.items():
        slot = gen.slots.get(key)
        if slot is None or slot.store is not store:
            store.writer.clear()
