"""Shared fixtures: a clean environment, a FakeCluster, and leak checks on every test."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import settings

from kubemux.testing import FakeCluster, make_pod
from share_support import RedisServer, require_redis_server

# Hypothesis's per-example deadline is a wall-clock check: under a loaded run an example of
# test_share_placement took 286 ms and failed as "flaky". Tests check behaviour, not time.
settings.register_profile("kubemux", deadline=None)
settings.load_profile("kubemux")

_sessions: weakref.WeakSet[aiohttp.ClientSession] = weakref.WeakSet()
_orig_init = aiohttp.ClientSession.__init__


def _tracking_init(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
    _orig_init(self, *args, **kwargs)
    _sessions.add(self)


aiohttp.ClientSession.__init__ = _tracking_init  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's kubeconfig."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture(autouse=True)
async def _no_leaks() -> AsyncIterator[None]:
    """Fail any test that leaves an asyncio task or an open aiohttp session behind."""
    before = set(asyncio.all_tasks())
    open_before = {id(s) for s in _sessions if not s.closed}
    yield
    me = asyncio.current_task()
    leaked: set[asyncio.Task[Any]] = set()
    for _ in range(20):  # let tasks that are already finishing run to the end
        leaked = {t for t in asyncio.all_tasks() - before if t is not me and not t.done()}
        if not leaked:
            break
        await asyncio.sleep(0)
    gc.collect()
    sessions = [s for s in _sessions if not s.closed and id(s) not in open_before]
    problems = []
    if leaked:
        problems.append(f"leaked tasks: {sorted(repr(t.get_coro()) for t in leaked)}")
        for t in leaked:
            t.cancel()
    if sessions:
        problems.append(f"unclosed aiohttp sessions: {len(sessions)}")
    if problems:
        pytest.fail("; ".join(problems))


@pytest.fixture
async def fake_cluster() -> AsyncIterator[FakeCluster]:
    """One FakeCluster accepting the token ``t`` (bookmarks every 0.2 s), with 10 pods
    ``p-0``..``p-9`` in ``default`` (odd) and ``other`` (even)."""
    async with FakeCluster(tokens={"t"}, bookmark_period=0.2, name="fake") as cluster:
        for i in range(10):
            cluster.create("pods", make_pod(f"p-{i}", "default" if i % 2 else "other"))
        yield cluster


@pytest.fixture
async def two_clusters() -> AsyncIterator[tuple[FakeCluster, FakeCluster]]:
    """Clusters ``a`` (token ``tok-a``, pods a-0..a-2 in default) and ``b`` (token
    ``tok-b``, pods b-0..b-2 in kube-system)."""
    async with (
        FakeCluster(tokens={"tok-a"}, name="a") as a,
        FakeCluster(tokens={"tok-b"}, name="b") as b,
    ):
        for i in range(3):
            a.create("pods", make_pod(f"a-{i}"))
            b.create("pods", make_pod(f"b-{i}", "kube-system"))
        yield a, b


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A redis-server of its own on a free port, persistence off (skipped without one;
    required when CI=true)."""
    require_redis_server()
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what importing and collecting made: ~200,000 objects (kubernetes-asyncio's
    models, aiohttp, every test module) that ``_no_leaks``'s ``gc.collect()`` would otherwise
    walk after every test (0.1-0.3 s each, most of a fast test's time). Frozen objects are
    still freed when their last reference goes; only a cycle among them is kept, and none
    of them is a session or a task of a test. Hypothesis is imported first: its
    ``register_random`` asks ``gc.get_referrers``, which does not see frozen objects."""
    import hypothesis  # noqa: F401

    gc.collect()
    gc.freeze()
