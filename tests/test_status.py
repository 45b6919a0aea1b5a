"""status(): frozen, JSON-ready, never a secret."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from kubemux import ContextState, KubemuxError, WatcherRegistry
from kubemux.testing import FakeCluster, FakeContext, write_kubeconfig
from support import TIMEOUT


async def test_to_json_is_plain_json_with_states_as_strings(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster, "idle": fake_cluster})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("c", "pods")
        async with registry.subscribe("pods"):
            status = registry.status()
        doc = json.loads(json.dumps(status.to_json()))
    assert status.contexts["c"].state is ContextState.RUNNING
    assert status.contexts["c"].state == "running"
    by_name = {c["name"]: c for c in doc["contexts"]}
    assert by_name["c"]["state"] == "running" and by_name["idle"]["state"] == "idle"
    assert by_name["c"]["informers"][0]["objects"] == 10
    assert by_name["c"]["informers"][0]["resource"] == "pods"
    assert doc["subscribers"] == 1 and doc["subscriber_overflows"] == 0
    assert [c["name"] for c in doc["contexts"]] == ["c", "idle"]


async def test_a_password_in_the_server_url_never_shows(tmp_path: Path) -> None:
    """The server URL's userinfo is redacted in status().server, last_error and to_json()."""
    url = "https://admin:hunter2@127.0.0.1:1"  # nothing listens on port 1
    path = write_kubeconfig(tmp_path / "config", {"c": FakeContext(cluster=url, token="t")})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT), pytest.raises(KubemuxError):
            await registry.watch("c", "pods")
        status = registry.status()
    text = json.dumps(status.to_json()) + repr(status)
    assert "hunter2" not in text and "admin" not in text
    assert status.contexts["c"].server == "https://***@127.0.0.1:1"
    assert status.contexts["c"].last_error
