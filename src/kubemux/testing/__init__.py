"""Test helpers: a fake kube-apiserver over real HTTP, and kubeconfig writers.

``FakeCluster`` serves the list/watch protocol on 127.0.0.1; tests create and change objects
through its Python API and script faults (dropped watches, 5xx, stalls, compaction, restarts).
It also serves aggregated and legacy discovery, CustomResourceDefinitions created and deleted
at runtime, the Table format (kubectl's columns) and per-token RBAC by namespace.
``write_kubeconfig`` points kubeconfig contexts at running clusters; ``make_pod`` builds
realistic pod bodies.
"""

from __future__ import annotations

from ._auth import sign_token as sign_token
from ._fake_cluster import FakeCluster as FakeCluster
from ._http import RecordedRequest as RecordedRequest
from ._kubeconfig_writer import FakeContext as FakeContext
from ._kubeconfig_writer import kubeconfig_dict as kubeconfig_dict
from ._kubeconfig_writer import write_kubeconfig as write_kubeconfig
from ._objects import make_pod as make_pod
from ._reconcile import rewrite_kubeconfig as rewrite_kubeconfig

__all__ = [
    "FakeCluster",
    "FakeContext",
    "RecordedRequest",
    "kubeconfig_dict",
    "make_pod",
    "rewrite_kubeconfig",
    "sign_token",
    "write_kubeconfig",
]
