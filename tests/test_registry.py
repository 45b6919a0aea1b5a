"""WatcherRegistry end to end: real HTTP to FakeClusters through kubernetes-asyncio."""

from __future__ import annotations

import contextlib
import logging
import random
from pathlib import Path
from typing import Any

import anyio
import pytest

import kubemux
from kubemux import (
    Backoff,
    ClusterUnreachable,
    ContextNotFound,
    ContextRemoved,
    Unauthorized,
    WatcherRegistry,
)
from kubemux.testing import FakeCluster, FakeContext, make_pod, rewrite_kubeconfig, write_kubeconfig
from support import TIMEOUT


def _kubeconfig(tmp_path: Path, contexts: dict[str, FakeCluster | FakeContext]) -> Path:
    return write_kubeconfig(tmp_path / "config", contexts)


def _names(store: kubemux.Store) -> set[str]:
    return {o["metadata"]["name"] for o in store.list()}


async def test_watch_returns_synced_store_and_follows_changes(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = two_clusters
    path = _kubeconfig(tmp_path, {"a": a, "b": b})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        assert set(registry.contexts) == {"a", "b"}
        assert registry.current_context == "a"
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("a", "pods")
        assert store.has_synced
        assert _names(store) == {"a-0", "a-1", "a-2"}
        assert store.get("default", "a-1") is not None
        assert "managedFields" not in store.get("default", "a-1")["metadata"]
        async with registry.subscribe("pods", ["a"], snapshot=False) as changes:
            a.create("pods", make_pod("a-new"))
            with anyio.fail_after(TIMEOUT):
                change = await changes.__anext__()
        assert (change.context, change.type, change.name) == ("a", "ADDED", "a-new")
        assert store.get("default", "a-new") is not None
        # the other context was never started: lazy
        assert registry.live_contexts == ["a"]
        assert b.requests == [] or all(r.path.startswith("/version") for r in b.requests)


async def test_selected_informers_are_separate_stores(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = two_clusters
    a.create("pods", make_pod("front-1", labels={"tier": "front"}))
    path = _kubeconfig(tmp_path, {"a": a})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            every = await registry.watch("a", "pods")
            front = await registry.watch("a", "pods", label_selector="tier=front")
        assert _names(front) == {"front-1"} and len(every) == 4
        assert registry.store("a", "pods") is every
        assert registry.store("a", "pods", label_selector="tier=front") is front
        assert registry.store("a", "pods", label_selector="tier=back") is None
        assert registry.store("a", "pods", field_selector="spec.nodeName=n") is None


async def test_single_flight_start(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = two_clusters
    path = _kubeconfig(tmp_path, {"a": a})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        stores: list[kubemux.Store] = []

        async def one() -> None:
            stores.append(await registry.watch("a", "pods"))

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                for _ in range(50):
                    tg.start_soon(one)
        assert len(stores) == 50
        assert all(s is stores[0] for s in stores)
        pods = [r for r in a.requests if r.path == "/api/v1/pods"]
        initial = [r for r in pods if not r.is_watch or r.query.get("sendInitialEvents") == "true"]
        assert len(initial) == 1  # one LIST (or one streaming list) for 50 callers
        assert not [r for r in a.requests if r.path in ("/api", "/apis")]  # a built-in


async def test_context_removed_from_file_stops_everything(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = two_clusters
    path = _kubeconfig(tmp_path, {"a": a, "b": b})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            store_b = await registry.watch("b", "pods")
            await registry.watch("a", "pods")
            await b.wait_for(lambda: b.open_watches == 1)
        async with registry.subscribe("pods", ["b"], snapshot=False) as changes:
            await rewrite_kubeconfig(registry, path, {"a": a}, present=())
            with anyio.fail_after(TIMEOUT):
                change = await changes.__anext__()
                await b.wait_for(lambda: b.open_watches == 0)
        assert (change.context, change.type) == ("b", "REMOVED")
        assert registry.live_contexts == ["a"]
        assert "b" not in registry.contexts
        assert len(store_b) == 0 and not store_b.has_synced  # dropped
        assert a.open_watches == 1  # the other context is untouched
        with pytest.raises(ContextNotFound):
            await registry.watch("b", "pods")


async def test_a_rotated_token_hands_the_caches_over_and_sends_no_reset(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    """Issue 29, point 4: a reload that keeps the cluster (a new token) keeps the store
    (the same object), and what changed while nobody watched comes as the changes a
    watcher would have seen: no RESET."""
    a, _ = two_clusters
    path = _kubeconfig(tmp_path, {"a": a})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            old_store = await registry.watch("a", "pods")
            await a.wait_for(lambda: a.open_watches_for("tok-a") == 1)
        gen_before = registry.status().contexts["a"].generation
        a.tokens.add("tok-new")
        async with registry.subscribe("pods", ["a"], snapshot=False) as changes:
            a.stall()  # what changes now reaches no watch: only the next LIST shows it
            a.create("pods", make_pod("a-3"))
            a.delete("pods", "default", "a-0")
            await rewrite_kubeconfig(
                registry, path, {"a": FakeContext(cluster=a, token="tok-new")}, present=()
            )
            a.unstall()
            seen = []
            with anyio.fail_after(TIMEOUT):
                while len(seen) < 2:
                    seen.append(await changes.__anext__())
        assert sorted((c.type, c.name) for c in seen) == [("ADDED", "a-3"), ("DELETED", "a-0")]
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("a", "pods")
            await a.wait_for(
                lambda: a.open_watches_for("tok-a") == 0 and a.open_watches_for("tok-new") == 1
            )
        assert store is old_store and store.has_synced
        assert _names(store) == {"a-1", "a-2", "a-3"}
        assert registry.status().contexts["a"].generation > gen_before
        assert a.requests_for("tok-new")


async def test_a_handed_over_store_the_new_credential_may_not_read_is_cleared(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    """The same cluster, a credential it refuses: what the old one listed is not served on."""
    a, _ = two_clusters
    path = _kubeconfig(tmp_path, {"a": a})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("a", "pods")
        async with registry.subscribe("pods", ["a"], snapshot=False) as changes:
            await rewrite_kubeconfig(
                registry, path, {"a": FakeContext(cluster=a, token="revoked")}, present=()
            )
            with anyio.fail_after(TIMEOUT):
                first = await changes.__anext__()
        assert first.type == "RESET"
        assert not store.has_synced and len(store) == 0
        with anyio.fail_after(TIMEOUT), pytest.raises(Unauthorized):
            await registry.watch("a", "pods")


# the old fake is stopped under the registry's pooled keep-alive connections (a restore):
# its server side of them is reported unclosed at collection
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_handed_over_store_never_goes_back_in_time(tmp_path: Path) -> None:
    """The same server URL, but a cluster restored with older resourceVersions (a new fake
    on the same port): the new informer's LIST is older than what the store had shown, so
    the store starts over (a RESET, then the restored state) instead of going back."""
    async with contextlib.AsyncExitStack() as before:
        old = await before.enter_async_context(FakeCluster(tokens={"t1", "t2"}, name="old"))
        for i in range(5):
            old.create("pods", make_pod(f"old-{i}"))
        path = _kubeconfig(tmp_path, {"a": FakeContext(cluster=old, token="t1")})
        async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
            with anyio.fail_after(TIMEOUT):
                store = await registry.watch("a", "pods")
            assert store.resource_version == "5"
            async with registry.subscribe("pods", ["a"], snapshot=False) as changes:
                port = old.port
                await before.aclose()  # the cluster goes; one restored from a backup comes
                async with FakeCluster(tokens={"t1", "t2"}, name="new", port=port) as new:
                    new.create("pods", make_pod("restored-0"))  # resourceVersion 1
                    await rewrite_kubeconfig(
                        registry, path, {"a": FakeContext(cluster=new, token="t2")}, present=()
                    )
                    seen = []
                    with anyio.fail_after(TIMEOUT):
                        while len(seen) < 2:
                            seen.append(await changes.__anext__())
                    assert [(c.type, c.name) for c in seen] == [
                        ("RESET", ""),
                        ("ADDED", "restored-0"),
                    ]
                    assert registry.store("a", "pods") is store
                    assert store.resource_version == "1" and len(store) == 1


async def test_a_reload_onto_another_cluster_resets(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    """A reload that changes the server ends what watched the old cluster: a RESET, a new
    store, never the old cluster's objects carried on."""
    a, b = two_clusters
    path = _kubeconfig(tmp_path, {"a": a})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            old_store = await registry.watch("a", "pods")
        async with registry.subscribe("pods", ["a"], snapshot=False) as changes:
            await rewrite_kubeconfig(registry, path, {"a": b}, present=())
            seen = []
            with anyio.fail_after(TIMEOUT):
                while len(seen) < 4:  # RESET, then the other cluster's pods
                    seen.append(await changes.__anext__())
        assert seen[0].type == "RESET"
        assert {c.type for c in seen[1:]} == {"ADDED"}
        assert not old_store.has_synced and len(old_store) == 0
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("a", "pods")
        assert store is not old_store
        assert not _names(store) & {"a-0", "a-1", "a-2"}


async def test_unchanged_fingerprint_no_churn_and_broken_file_removes_nothing(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = two_clusters
    contexts: dict[str, FakeCluster | FakeContext] = {"a": a, "b": b}
    path = _kubeconfig(tmp_path, contexts)
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("a", "pods")
        gen = registry.status().contexts["a"].generation
        requests = len(a.requests)
        # a half-written file: nothing is removed, the error is visible
        before = registry.kubeconfig_syncs
        path.write_text(path.read_text()[: len(path.read_text()) // 2] + "\n  - : [\n")
        with anyio.fail_after(TIMEOUT):
            await registry.wait_kubeconfig_sync(before)
        st = registry.status()
        assert set(st.contexts) == {"a", "b"}
        assert str(path) in st.kubeconfig_errors
        assert st.contexts["a"].state == "running"
        # fixing it changes nothing else
        await rewrite_kubeconfig(registry, path, contexts, present=())
        st = registry.status()
        assert st.kubeconfig_errors == {}
        assert st.contexts["a"].generation == gen
        assert len([r for r in a.requests[requests:] if not r.is_watch]) == 0


async def test_interleaved_stop_and_watch(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = two_clusters
    path = _kubeconfig(tmp_path, {"a": a})
    rng = random.Random(7)
    errors: list[BaseException] = []
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:

        async def watcher() -> None:
            try:
                store = await registry.watch("a", "pods")
            except ContextRemoved:
                return
            except Exception as exc:  # noqa: BLE001 - anything else is a bug
                errors.append(exc)
                return
            # a returned store belongs to a live generation when returned
            if not store.has_synced:
                errors.append(AssertionError("returned a store that is not synced"))

        async def stopper() -> None:
            await registry.stop_watcher("a")

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for _ in range(100):
                    tg.start_soon(watcher if rng.random() < 0.6 else stopper)
                    if rng.random() < 0.3:
                        await anyio.lowlevel.checkpoint()
        assert errors == []
        assert len(registry.live_contexts) <= 1
        await registry.stop_watcher("a")
        assert registry.live_contexts == []
        with anyio.fail_after(TIMEOUT):
            await a.wait_for(lambda: a.open_watches == 0)
        assert registry._structure_sizes()["entries"] == 0


async def test_stop_watcher_is_idempotent(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = two_clusters
    path = _kubeconfig(tmp_path, {"a": a})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        assert await registry.stop_watcher("nope") is False
        assert await registry.stop_watcher("a") is False  # known but never started
        with anyio.fail_after(TIMEOUT):
            await registry.watch("a", "pods")
        results: list[bool] = []

        async def stop() -> None:
            results.append(await registry.stop_watcher("a"))

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(stop)
        assert results == [True] * 5  # concurrent calls share one stop
        assert await registry.stop_watcher("a") is False
        assert a.open_watches == 0
        assert registry.status().contexts["a"].state == "idle"
        # and it can start again: a new generation
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("a", "pods")
        assert len(store) == 3


async def test_unauthorized_start_backs_off(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = two_clusters
    path = _kubeconfig(tmp_path, {"a": FakeContext(cluster=a, token="wrong")})
    async with WatcherRegistry.from_kubeconfig(
        str(path), start_backoff=Backoff(initial_delay=3600, jitter=False)
    ) as registry:
        with anyio.fail_after(TIMEOUT), pytest.raises(Unauthorized) as info:
            await registry.watch("a", "pods")
        assert info.value.status == 401
        n = len(a.requests)
        for _ in range(20):  # no request storm
            with pytest.raises(Unauthorized):
                await registry.watch("a", "pods")
        assert len(a.requests) == n
        st = registry.status().contexts["a"]
        assert st.state in ("backing off", "error")
        assert "Unauthorized" in (st.last_error or "")
        assert st.retry_in is not None and st.retry_in > 0


async def test_failed_start_is_not_poisoned(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = two_clusters
    path = _kubeconfig(tmp_path, {"a": a})
    async with WatcherRegistry.from_kubeconfig(
        str(path), start_backoff=Backoff(initial_delay=0.0, jitter=False)
    ) as registry:
        a.fail_next(1, status=403, reason="Forbidden")
        with anyio.fail_after(TIMEOUT), pytest.raises(kubemux.Forbidden):
            await registry.watch("a", "pods", "default")  # one namespace: no fallback
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("a", "pods", "default")  # backoff of 0 s: tried again
        assert len(store) == 3
        assert registry.status().contexts["a"].last_error is None


async def test_unreachable_context_does_not_affect_others(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = two_clusters
    dead = FakeCluster(name="dead")
    await dead.start()
    server = dead.server
    await dead.stop()
    path = _kubeconfig(tmp_path, {"a": a, "dead": FakeContext(cluster=server)})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT), pytest.raises(ClusterUnreachable) as info:
            await registry.watch("dead", "pods")
        assert server.split("//")[1] in str(info.value)
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("a", "pods")
        assert len(store) == 3
        st = registry.status()
        assert st.contexts["a"].state == "running"
        assert st.contexts["dead"].state in ("backing off", "error")


async def test_unknown_context_and_invalid_context(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: broken\n"
        "contexts:\n- name: broken\n  context: {cluster: missing, user: u}\n"
        "users:\n- name: u\n  user: {token: s3cret-token}\n"
    )
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with pytest.raises(kubemux.InvalidContext, match="cluster 'missing' not found") as info:
            await registry.watch("broken", "pods")  # found, but it cannot be used
        assert info.value.path == str(path) and info.value.context == "broken"
        assert not isinstance(info.value, ContextNotFound)
        with pytest.raises(ContextNotFound):
            await registry.watch("nope", "pods")
        assert "broken" in registry.status().invalid_contexts


async def test_no_secret_in_status_repr_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sup3r-s3cret-t0ken"
    caplog.set_level(logging.DEBUG, logger="kubemux")
    async with FakeCluster(tokens={secret}) as c:
        c.create("pods", make_pod("p"))
        path = write_kubeconfig(
            tmp_path / "config",
            {
                "good": FakeContext(cluster=c, token=secret),
                "bad": FakeContext(cluster=c, token=secret + "-wrong"),
            },
        )
        async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
            with anyio.fail_after(TIMEOUT):
                await registry.watch("good", "pods")
                with pytest.raises(Unauthorized):
                    await registry.watch("bad", "pods")
            texts = [
                repr(registry),
                repr(registry.status()),
                repr(registry.contexts),
                str(registry.contexts["good"]),
            ]
            texts += [r.getMessage() for r in caplog.records]
    for text in texts:
        assert secret not in text


async def test_subscriber_snapshot_then_live(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = two_clusters
    path = _kubeconfig(tmp_path, {"a": a, "b": b})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("a", "pods")
            await registry.watch("b", "pods")
        async with registry.subscribe("pods") as changes:
            b.delete("pods", "kube-system", "b-0")
            got = []
            with anyio.fail_after(TIMEOUT):
                while len(got) < 7:
                    got.append(await changes.__anext__())
        snap = [c for c in got if c.snapshot]
        assert {(c.context, c.name) for c in snap} == {
            ("a", "a-0"),
            ("a", "a-1"),
            ("a", "a-2"),
            ("b", "b-0"),
            ("b", "b-1"),
            ("b", "b-2"),
        }
        assert (got[6].context, got[6].type, got[6].name) == ("b", "DELETED", "b-0")


async def test_static_mapping_and_registry_close_cleans_up(
    two_clusters: tuple[FakeCluster, FakeCluster],
) -> None:
    a, b = two_clusters
    from kubemux.testing import kubeconfig_dict

    cfg = kubeconfig_dict({"a": a, "b": b})
    contexts = {n: kubemux.ContextConfig.from_dict(n, cfg) for n in ("a", "b")}
    registry = WatcherRegistry(contexts)
    async with registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("a", "pods")
            await registry.watch("b", "pods")
        assert "running" in repr(registry)
    assert a.open_watches == 0 and b.open_watches == 0
    with pytest.raises(RuntimeError):
        async with registry:
            pass


async def test_every_task_belongs_to_a_live_entry(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = two_clusters
    path = _kubeconfig(tmp_path, {"a": a, "b": b})

    def owners() -> set[str]:
        import asyncio

        names = [t.get_name() for t in asyncio.all_tasks() if not t.done()]
        return {n.split("'")[1] for n in names if n.startswith("kubemux ") and "'" in n}

    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("a", "pods")
            await registry.watch("b", "pods")
            await registry.watch("b", "pods", "kube-system")
        assert owners() == {"a", "b"} == set(registry.live_contexts)
        await registry.stop_watcher("a")
        assert owners() == {"b"} == set(registry.live_contexts)


async def test_snapshot_during_a_sliced_initial_list_has_no_gap_or_duplicate(
    tmp_path: Path,
) -> None:
    from kubemux import WatchSettings

    async with FakeCluster() as c:
        c.create_many("pods", [make_pod(f"p-{i:04d}", size=300) for i in range(3000)])
        path = _kubeconfig(tmp_path, {"c": c})
        settings = WatchSettings(relist_slice=50, page_size=0, streaming_list=False)
        registry = WatcherRegistry.from_kubeconfig(str(path), settings=settings)
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(registry)
            early = await stack.enter_async_context(
                registry.subscribe("pods", ["c"], snapshot=False)
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(registry.watch, "c", "pods")
                with anyio.fail_after(TIMEOUT):
                    while registry.store("c", "pods") is None:
                        await anyio.lowlevel.checkpoint()
                store = registry.store("c", "pods")
                assert store is not None  # mid-announcement: not every object announced yet
                assert len(store.writer.announced_entries()) < len(store) == 3000
                late = await stack.enter_async_context(
                    registry.subscribe("pods", ["c"], buffer_size=5000)
                )
            got: list[str] = []
            with anyio.fail_after(TIMEOUT):
                while len(got) < 3000:
                    got.append((await late.__anext__()).name)
            assert late.pending == 0
            assert len(got) == len(set(got)) == 3000  # no gap, no duplicate
            # the early subscriber (buffer 1000, never read) was closed, not waited for
            received: list[kubemux.Change] = []

            async def drain() -> None:
                async for change in early:
                    received.append(change)

            with pytest.raises(kubemux.SubscriberOverflow):
                await drain()
            assert len(received) == 1000


async def test_watch_in_flight_during_a_reload_returns_the_new_generation(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = two_clusters
    path = _kubeconfig(tmp_path, {"a": a})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        a.stall()  # the first LIST hangs: watch() is in flight
        result: list[kubemux.Store] = []

        async def watcher() -> None:
            result.append(await registry.watch("a", "pods"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher)
            with anyio.fail_after(TIMEOUT):
                await a.wait_for(lambda: len(a.requests) >= 1)
            gen = registry.status().contexts["a"].generation
            a.tokens.add("tok-2")
            await rewrite_kubeconfig(
                registry, path, {"a": FakeContext(cluster=a, token="tok-2")}, present=()
            )
            a.unstall()
        assert result and len(result[0]) == 3
        assert registry.status().contexts["a"].generation != gen
        assert a.requests_for("tok-2")


async def test_status_version_moves_with_states_not_with_objects(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = two_clusters
    path = _kubeconfig(tmp_path, {"a": a, "down": FakeContext(cluster="http://127.0.0.1:1")})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            before = registry.status_version
            async with anyio.create_task_group() as tg:
                tg.start_soon(registry.watch, "a", "pods")
                assert await registry.wait_status_change(before) > before  # starting
            assert registry.status().contexts["a"].state == "running"

            quiet = registry.status_version
            async with registry.subscribe("pods", ["a"], snapshot=False) as changes:
                a.create("pods", make_pod("one-more"))
                await changes.__anext__()
            assert registry.status_version == quiet  # an object is not a state change

            with pytest.raises(ClusterUnreachable):
                await registry.watch("down", "pods")
            assert registry.status_version > quiet
            assert registry.status().contexts["down"].state == "backing off"

            before = registry.status_version
            async with anyio.create_task_group() as tg:
                tg.start_soon(registry.stop_watcher, "a")
                await registry.wait_status_change(before)
            assert registry.status().contexts["a"].state == "idle"


async def test_autowatch_in_the_table_view(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    """autowatch_view="table": every context keeps the server's table of the resource (and
    no full-object watch of it) from the start."""
    a, b = two_clusters
    a.create("pods", make_pod("web-1"))
    path = _kubeconfig(tmp_path, {"a": a, "b": b})
    with pytest.raises(ValueError, match="autowatch_view"):
        WatcherRegistry.from_kubeconfig(str(path), autowatch=["pods"], autowatch_view="rows")
    registry = WatcherRegistry.from_kubeconfig(
        str(path), autowatch=["pods"], autowatch_view="table"
    )
    async with registry:
        with anyio.fail_after(TIMEOUT):
            await a.wait_for(lambda: registry.store("a", "pods", view="table") is not None)
            await b.wait_for(lambda: registry.store("b", "pods", view="table") is not None)
        table = registry.store("a", "pods", view="table")
        assert table is not None and "web-1" in [r.name for r in table.rows()]
        assert registry.store("a", "pods") is None  # no full-object informer
        # synced is after the LIST; the watch opens a moment later: then exactly one
        await a.wait_for(lambda: a.open_watches >= 1, timeout=TIMEOUT)
        assert a.open_watches == 1


async def test_a_shared_watch_outlives_a_token_rotation_too(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster], redis_server: Any
) -> None:
    """Through a share engine (Redis): the handed-over store is filled by the engine's slot
    (leading it: a LIST into a synced store is a relist), still with no RESET."""
    pytest.importorskip("redis")
    from kubemux.share import Redis

    a, _ = two_clusters
    path = _kubeconfig(tmp_path, {"a": a})
    share = Redis(redis_server.url, prefix="h", lease_ttl=1.5, acquire_period=0.25)
    async with WatcherRegistry.from_kubeconfig(str(path), share=share) as registry:
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("a", "pods")
        a.tokens.add("tok-new")
        async with registry.subscribe("pods", ["a"], snapshot=False) as changes:
            await rewrite_kubeconfig(
                registry, path, {"a": FakeContext(cluster=a, token="tok-new")}, present=()
            )
            with anyio.fail_after(TIMEOUT):
                await a.wait_for(lambda: a.open_watches_for("tok-new") == 1)
                a.create("pods", make_pod("a-new"))
                first = await changes.__anext__()
        assert (first.type, first.name) == ("ADDED", "a-new")
        assert registry.store("a", "pods") is store and "a-new" in _names(store)


async def test_a_first_sync_that_fails_sends_subscribers_no_reset(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    """A store dropped before it was ever listed held nothing anyone saw: no RESET."""
    a, _ = two_clusters
    path = _kubeconfig(tmp_path, {"a": a})
    async with (
        WatcherRegistry.from_kubeconfig(str(path)) as registry,
        registry.subscribe("pods", ["a"], snapshot=False) as changes,
    ):
        a.fail_next(1, 403, reason="Forbidden", path_prefix="/api/v1/namespaces/default/pods")
        with anyio.fail_after(TIMEOUT), pytest.raises(kubemux.Forbidden):
            await registry.watch("a", "pods", namespace="default")
        with anyio.fail_after(TIMEOUT):
            await registry.stop_watcher("a")  # forgets the failure: no backoff to wait out
            await registry.watch("a", "pods", namespace="default")
            seen = [await changes.__anext__() for _ in range(3)]
        assert [c.type for c in seen] == ["ADDED"] * 3
