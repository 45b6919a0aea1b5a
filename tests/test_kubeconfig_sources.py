"""Which file each part of a merged context came from (OIDC write-back goes to the user's)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kubemux import load_kubeconfig


def test_user_source_names_the_file_that_defined_the_user(tmp_path: Path) -> None:
    first, second = tmp_path / "contexts.yaml", tmp_path / "users.yaml"
    first.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "contexts": [
                    {"name": "split", "context": {"cluster": "c", "user": "far"}},
                    {"name": "local", "context": {"cluster": "c", "user": "near"}},
                ],
                "users": [{"name": "near", "user": {"token": "t"}}],
            }
        )
    )
    second.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "users": [{"name": "far", "user": {"token": "u"}}],
            }
        )
    )
    snapshot = load_kubeconfig([str(first), str(second)])
    split, local = snapshot.contexts["split"], snapshot.contexts["local"]
    assert split.source == str(first) and split.user_source == str(second)
    assert local.user_source is None
