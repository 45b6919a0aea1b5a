"""Generations (key -> its one live generation) and Starter driven directly through a
FakeConnector: DESIGN.md's invariants 1-5, without HTTP.

1. one live entry per key; every task started belongs to a live entry;
2. stop: returns once tasks, session and stores are gone; unknown key False; concurrent
   calls coalesce; cleanup bounded in time;
3. compare-and-delete: a generation ending deletes only its own entry;
4. a start racing a stop returns a live generation's store or raises ContextRemoved;
5. reload: the same informers on a new generation; the same cluster's take its stores over
   (no RESET), another cluster's start with a RESET; no churn when unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from kubemux import ContextRemoved, KubeconfigSource, RegistryClosed, Store, WatcherRegistry
from kubemux._registry.changes import ResourceNames
from kubemux._registry.context import ContextGeneration
from kubemux._registry.generations import Generations
from kubemux._registry.slots import Starter
from kubemux.testing import FakeConnector, FakeContext, Gate, make_pod, write_kubeconfig
from lifecycle_support import PODS, PODS_KEY, Recorder, generations
from support import TIMEOUT, wait_until


def _tasks(prefix: str) -> list[str]:
    return [n for t in asyncio.all_tasks() if (n := t.get_name()).startswith(prefix)]


def _starter(gens: Generations) -> Starter:
    return Starter(
        gens,
        stop_timeout=5.0,
        names=ResourceNames(),
        status_changed=lambda: None,
    )


async def _watch(starter: Starter, context: str = "a") -> Store:
    return await starter.synced_store(context, "pods", None, None, None, "objects")


@contextlib.asynccontextmanager
async def _opened_at_exit(gate: Gate) -> AsyncIterator[None]:
    try:
        yield
    finally:
        gate.open()


async def _current(gens: Generations, name: str = "a") -> ContextGeneration:
    async with gens.lock(name):
        return await gens.current(name, gens.stops.get(name))


# ---------------------------------------------------------------------------- invariant 1
async def test_concurrent_starts_of_one_key_make_one_generation() -> None:
    fake = FakeConnector()
    rec = Recorder()
    gens = generations(fake, rec, ["a", "b"], autowatch=[(PODS_KEY, PODS)])
    seen: list[ContextGeneration] = []
    async with gens.open():

        async def start(name: str) -> None:
            seen.append(await _current(gens, name))

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(start, "ab"[i % 2])
        assert {g.key: g for g in seen} == gens.gens and len({id(g) for g in seen}) == 2
        async with gens.lock("a"):
            gens.autostart("a", [])  # the live generation gets the slot: no second one
        assert gens.gens["a"] is seen[0] and PODS_KEY in gens.gens["a"].slots
        await fake.wait_for(lambda: fake.open_connections() == 2)
        # every task started belongs to a live entry
        assert sorted(_tasks("kubemux context")) == ["kubemux context 'a'", "kubemux context 'b'"]
        assert len(_tasks("kubemux informer")) == sum(len(g.slots) for g in gens.gens.values())
        assert [g.number for g in gens.gens.values()] == [1, 2]
    assert gens.gens == {} and fake.open_connections() == 0
    assert _tasks("kubemux") == []
    assert gens.state == "closed"


async def test_nothing_starts_before_open_or_while_closing() -> None:
    fake = FakeConnector()
    gens = generations(fake, Recorder())
    with pytest.raises(RegistryClosed):
        await _current(gens)
    async with gens.open():
        with pytest.raises(RuntimeError, match="opened once"):
            async with gens.open():
                pass
        await _current(gens)
    with pytest.raises(RegistryClosed):
        await _current(gens)
    assert fake.connects == ["a"]


# ---------------------------------------------------------------------------- invariant 2
async def test_stop_returns_after_everything_is_gone_and_concurrent_stops_coalesce() -> None:
    fake = FakeConnector()
    fake.create("a", "pods", make_pod("web-1"))
    rec = Recorder()
    gens = generations(fake, rec)
    async with gens.open():
        gen = await _current(gens)
        slot = gen.ensure_slot(PODS_KEY, PODS, persistent=False)
        with anyio.fail_after(TIMEOUT):
            await slot.ready.wait()
        assert await gens.stop_watcher("nope") is False  # unknown: a no-op
        gate = fake.hold_disconnect("a")  # the first stop waits in cleanup until opened
        results: list[bool] = []

        async def stop() -> None:
            results.append(await gens.stop_watcher("a"))

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(stop)
                await gate.wait_reached()
                assert results == []  # nobody returned before the cleanup ended
                gate.open()
        assert results == [True] * 5  # one stop, shared
        assert gen.is_done and fake.open_connections() == 0 and fake.running() == 0
        assert len(slot.store) == 0 and not slot.store.has_synced
        assert _tasks("kubemux context") == [] and _tasks("kubemux informer") == []
        assert rec.finals == [("a", 1, "pods", "REMOVED")]
        assert gens.gens == {} and await gens.stop_watcher("a") is False
    assert fake.connects == ["a"]


async def test_a_cancelled_stop_caller_does_not_leave_a_half_stopped_context() -> None:
    fake = FakeConnector()
    gens = generations(fake, Recorder())
    async with gens.open():
        gen = await _current(gens)
        with anyio.fail_after(TIMEOUT):
            await gen.connection()
        gate = fake.hold_disconnect("a")
        scope = anyio.CancelScope()

        async def caller() -> None:
            with scope:
                await gens.stop_watcher("a")

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(caller)
                await gate.wait_reached()
                scope.cancel()  # the caller goes away mid-stop
                await anyio.lowlevel.checkpoint()
                assert not gen.is_done and gen.is_stopping  # the stop goes on, shielded
                gate.open()
                await gen.wait_done()
        assert gens.gens == {} and fake.open_connections() == 0


async def test_a_cleanup_that_hangs_is_bounded_and_closing_still_waits_for_it() -> None:
    fake = FakeConnector()
    rec = Recorder()
    gens = generations(fake, rec, stop_timeout=0.2)
    gate = fake.hold_disconnect("a")
    async with gens.open(), _opened_at_exit(gate):  # a failed assertion must not hang
        gen = await _current(gens)
        with anyio.fail_after(TIMEOUT):
            await gen.connection()
            assert await gens.stop_watcher("a") is True  # returned after stop_timeout
        assert not gen.is_done and gens.gens == {} and gens.stragglers == {gen}
        assert gens.sizes()["entries"] == 1  # still tracked
        gate.open()
        with anyio.fail_after(TIMEOUT):
            await gen.wait_done()
        assert gens.stragglers == set() and gens.sizes()["entries"] == 0
    # closing: a generation whose cleanup overruns stop_timeout is still waited for
    gens = generations(fake, rec, stop_timeout=0.2)
    gate = fake.hold_disconnect("a")
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:

            async def release() -> None:
                await gate.wait_reached()
                gate.open()

            tg.start_soon(release)
            async with gens.open():
                last = await _current(gens)
                await last.connection()
            assert last.is_done and fake.open_connections() == 0


# ---------------------------------------------------------------------------- invariant 3
async def test_a_generation_ending_late_never_deletes_its_successor() -> None:
    fake = FakeConnector()
    rec = Recorder()
    gens = generations(fake, rec, stop_timeout=0.2)
    gate = fake.hold_disconnect("a")
    async with gens.open(), _opened_at_exit(gate):  # a failed assertion must not hang
        old = await _current(gens)
        with anyio.fail_after(TIMEOUT):
            await old.connection()
        assert old.stop_if_unused()  # stopping on its own: nothing to watch
        with anyio.fail_after(TIMEOUT):
            new = await _current(gens)  # waits stop_timeout for the old one, then replaces it
        assert new is not old and new.number == 2 and gens.gens["a"] is new
        assert gens.stragglers == {old}  # the old one stays tracked while it ends
        assert gens.sizes()["entries"] == 2
        gate.open()
        with anyio.fail_after(TIMEOUT):
            await old.wait_done()
            await new.connection()
        assert gens.gens["a"] is new and new.is_running  # compare-and-delete
        assert gens.stragglers == set()


# ---------------------------------------------------------------------------- invariant 4
@pytest.mark.parametrize("stop_at", ["connect", "first sync"])
async def test_a_start_racing_a_stop_raises_context_removed(stop_at: str) -> None:
    fake = FakeConnector()
    gate = fake.hold_connect("a") if stop_at == "connect" else fake.hold_sync("a", "pods")
    gens = generations(fake, Recorder())
    starter = _starter(gens)
    async with gens.open():
        outcome: list[object] = []

        async def watch() -> None:
            try:
                outcome.append(await _watch(starter))
            except ContextRemoved as exc:
                outcome.append(exc)

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                await gate.wait_reached()
                assert await gens.stop_watcher("a") is True
        (result,) = outcome
        assert isinstance(result, ContextRemoved), result
        assert gens.gens == {} and fake.open_connections() == 0
        # a later call starts the context again (the stop was not a removal)
        gate.open()
        with anyio.fail_after(TIMEOUT):
            store = await _watch(starter)
        assert store is gens.gens["a"].slots[PODS_KEY].store


async def test_a_start_racing_a_reload_returns_the_new_generations_store() -> None:
    fake = FakeConnector()
    fake.create("a", "pods", make_pod("web-1"))
    gate = fake.hold_sync("a", "pods")
    rec = Recorder()
    gens = generations(fake, rec)
    starter = _starter(gens)
    async with gens.open():
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                stores: list[Store] = []

                async def watch() -> None:
                    stores.append(await _watch(starter))

                tg.start_soon(watch)
                await gate.wait_reached()
                await gens.reload("a")  # stops #1, starts #2 with the same slot
                await gate.wait_reached(2)  # #2's first sync
                gate.open()
        gen = gens.gens["a"]
        assert gen.number == 2 and stores == [gen.slots[PODS_KEY].store]
        assert stores[0].get("default", "web-1") is not None
        assert rec.finals == []  # #1 never synced: nothing to forget, nothing handed over


async def test_a_storm_of_starts_stops_and_reloads_only_returns_live_stores() -> None:
    fake = FakeConnector()
    fake.create("a", "pods", make_pod("web-1"))
    gens = generations(fake, Recorder())
    starter = _starter(gens)
    rng = random.Random(7)
    live = removed = watches = 0
    async with gens.open():

        async def watch() -> None:
            nonlocal live, removed, watches
            watches += 1
            for _ in range(rng.randrange(3)):
                await anyio.lowlevel.checkpoint()
            try:
                store = await _watch(starter)
            except ContextRemoved:
                removed += 1
                return
            gen = gens.gens.get("a")  # no checkpoint since the return: this is its state
            assert gen is not None and gen.is_running and gen.slots[PODS_KEY].store is store
            live += 1

        async def stop() -> None:
            for _ in range(rng.randrange(3)):
                await anyio.lowlevel.checkpoint()
            await gens.stop_watcher("a")

        async def reload() -> None:
            for _ in range(rng.randrange(3)):
                await anyio.lowlevel.checkpoint()
            await gens.reload("a")

        with anyio.fail_after(2 * TIMEOUT):
            for _ in range(30):
                async with anyio.create_task_group() as tg:
                    for op in rng.choices([watch, watch, stop, reload], k=6):
                        tg.start_soon(op)
        assert live and removed and live + removed == watches  # each got one or the other
        await gens.stop_watcher("a")
        assert fake.open_connections() == 0 and _tasks("kubemux informer") == []


# ---------------------------------------------------------------------------- invariant 5
async def test_reload_restarts_the_same_informers_after_a_reset() -> None:
    fake = FakeConnector()
    fake.create("a", "pods", make_pod("web-1"))
    rec = Recorder()
    gens = generations(fake, rec)
    async with gens.open():
        gen = await _current(gens)
        slot = gen.ensure_slot(PODS_KEY, PODS, persistent=False)
        with anyio.fail_after(TIMEOUT):
            await slot.ready.wait()
        await gens.reload("a")  # the same cluster (issue 29): the store is handed over
        new = gens.gens["a"]
        assert gen.is_done and new.number == 2 and list(new.slots) == [PODS_KEY]
        assert new.slots[PODS_KEY].persistent  # a reload's informers retry
        assert new.slots[PODS_KEY].store is slot.store and slot.store.has_synced
        with anyio.fail_after(TIMEOUT):
            await fake.wait_for(lambda: fake.running("a", "pods") == 1)
        fake.create("a", "pods", make_pod("web-2"))
        await wait_until(lambda: len(rec.changes) == 2, registry=rec.signal)
        assert rec.finals == []  # no RESET: subscribers keep what they hold
        assert rec.changes == [
            ("a", 1, "pods", "ADDED", "web-1"),
            ("a", 2, "pods", "ADDED", "web-2"),
        ]
        await gens.reload("nope")  # nothing runs for it: nothing happens
        assert fake.connects == ["a", "a"]


async def test_stop_watcher_after_a_handover_drops_the_handed_over_caches() -> None:
    """One owner at a time: the stores moved to #2, and stopping #2 clears them."""
    fake = FakeConnector()
    fake.create("a", "pods", make_pod("web-1"))
    rec = Recorder()
    gens = generations(fake, rec)
    async with gens.open():
        gen = await _current(gens)
        slot = gen.ensure_slot(PODS_KEY, PODS, persistent=False)
        with anyio.fail_after(TIMEOUT):
            await slot.ready.wait()
        await gens.reload("a")
        assert gens.gens["a"].slots[PODS_KEY].store is slot.store and not gen.kept
        assert await gens.stop_watcher("a")
        assert not await gens.stop_watcher("a")  # idempotent
        assert not slot.store.has_synced and len(slot.store) == 0
        assert rec.finals == [("a", 2, "pods", "REMOVED")]
        await fake.wait_for(lambda: fake.open_connections() == 0)
        assert _tasks("kubemux informer") == []


async def test_a_handed_over_store_nobody_takes_is_cleared() -> None:
    """A live generation whose slot has a store of its own does not take the handed-over
    one, which is cleared (its watches end) rather than left unfed."""
    from kubemux._registry.handover import Kept

    fake = FakeConnector()
    rec = Recorder()
    gens = generations(fake, rec)
    async with gens.open():
        gen = await _current(gens)
        slot = gen.ensure_slot(PODS_KEY, PODS, persistent=False)
        with anyio.fail_after(TIMEOUT):
            await slot.ready.wait()
        orphan = Store(PODS)
        orphan.writer.replace([], "7")
        async with gens.lock("a"):
            gens.autostart("a", [(PODS_KEY, PODS)], Kept({PODS_KEY: orphan}, {}, {}))
        assert gens.gens["a"] is gen and gen.slots[PODS_KEY] is slot
        assert not orphan.has_synced


async def test_through_the_registry_a_new_fingerprint_reloads_and_an_unchanged_one_does_not(
    tmp_path: Path,
) -> None:
    fake = FakeConnector()
    fake.create("a", "pods", make_pod("web-1"))
    path = tmp_path / "config"
    write_kubeconfig(path, {"a": FakeContext(cluster="https://a.fake.invalid", token="t1")})
    source = KubeconfigSource(str(path), follow=False)
    async with WatcherRegistry(source, connector=fake) as registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("a", "pods")
        async with registry.subscribe("pods", snapshot=False) as changes:
            write_kubeconfig(path, {"a": FakeContext(cluster="https://a.fake.invalid", token="t1")})
            await registry.sync_kubeconfig()  # the same fingerprint: no churn
            assert fake.connects == ["a"] and registry._generations.gens["a"].number == 1
            store = registry.store("a", "pods")
            # a new token, the same cluster: the caches go on, nothing is reset (issue 29)
            write_kubeconfig(path, {"a": FakeContext(cluster="https://a.fake.invalid", token="t2")})
            await registry.sync_kubeconfig()
            fake.create("a", "pods", make_pod("web-2"))
            seen = []
            with anyio.fail_after(TIMEOUT):
                async for c in changes:
                    seen.append((c.type, c.name, c.generation))
                    if len(seen) == 1:
                        # another server: what watched the old cluster ends
                        write_kubeconfig(
                            path, {"a": FakeContext(cluster="https://b.fake.invalid", token="t2")}
                        )
                        await registry.sync_kubeconfig()
                    if len(seen) == 4:
                        break
        assert seen == [
            ("ADDED", "web-2", 2),
            ("RESET", "", 2),
            ("ADDED", "web-1", 3),
            ("ADDED", "web-2", 3),
        ]
        assert fake.connects == ["a", "a", "a"]
        assert store is not None and registry.store("a", "pods") is not store
