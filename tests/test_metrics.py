"""kubemux.metrics: a Prometheus collector over registry.status(), scraped and parsed."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest, make_asgi_app
from prometheus_client.parser import text_string_to_metric_families

import kubemux.metrics
from kubemux import Backoff, WatcherRegistry, WatchSettings
from kubemux._wire.types import MAX_ERROR_TYPES, count_error
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from support import TIMEOUT

# quick retries, and a watch cut at once is not a failure of its own (only what is injected)
QUICK = WatchSettings(
    backoff=Backoff(initial_delay=0.02, max_delay=0.1), min_healthy_watch=0.0, page_size=2
)
PODS = {"context": "prod", "resource": "pods", "scope": "*", "view": "objects"}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(prom: CollectorRegistry) -> Samples:
    """Every sample of one scrape, parsed back from the text exposition format."""
    text = generate_latest(prom).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def series_of(samples: Samples, context: str) -> list[str]:
    return [name for name, labels in samples if ("context", context) in labels]


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster() as c:
        for i in range(3):
            c.create("pods", make_pod(f"web-{i}"))
        c.create("pods", make_pod("db-0", "data"))
        yield c


@contextlib.asynccontextmanager
async def open_registry(
    tmp_path: Path, cluster: FakeCluster, settings: WatchSettings | None = None
) -> AsyncIterator[WatcherRegistry]:
    """A registry over two contexts: "prod" (the cluster) and "dev" (never started).

    Not a fixture: the registry's task group must be entered and left by the test's task.
    """
    async with FakeCluster() as idle:
        path = write_kubeconfig(tmp_path / "config", {"prod": cluster, "dev": idle})
        async with WatcherRegistry.from_kubeconfig(
            str(path), follow=False, settings=settings
        ) as registry:
            yield registry


async def test_scrape_reports_contexts_and_informers(tmp_path: Path, cluster: FakeCluster) -> None:
    async with open_registry(tmp_path, cluster) as watchers:
        prom = CollectorRegistry()
        kubemux.metrics.register(watchers, prom)
        with anyio.fail_after(TIMEOUT):
            await watchers.watch("prod", "pods")
            await watchers.watch("prod", "pods", namespace="data")
        s = scrape(prom)

        assert value(s, "kubemux_contexts") == 2
        assert value(s, "kubemux_kubeconfig_errors") == 0
        assert value(s, "kubemux_context_state", context="prod", state="running") == 1
        assert value(s, "kubemux_context_state", context="prod", state="idle") == 0
        assert series_of(s, "dev") == []  # idle: counted, no series of its own
        assert value(s, "kubemux_contexts_by_state", state="idle") == 1
        assert value(s, "kubemux_contexts_by_state", state="running") == 1
        assert value(s, "kubemux_context_generation", context="prod") == 1
        assert value(s, "kubemux_context_generation", context="dev") is None  # never started

        every = {"context": "prod", "resource": "pods", "scope": "*", "view": "objects"}
        data = {"context": "prod", "resource": "pods", "scope": "data", "view": "objects"}
        assert value(s, "kubemux_objects", **every) == 4
        assert value(s, "kubemux_objects", **data) == 1
        assert value(s, "kubemux_informers_synced", **every) == 1
        assert value(s, "kubemux_relists_total", **every) == 0
        assert value(s, "kubemux_skipped_lines_total", **every) == 0
        assert value(s, "kubemux_informers_failing", **every) == 0
        last_list = value(s, "kubemux_last_list_timestamp_seconds", **every)
        assert last_list is not None and last_list > 1.7e9
        # the state series: one informer, in exactly one state
        states = {
            dict(labels)["state"]: v
            for (name, labels), v in s.items()
            if name == "kubemux_informers" and ("scope", "*") in labels
        }
        assert sum(states.values()) == 1
        assert {"listing", "watching", "relisting", "backing off", "error"} <= set(states)
        # bounded labels: nothing names an object
        assert not any("web-0" in v for _, labels in s for _, v in labels)


async def test_values_follow_the_cluster(tmp_path: Path, cluster: FakeCluster) -> None:
    async with open_registry(tmp_path, cluster) as watchers:
        prom = CollectorRegistry()
        kubemux.metrics.register(watchers, prom)
        every = {"context": "prod", "resource": "pods", "scope": "*", "view": "objects"}
        with anyio.fail_after(TIMEOUT):
            store = await watchers.watch("prod", "pods")
            async with watchers.subscribe("pods", snapshot=False) as changes:
                cluster.create("pods", make_pod("web-9"))
                async for change in changes:
                    assert change.name == "web-9"
                    break
            assert value(scrape(prom), "kubemux_objects", **every) == 5 == len(store)

            assert value(scrape(prom), "kubemux_reconnects_total", **every) == 0
            assert cluster.drop_watches() == 1
            await cluster.wait_for(
                lambda: value(scrape(prom), "kubemux_reconnects_total", **every) == 1
            )


async def _changes_seen(changes: Any, expected: set[tuple[str, str]]) -> int:
    """Read ``changes`` until every (type, name) of ``expected`` came; how many came."""
    count = 0
    async for change in changes:
        count += 1
        expected.discard((change.type, change.name))
        if not expected:
            break
    return count


async def _watching(cluster: FakeCluster, prom: CollectorRegistry) -> None:
    """Until the informer's watch is open (its response began: the server knows earlier)."""
    await cluster.wait_for(
        lambda: value(scrape(prom), "kubemux_watch_age_seconds", **PODS) is not None
    )


def _cached_bytes(store: Any) -> int:
    return sum(len(raw) for raw in store.list_raw())


async def test_events_bytes_and_ages_are_counted(tmp_path: Path, cluster: FakeCluster) -> None:
    """Each watch event adds one to kubemux_events_total; kubemux_cached_bytes is the size of
    what the store holds; the watch and its last event are seconds old."""
    async with open_registry(tmp_path, cluster, QUICK) as watchers:
        prom = CollectorRegistry()
        kubemux.metrics.register(watchers, prom)
        with anyio.fail_after(TIMEOUT):
            store = await watchers.watch("prod", "pods")
            await _watching(cluster, prom)
            before = scrape(prom)
            assert value(before, "kubemux_events_total", **PODS) == 0  # the LIST is not events
            assert value(before, "kubemux_cached_bytes", **PODS) == _cached_bytes(store) > 0
            async with watchers.subscribe("pods", snapshot=False) as changes:
                cluster.create("pods", make_pod("web-7"))
                cluster.create("pods", make_pod("web-8", "data"))
                pod = cluster.get("pods", "default", "web-1")
                assert pod is not None
                pod["metadata"]["labels"] = {"tier": "front", "padding": "x" * 500}
                cluster.update("pods", pod)
                cluster.delete("pods", "default", "web-0")
                cluster.delete("pods", "data", "web-8")
                seen = await _changes_seen(
                    changes,
                    {
                        ("ADDED", "web-7"),
                        ("MODIFIED", "web-1"),
                        ("DELETED", "web-0"),
                        ("DELETED", "web-8"),
                    },
                )
            after = scrape(prom)
        assert seen == 5
        assert value(after, "kubemux_events_total", **PODS) == 5  # exactly one per event
        assert value(after, "kubemux_objects", **PODS) == len(store) == 4
        assert value(after, "kubemux_cached_bytes", **PODS) == _cached_bytes(store)
        assert value(after, "kubemux_cached_bytes", **PODS) != value(
            before, "kubemux_cached_bytes", **PODS
        )
        watch_age = value(after, "kubemux_watch_age_seconds", **PODS)
        event_age = value(after, "kubemux_last_event_age_seconds", **PODS)
        assert watch_age is not None and 0 <= watch_age < TIMEOUT
        assert event_age is not None and 0 <= event_age <= watch_age
        assert value(after, "kubemux_reconnects_total", **PODS) == 0
        # the same fields in status() and in its JSON form
        informer = watchers.status().contexts["prod"].informers[0]
        assert informer.events_applied == 5 and informer.bytes_cached == _cached_bytes(store)
        doc = watchers.status().to_json()["contexts"][0]["informers"][0]
        assert doc["events_applied"] == 5 and doc["errors_by_type"] == {}
        assert isinstance(doc["watch_started"], float) and isinstance(doc["last_event"], float)


async def test_bookmarks_move_last_event_but_are_not_events(tmp_path: Path) -> None:
    async with FakeCluster(bookmark_period=0.05) as cluster:
        cluster.create("pods", make_pod("web-0"))
        async with open_registry(tmp_path, cluster, QUICK) as watchers:
            prom = CollectorRegistry()
            kubemux.metrics.register(watchers, prom)
            with anyio.fail_after(TIMEOUT):
                await watchers.watch("prod", "pods")
                # nothing changes in the cluster: only bookmarks can set it
                await cluster.wait_for(
                    lambda: (
                        value(scrape(prom), "kubemux_last_event_age_seconds", **PODS) is not None
                    )
                )
                assert value(scrape(prom), "kubemux_events_total", **PODS) == 0
                # counts carry over a new watch (the first one's are folded in when it ends)
                async with watchers.subscribe("pods", snapshot=False) as changes:
                    cluster.create("pods", make_pod("web-1"))
                    await _changes_seen(changes, {("ADDED", "web-1")})
                    assert cluster.drop_watches() == 1
                    await cluster.wait_for(
                        lambda: value(scrape(prom), "kubemux_reconnects_total", **PODS) == 1
                    )
                    cluster.create("pods", make_pod("web-2"))
                    await _changes_seen(changes, {("ADDED", "web-2")})
                s = scrape(prom)
        assert value(s, "kubemux_events_total", **PODS) == 2


async def test_a_relist_counts_what_it_changed(tmp_path: Path, cluster: FakeCluster) -> None:
    """Changes a relist finds (missed while away) count as events, as subscribers see them."""
    async with open_registry(tmp_path, cluster, QUICK) as watchers:
        prom = CollectorRegistry()
        kubemux.metrics.register(watchers, prom)
        with anyio.fail_after(TIMEOUT):
            store = await watchers.watch("prod", "pods")
            await cluster.wait_for(lambda: cluster.open_watches == 1)
            async with watchers.subscribe("pods", snapshot=False) as changes:
                cluster.fail_next(1, status=410, reason="Expired", watch=True)
                assert cluster.drop_watches() == 1
                cluster.create("pods", make_pod("web-7"))
                cluster.delete("pods", "default", "web-0")
                seen = await _changes_seen(changes, {("ADDED", "web-7"), ("DELETED", "web-0")})
                await cluster.wait_for(lambda: cluster.open_watches == 1)
            s = scrape(prom)
        assert value(s, "kubemux_relists_total", **PODS) == 1
        assert value(s, "kubemux_events_total", **PODS) == seen == 2
        assert value(s, "kubemux_cached_bytes", **PODS) == _cached_bytes(store)
        # a 410 is how a watch ends up relisting, not a failure
        assert not [n for n, _ in s if n == "kubemux_errors_total"]


async def test_errors_are_counted_by_type(tmp_path: Path, cluster: FakeCluster) -> None:
    async with open_registry(tmp_path, cluster, QUICK) as watchers:
        prom = CollectorRegistry()
        kubemux.metrics.register(watchers, prom)
        with anyio.fail_after(TIMEOUT):
            await watchers.watch("prod", "pods")
            await cluster.wait_for(lambda: cluster.open_watches == 1)
            assert value(scrape(prom), "kubemux_errors_total", **PODS, type="Forbidden") is None
            cluster.fail_next(1, status=403, reason="Forbidden", watch=True)
            cluster.fail_next(2, status=429, reason="TooManyRequests", watch=True)
            assert cluster.drop_watches() == 1
            await cluster.wait_for(
                lambda: value(scrape(prom), "kubemux_errors_total", **PODS, type="ApiError") == 2
            )
            await _watching(cluster, prom)  # recovered
            s = scrape(prom)
        assert value(s, "kubemux_errors_total", **PODS, type="Forbidden") == 1
        assert value(s, "kubemux_errors_total", **PODS, type="ApiError") == 2  # 429 has no class
        # no watch age while a watch is down: it is back, so it is there and young
        watch_age = value(s, "kubemux_watch_age_seconds", **PODS)
        assert watch_age is not None and 0 <= watch_age < TIMEOUT
        types = {dict(labels)["type"] for name, labels in s if name == "kubemux_errors_total"}
        # the dropped stream may count as a connection failure, nothing else appears
        assert {"Forbidden", "ApiError"} <= types <= {"Forbidden", "ApiError", "ClusterUnreachable"}


async def test_watch_age_is_absent_while_not_watching(tmp_path: Path, cluster: FakeCluster) -> None:
    async with open_registry(tmp_path, cluster, QUICK) as watchers:
        prom = CollectorRegistry()
        kubemux.metrics.register(watchers, prom)
        with anyio.fail_after(TIMEOUT):
            await watchers.watch("prod", "pods")
            await _watching(cluster, prom)
            cluster.fail_next(10_000, status=500, watch=True)
            cluster.drop_watches()
            await cluster.wait_for(
                lambda: (
                    (value(scrape(prom), "kubemux_errors_total", **PODS, type="ApiError") or 0) >= 2
                )
            )
            s = scrape(prom)
        assert value(s, "kubemux_watch_age_seconds", **PODS) is None  # failing: no watch
        assert value(s, "kubemux_informers_failing", **PODS) == 1


async def test_a_table_view_is_counted(tmp_path: Path, cluster: FakeCluster) -> None:
    """The table informer keeps the same counters over its rows."""
    async with open_registry(tmp_path, cluster, QUICK) as watchers:
        prom = CollectorRegistry()
        kubemux.metrics.register(watchers, prom)
        with anyio.fail_after(TIMEOUT):
            table = await watchers.table("prod", "pods")
            await cluster.wait_for(lambda: cluster.open_watches == 1)
            async with watchers.subscribe("pods", snapshot=False, view="table") as changes:
                cluster.create("pods", make_pod("web-7"))
                cluster.delete("pods", "default", "web-0")
                seen = await _changes_seen(changes, {("ADDED", "web-7"), ("DELETED", "web-0")})
            s = scrape(prom)
        rows = {**PODS, "view": "table"}
        assert value(s, "kubemux_events_total", **rows) == seen == 2
        assert value(s, "kubemux_cached_bytes", **rows) == _cached_bytes(table) > 0
        assert value(s, "kubemux_objects", **rows) == len(table) == 4
        event_age = value(s, "kubemux_last_event_age_seconds", **rows)
        assert event_age is not None and 0 <= event_age < TIMEOUT
        # the object view of the same resource is a series of its own
        with anyio.fail_after(TIMEOUT):
            await watchers.watch("prod", "pods")
        s = scrape(prom)
        assert value(s, "kubemux_objects", **PODS) == 4
        assert value(s, "kubemux_objects", **rows) == 4


async def test_a_shared_watch_follower_is_counted(
    redis_server: Any, tmp_path: Path, cluster: FakeCluster
) -> None:
    """A follower (kubemux.share) reports the changes it applied from the leader's stream,
    its store's bytes, since when it follows and when it last applied a change."""
    pytest.importorskip("redis")
    from kubemux.share import Redis

    def engine() -> Redis:
        return Redis(redis_server.url, prefix="m", lease_ttl=1.5, acquire_period=0.25)

    path = str(write_kubeconfig(tmp_path / "config", {"prod": cluster}))
    lead = WatcherRegistry.from_kubeconfig(path, follow=False, settings=QUICK, share=engine())
    follow = WatcherRegistry.from_kubeconfig(
        path, follow=False, settings=QUICK, share=engine(), share_lead=False
    )
    async with lead, follow:
        prom = CollectorRegistry()
        kubemux.metrics.register(follow, prom)
        with anyio.fail_after(TIMEOUT):
            await lead.watch("prod", "pods")
            store = await follow.watch("prod", "pods")
            assert follow.status().contexts["prod"].informers[0].share_role == "follower"
            before = scrape(prom)
            async with follow.subscribe("pods", snapshot=False) as changes:
                cluster.create("pods", make_pod("web-7"))
                cluster.delete("pods", "default", "web-0")
                seen = await _changes_seen(changes, {("ADDED", "web-7"), ("DELETED", "web-0")})
            s = scrape(prom)
            cached = _cached_bytes(store)
    assert value(before, "kubemux_events_total", **PODS) == 0
    assert value(s, "kubemux_events_total", **PODS) == seen == 2
    assert value(s, "kubemux_cached_bytes", **PODS) == cached > 0
    following = value(s, "kubemux_watch_age_seconds", **PODS)
    event_age = value(s, "kubemux_last_event_age_seconds", **PODS)
    assert following is not None and 0 <= following < TIMEOUT
    assert event_age is not None and 0 <= event_age <= following


def test_error_types_are_bounded() -> None:
    errors: dict[str, int] = {}
    kinds = [type(f"Failure{i}", (Exception,), {}) for i in range(MAX_ERROR_TYPES * 3)]
    for kind in kinds:
        count_error(errors, kind())
    count_error(errors, kinds[0]())
    assert len(errors) == MAX_ERROR_TYPES + 1
    assert errors["Failure0"] == 2
    assert errors["other"] == MAX_ERROR_TYPES * 2
    assert sum(errors.values()) == len(kinds) + 1


async def test_series_go_with_the_context(tmp_path: Path, cluster: FakeCluster) -> None:
    async with open_registry(tmp_path, cluster) as watchers:
        prom = CollectorRegistry()
        kubemux.metrics.register(watchers, prom)
        with anyio.fail_after(TIMEOUT):
            await watchers.watch("prod", "pods")
            await _watching(cluster, prom)
        before = scrape(prom)
        assert {
            "kubemux_objects",
            "kubemux_events_total",
            "kubemux_cached_bytes",
            "kubemux_watch_age_seconds",
        } <= set(series_of(before, "prod"))

        assert await watchers.stop_watcher("prod")
        after = scrape(prom)
        assert series_of(after, "prod") == []  # idle now: every series of it is gone
        assert value(after, "kubemux_contexts_by_state", state="idle") == 2
        assert value(after, "kubemux_contexts_by_state", state="running") == 0


async def test_a_failing_context_shows_as_error(tmp_path: Path) -> None:
    async with FakeCluster(tokens={"right"}) as locked:
        path = write_kubeconfig(
            tmp_path / "config", {"locked": FakeContext(cluster=locked, token="wrong")}
        )
        async with WatcherRegistry.from_kubeconfig(str(path), follow=False) as registry:
            prom = CollectorRegistry()
            kubemux.metrics.register(registry, prom)
            with anyio.fail_after(TIMEOUT), pytest.raises(kubemux.Unauthorized):
                await registry.watch("locked", "pods")
            s = scrape(prom)
    failing = {
        labels: v
        for (name, labels), v in s.items()
        if name == "kubemux_context_state" and ("context", "locked") in labels
    }
    assert sum(failing.values()) == 1
    state = next(dict(labels)["state"] for labels, v in failing.items() if v == 1)
    assert state in ("backing off", "error")
    assert value(s, "kubemux_context_retry_in_seconds", context="locked") is not None


async def test_register_and_unregister(tmp_path: Path, cluster: FakeCluster) -> None:
    async with open_registry(tmp_path, cluster) as watchers:
        prom = CollectorRegistry()
        assert scrape(prom) == {}
        with kubemux.metrics.registered(watchers, prom):
            assert value(scrape(prom), "kubemux_contexts") == 2
            with pytest.raises(ValueError, match="Duplicated"):
                kubemux.metrics.register(watchers, prom)  # the same names twice
        assert scrape(prom) == {}
        assert kubemux.metrics.unregister(watchers, prom) is False
        # another prefix may share the Prometheus registry
        kubemux.metrics.register(watchers, prom, prefix="edge")
        assert value(scrape(prom), "edge_contexts") == 2
        assert kubemux.metrics.unregister(watchers, prom) is True


async def test_scrape_from_another_thread_runs_on_the_loop(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    async with open_registry(tmp_path, cluster) as watchers:
        prom = CollectorRegistry()
        kubemux.metrics.register(watchers, prom)
        with anyio.fail_after(TIMEOUT):
            await watchers.watch("prod", "pods")
            text = await anyio.to_thread.run_sync(generate_latest, prom)
        assert (
            b'kubemux_objects{context="prod",resource="pods",scope="*",view="objects"} 4.0' in text
        )


async def test_served_over_asgi(tmp_path: Path, cluster: FakeCluster) -> None:
    async with open_registry(tmp_path, cluster) as watchers:
        """The recipe for a /metrics route: prometheus_client's ASGI app over the registry."""
        prom = CollectorRegistry()
        kubemux.metrics.register(watchers, prom)
        transport = httpx.ASGITransport(app=make_asgi_app(prom))
        with anyio.fail_after(TIMEOUT):
            await watchers.watch("prod", "pods")
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                response = await client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        families = {f.name for f in text_string_to_metric_families(response.text)}
        assert {"kubemux_objects", "kubemux_context_state", "kubemux_reconnects"} <= families


async def test_a_closed_registry_scrapes_without_error(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        prom = CollectorRegistry()
        async with WatcherRegistry.from_kubeconfig(str(path), follow=False) as registry:
            kubemux.metrics.register(registry, prom)
            with anyio.fail_after(TIMEOUT):
                await registry.watch("prod", "pods")
        s = scrape(prom)
    assert value(s, "kubemux_objects", **PODS) is None


# Fields that status() does not carry yet are read when present: this stand-in has them all.


class _State(enum.Enum):
    RUNNING = "running"
    IDLE = "idle"


@dataclasses.dataclass(frozen=True)
class _Informer:
    resource: str
    namespace: str | None
    state: str
    label_selector: str | None = None
    objects: int = 2
    bytes_cached: int = 4096
    events_applied: int = 7
    relists: int = 1
    reconnects: int = 3
    skipped_lines: int = 0
    errors_by_type: dict[str, int] = dataclasses.field(default_factory=dict)
    has_synced: bool = True
    last_error: str | None = None
    last_sync: float = 1.8e9
    watch_started: float | None = None
    last_event: float | None = None


@dataclasses.dataclass(frozen=True)
class _Context:
    state: _State
    generation: int
    informers: tuple[_Informer, ...]
    credential_refreshes: int = 5
    retry_in: float | None = None


@dataclasses.dataclass(frozen=True)
class _Status:
    contexts: dict[str, _Context]
    subscribers: int = 4
    subscriber_overflows: int = 1
    kubeconfig_syncs: int = 9
    kubeconfig_errors: dict[str, str] = dataclasses.field(default_factory=dict)
    invalid_contexts: dict[str, str] = dataclasses.field(default_factory=dict)


class _Watchers:
    def __init__(self, status: _Status) -> None:
        self._status = status

    def status(self) -> _Status:
        return self._status


def test_fields_status_will_carry() -> None:
    now = time.time()
    status = _Status(
        contexts={
            "prod": _Context(
                state=_State.RUNNING,
                generation=2,
                informers=(
                    _Informer(
                        "pods",
                        None,
                        "watching",
                        errors_by_type={"ResourceExpired": 2, "ClusterUnreachable": 1},
                        watch_started=now - 30,
                        last_event=now - 3,
                    ),
                    _Informer(  # another selector, same series: values add up
                        "pods",
                        None,
                        "backing off",
                        label_selector="app=web",
                        errors_by_type={"ResourceExpired": 1},
                        last_error="boom",
                        watch_started=now - 10,
                        last_event=now - 5,
                    ),
                ),
            )
        }
    )
    prom = CollectorRegistry()
    collector = kubemux.metrics.KubemuxCollector(_Watchers(status))  # type: ignore[arg-type]
    prom.register(collector)
    s = scrape(prom)
    pods = {"context": "prod", "resource": "pods", "scope": "*", "view": "objects"}
    assert value(s, "kubemux_subscribers") == 4
    assert value(s, "kubemux_subscriber_overflows_total") == 1
    assert value(s, "kubemux_kubeconfig_syncs_total") == 9
    assert value(s, "kubemux_context_state", context="prod", state="running") == 1
    assert value(s, "kubemux_context_state", context="prod", state="idle") == 0
    assert value(s, "kubemux_context_credential_refreshes_total", context="prod") == 5
    assert value(s, "kubemux_objects", **pods) == 4
    assert value(s, "kubemux_cached_bytes", **pods) == 8192
    assert value(s, "kubemux_events_total", **pods) == 14
    assert value(s, "kubemux_relists_total", **pods) == 2
    assert value(s, "kubemux_reconnects_total", **pods) == 6
    assert value(s, "kubemux_informers_failing", **pods) == 1
    assert value(s, "kubemux_informers", **pods, state="watching") == 1
    assert value(s, "kubemux_informers", **pods, state="backing off") == 1
    assert value(s, "kubemux_informers", **pods, state="listing") == 0
    assert value(s, "kubemux_errors_total", **pods, type="ResourceExpired") == 3
    assert value(s, "kubemux_errors_total", **pods, type="ClusterUnreachable") == 1
    watch_age = value(s, "kubemux_watch_age_seconds", **pods)
    assert watch_age is not None and 10 <= watch_age < 20  # the newest watch
    event_age = value(s, "kubemux_last_event_age_seconds", **pods)
    assert event_age is not None and 3 <= event_age < 5


def test_a_status_without_optional_fields() -> None:
    @dataclasses.dataclass(frozen=True)
    class Bare:
        contexts: dict[str, Any]

    prom = CollectorRegistry()
    prom.register(kubemux.metrics.KubemuxCollector(_Watchers(Bare({"a": object()}))))  # type: ignore[arg-type]
    s = scrape(prom)
    assert value(s, "kubemux_contexts") == 1
    assert value(s, "kubemux_subscribers") is None
    assert series_of(s, "a") == []


def test_public_names() -> None:
    names = kubemux.metrics.__all__
    assert names == sorted(names)
    assert {"KubemuxCollector", "register", "registered", "unregister"} <= set(names)
    for name in names:
        assert getattr(kubemux.metrics, name) is not None
