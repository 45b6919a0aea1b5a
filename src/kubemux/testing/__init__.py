"""Test helpers: a fake kube-apiserver over real HTTP, and kubeconfig writers.

``FakeCluster`` serves the list/watch protocol on 127.0.0.1; tests create and change objects
through its Python API and script faults (dropped watches, 5xx, stalls, compaction, restarts).
It also serves aggregated and legacy discovery, CustomResourceDefinitions created and deleted
at runtime, the Table format (kubectl's columns) and per-token RBAC by namespace.
``write_kubeconfig`` points kubeconfig contexts at running clusters; ``make_pod`` builds
realistic pod bodies; ``simulate_workload`` keeps a cluster busy the way ``kubemux demo``
does (pods through their lifecycle, with Events: ``make_event``, ``set_pod_state``).

``FakeConnector`` is the other fake: no HTTP at all. It plugs in where a context generation
gets its data (``WatcherRegistry(contexts, connector=FakeConnector())``), serves objects held
in memory, and scripts connects and first syncs that fail or hang (``Gate``), so code built
on the registry, and the registry's lifecycle itself, can be tested without a server.
"""

from __future__ import annotations

from ._access.tokens import sign_token as sign_token
from ._apiserver.http import RecordedRequest as RecordedRequest
from ._cluster.fake_cluster import FakeCluster as FakeCluster
from ._cluster.kubeconfig_writer import FakeContext as FakeContext
from ._cluster.kubeconfig_writer import kubeconfig_dict as kubeconfig_dict
from ._cluster.kubeconfig_writer import write_kubeconfig as write_kubeconfig
from ._cluster.reconcile import rewrite_kubeconfig as rewrite_kubeconfig
from ._cluster.workload import simulate_workload as simulate_workload
from ._connector.connector import FakeConnector as FakeConnector
from ._connector.connector import Gate as Gate
from ._kubelet.pod_state import make_event as make_event
from ._kubelet.pod_state import set_pod_state as set_pod_state
from ._state.objects import make_pod as make_pod

__all__ = [
    "FakeCluster",
    "FakeConnector",
    "FakeContext",
    "Gate",
    "RecordedRequest",
    "kubeconfig_dict",
    "make_event",
    "make_pod",
    "rewrite_kubeconfig",
    "set_pod_state",
    "sign_token",
    "simulate_workload",
    "write_kubeconfig",
]
