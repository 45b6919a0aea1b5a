"""A TLS failure is named as one: what was refused, against which name and which CA."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from kubemux import Backoff, ClusterUnreachable, WatcherRegistry, WatchSettings
from kubemux.cli import run
from kubemux.testing import FakeCluster, kubeconfig_dict
from support import TIMEOUT

FAST = WatchSettings(backoff=Backoff(initial_delay=0.02, max_delay=0.1))


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_a_certificate_signed_by_another_ca_says_which_ca(tmp_path: Path) -> None:
    async with FakeCluster(tls=True) as a, FakeCluster(tls=True) as b:
        doc = kubeconfig_dict({"prod": a})
        doc["clusters"][0]["cluster"]["certificate-authority"] = b.ca_file  # not a's
        path = write(tmp_path / "config", doc)
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as registry:
            with anyio.fail_after(TIMEOUT), pytest.raises(ClusterUnreachable) as caught:
                await registry.watch("prod", "pods")
        message = str(caught.value)
        assert "TLS: the server's certificate was refused: " in message
        assert f"server name '127.0.0.1', CA: certificate-authority {b.ca_file}" in message
        assert "SSLCertVerificationError" not in message


async def test_a_name_the_certificate_does_not_hold_is_named(tmp_path: Path) -> None:
    async with FakeCluster(tls=True) as a:
        doc = kubeconfig_dict({"prod": a})
        doc["clusters"][0]["cluster"]["tls-server-name"] = "wrong.example"
        path = write(tmp_path / "config", doc)
        out, err = io.StringIO(), io.StringIO()
        argv = ["get", "pods", "--kubeconfig", str(path)]
        with anyio.fail_after(TIMEOUT):
            assert await run(argv, stdout=out, stderr=err) == 1
        line = err.getvalue()
        assert line.startswith("kubemux: error: cannot reach https://127.0.0.1:")
        assert "TLS: the server's certificate was refused: Hostname mismatch" in line
        assert "'wrong.example'" in line and f"certificate-authority {a.ca_file}" in line
        assert line.count("\n") == 1
