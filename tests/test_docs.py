"""The documentation site builds (strict) and every sample it shows is a tested example."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import anyio
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from kubemux import WatcherRegistry
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
INCLUDE = re.compile(r'^\s*--8<--\s+"([^"]+)"', re.MULTILINE)
PYTHON_BLOCK = re.compile(r"^```(?:python|py)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def includes() -> dict[str, list[str]]:
    """Page -> the files it includes with pymdownx.snippets."""
    found = {}
    for page in sorted(DOCS.rglob("*.md")):
        paths = INCLUDE.findall(page.read_text())
        if paths:
            found[str(page.relative_to(DOCS))] = paths
    return found


def test_site_builds_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reference = (site / "reference" / "kubemux" / "index.html").read_text()
    for anchor in ("kubemux.WatcherRegistry.watch", "kubemux.Store.get", "kubemux.Change"):
        assert f'id="{anchor}"' in reference
    assert 'id="kubemux.testing.FakeCluster"' in (site / "reference/testing/index.html").read_text()
    assert 'id="kubemux.metrics.register"' in (site / "reference/metrics/index.html").read_text()
    # an included sample is on its page, not a dangling include line
    quickstart = (site / "quickstart" / "index.html").read_text()
    assert "autowatch" in quickstart and "--8&lt;--" not in quickstart


def test_every_sample_is_an_example_that_a_test_runs() -> None:
    pages = includes()
    assert "quickstart.md" in pages
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    for page, paths in pages.items():
        for path in paths:
            assert path.startswith("examples/"), f"{page}: sample {path} is not under examples/"
            assert (ROOT / path).is_file(), f"{page}: {path} does not exist"
            assert Path(path).stem in tests, f"{page}: no test runs {path}"


def test_python_blocks_are_only_includes() -> None:
    """A Python sample typed into a page would go untested: samples are example files."""
    for page in DOCS.rglob("*.md"):
        for block in PYTHON_BLOCK.findall(page.read_text()):
            assert INCLUDE.fullmatch(block.strip()), f"{page.name}: inline Python sample"


def test_the_docs_say_asyncio() -> None:
    text = (DOCS / "index.md").read_text()
    assert "asyncio" in text and "aiohttp" in text and "trio" in text


async def test_testing_example(tmp_path: Path) -> None:
    example = load(ROOT / "examples" / "testing_with_fakecluster.py")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    await example.test_pods_by_node(tmp_path / "a")
    await example.test_forbidden(tmp_path / "b")


async def test_testing_without_http_example() -> None:
    example = load(ROOT / "examples" / "testing_with_fakeconnector.py")
    await example.test_pods_by_node()
    await example.test_a_context_that_cannot_connect()


async def test_metrics_server_example(tmp_path: Path) -> None:
    example = load(ROOT / "examples" / "metrics_server.py")
    async with FakeCluster() as cluster:
        cluster.create("pods", make_pod("web-1"))
        path = write_kubeconfig(tmp_path / "config", {"prod": cluster})
        async with WatcherRegistry.from_kubeconfig(str(path), follow=False) as registry:
            with anyio.fail_after(10):
                await registry.watch("prod", "pods")
                async with TestClient(TestServer(example.make_app(registry))) as client:
                    response = await client.get("/metrics")
                    text = await response.text()
    assert response.status == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    labels = (("context", "prod"), ("resource", "pods"), ("scope", "*"), ("view", "objects"))
    assert samples[("kubemux_objects", labels)] == 1
