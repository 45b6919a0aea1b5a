"""Examples are tested code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from kubemux.testing import FakeCluster, make_pod, write_kubeconfig

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


async def test_watch_pods_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with FakeCluster() as a, FakeCluster() as b:
        a.create("pods", make_pod("web-1"))
        b.create("pods", make_pod("db-1", "data"))
        path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
        with anyio.fail_after(15):
            await load("watch_pods").main(str(path), limit=2)
    out = capsys.readouterr().out
    assert "contexts: prod, dev | current: prod" in out
    assert "prod         ADDED     default/web-1" in out
    assert "dev          ADDED     data/db-1" in out
