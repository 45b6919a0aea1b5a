"""A kubeconfig key kubectl does not read, named with its path when it explains a missing
field (kubectl ignores unknown keys: ``sever:`` gave only "no server")."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubemux._kubeconfig.load import KubeconfigLoader
from kubemux._kubeconfig.schema import CLUSTER, unknown_keys

CONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    sever: https://127.0.0.1:6443
    certificate-authoriti: /ca.crt
- name: good
  cluster:
    server: https://127.0.0.1:6443
    colour: blue
contexts:
- name: typo
  context: {cluster: c, user: u}
- name: nocluster
  context: {clsuter: good, user: u}
- name: fine
  context: {cluster: good, user: u}
current-context: typo
users:
- name: u
  user: {token: abc}
"""


@pytest.fixture
def invalid(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "config"
    path.write_text(CONFIG)
    snapshot = KubeconfigLoader([str(path)]).load()
    assert set(snapshot.contexts) == {"fine"}  # an unknown key alone breaks nothing
    return dict(snapshot.invalid)


def test_a_missing_server_names_the_key_that_looks_like_it(invalid: dict[str, str]) -> None:
    assert invalid["typo"] == (
        "no server (clusters[c].cluster.sever is not a kubeconfig key: did you mean 'server'?; "
        "clusters[c].cluster.certificate-authoriti is not a kubeconfig key: "
        "did you mean 'certificate-authority'?)"
    )
    assert invalid["nocluster"] == (
        "context has no cluster "
        "(contexts[nocluster].clsuter is not a kubeconfig key: did you mean 'cluster'?)"
    )


def test_no_note_without_unknown_keys() -> None:
    assert unknown_keys({"server": "x"}, CLUSTER, "clusters[a].cluster") == ""
    assert unknown_keys({"zzz": 1}, CLUSTER, "clusters[a].cluster") == (
        "clusters[a].cluster.zzz is not a kubeconfig key"
    )
