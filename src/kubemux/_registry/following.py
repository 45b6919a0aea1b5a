"""The kubeconfig side of the registry: what it says now, its syncs, and the status signal
(:class:`KubeconfigFollower`), and that half of the registry's public API (:class:`KubeconfigAPI`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

import anyio

from .._auth.pool import in_cluster_config
from .._kubeconfig.load import ContextConfig, KubeconfigSnapshot
from .._kubeconfig.source import ContextDiff, KubeconfigSource
from .generations import Generations
from .status import StatusSignal

__all__ = ["KubeconfigAPI", "KubeconfigFollower", "default_source"]

log = logging.getLogger(__name__)


class KubeconfigFollower:
    """Follows a :class:`KubeconfigSource`: reconciles each diff through the generations
    (one at a time), counts the syncs; holds the registry's status signal."""

    def __init__(
        self, source: KubeconfigSource, generations: Generations, signal: StatusSignal
    ) -> None:
        self.source = source
        self.generations = generations
        self.signal = signal
        self.syncs = 0
        self._lock = anyio.Lock()
        self._sync_event = anyio.Event()

    async def wait_sync(self, after: int) -> int:
        """Wait until more than ``after`` syncs were reconciled; the new count."""
        while self.syncs <= after:
            await self._sync_event.wait()
        return self.syncs

    async def follow(self, source: KubeconfigSource) -> None:
        """Reconcile every diff of the (entered) ``source`` until cancelled."""
        async for diff in source.diffs:
            try:
                await self._reconcile(diff)
            except Exception:  # never lose the follower to one bad sync
                log.exception("kubeconfig reconcile failed")

    async def _reconcile(self, diff: ContextDiff) -> None:
        async with self._lock:
            if diff.removed:
                log.info("kubeconfig: removing %s", ", ".join(diff.removed))
            gens = self.generations
            await gens.for_each(diff.removed, gens.remove)
            await gens.for_each([c.name for c in diff.changed], gens.reload)
            await gens.for_each([c.name for c in diff.added], gens.add)
            self.syncs += 1
            event, self._sync_event = self._sync_event, anyio.Event()
            event.set()
            self.signal.changed()


class KubeconfigAPI:
    """Base of :class:`~kubemux.WatcherRegistry`: the kubeconfig half of its public API and
    its status signal, read from its :class:`KubeconfigFollower`."""

    def __init__(self, follower: KubeconfigFollower) -> None:
        self._kubeconfig = follower

    @property
    def contexts(self) -> Mapping[str, ContextConfig]:
        """What the kubeconfig says now: context name -> :class:`ContextConfig`."""
        return self._kubeconfig.source.contexts

    @property
    def kubeconfig_snapshot(self) -> KubeconfigSnapshot:
        """The merged kubeconfig as of the latest sync (frozen): valid and invalid contexts,
        the file that defined each invalid one, file errors."""
        return self._kubeconfig.source.snapshot

    @property
    def current_context(self) -> str | None:
        """The kubeconfig's current-context, by kubectl's merge rules."""
        return self._kubeconfig.source.current_context

    @property
    def kubeconfig_syncs(self) -> int:
        """How many kubeconfig syncs have been reconciled (including ones that changed nothing)."""
        return self._kubeconfig.syncs

    async def wait_kubeconfig_sync(self, after: int) -> int:
        """Wait until more than ``after`` syncs were reconciled; returns the new count.

        Take ``after = registry.kubeconfig_syncs`` *before* editing the file. Cancelling
        only stops the wait.
        """
        return await self._kubeconfig.wait_sync(after)

    async def sync_kubeconfig(self) -> None:
        """Re-read the kubeconfig now and reconcile (also works with ``follow=False``)."""
        before = self._kubeconfig.syncs
        await self._kubeconfig.source.sync_now()  # its diff reaches follow() like any other
        await self._kubeconfig.wait_sync(before)

    @property
    def status_version(self) -> int:
        """A number that grows whenever what :meth:`status` shows may have changed state
        (context and informer states, errors recorded or cleared, kubeconfig syncs), not
        on every object."""
        return self._kubeconfig.signal.version

    async def wait_status_change(self, after: int) -> int:
        """Wait until :attr:`status_version` exceeds ``after``; returns the new value.
        Cancelling only stops the wait."""
        return await self._kubeconfig.signal.wait_change(after)


def default_source(
    paths: str | Sequence[str] | None, follow: bool, debounce_delay: float, in_cluster_root: str
) -> KubeconfigSource:
    """What :meth:`WatcherRegistry.from_kubeconfig` follows: ``paths``, else
    ``$KUBECONFIG``, else ``~/.kube/config``; with none of them inside a pod, the one
    ``in-cluster`` context."""
    if paths is None and not os.environ.get("KUBECONFIG", "").strip(os.pathsep):
        default = os.path.join(os.path.expanduser("~"), ".kube", "config")
        if not os.path.exists(default):  # no kubeconfig at all: inside a pod?
            in_cluster = in_cluster_config(in_cluster_root)
            if in_cluster is not None:
                return KubeconfigSource.static({in_cluster.name: in_cluster}, in_cluster.name)
    return KubeconfigSource(paths, follow=follow, debounce_delay=debounce_delay)
