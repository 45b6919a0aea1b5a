"""ContextGeneration driven directly, through a FakeConnector: no registry, no HTTP.

A generation owns its cancel scope, connection, task group and slots, contains every
failure, and talks upward only through its hooks (recorded here).
"""

from __future__ import annotations

import anyio
import pytest

from kubemux import (
    ApiError,
    ClusterUnreachable,
    ContextRemoved,
    ContextState,
    Forbidden,
    InternalError,
    StartTimeout,
    Unauthorized,
)
from kubemux._informer.informer import InformerKey
from kubemux._resources import parse_resource
from kubemux.testing import FakeConnector, make_pod
from lifecycle_support import PODS, PODS_KEY, Recorder, generation
from support import TIMEOUT, wait_until

SERVICES = parse_resource("services")
SERVICES_KEY = InformerKey("services")


def _tasks(prefix: str) -> list[str]:
    import asyncio

    return [n for t in asyncio.all_tasks() if (n := t.get_name()).startswith(prefix)]


async def test_it_connects_runs_its_slots_and_cleans_up_everything_when_stopped() -> None:
    fake = FakeConnector()
    fake.create("a", "pods", make_pod("web-1"))
    rec = Recorder()
    gen = generation(fake, rec)
    slot = gen.ensure_slot(PODS_KEY, PODS, persistent=False)  # queued before it connects
    async with anyio.create_task_group() as tg:
        tg.start_soon(gen.run)
        with anyio.fail_after(TIMEOUT):
            await slot.ready.wait()
        assert slot.failure is None and gen.is_running and gen.state is ContextState.RUNNING
        assert slot.store.has_synced and slot.store.get("default", "web-1") is not None
        assert rec.changes == [("a", 1, "pods", "ADDED", "web-1")]
        fake.create("a", "pods", make_pod("web-2"))  # a change reaches the hook at once
        assert rec.changes[-1] == ("a", 1, "pods", "ADDED", "web-2")
        assert fake.open_connections("a") == 1 and fake.running("a", "pods") == 1
        assert len(_tasks("kubemux informer")) == 1
        gen.request_stop("stopped by the test", "REMOVED")
        assert gen.is_stopping and not gen.is_running
        with anyio.fail_after(TIMEOUT):
            await gen.wait_done()
        assert _tasks("kubemux informer") == []
    assert fake.open_connections() == 0 and fake.running() == 0
    assert len(slot.store) == 0 and not slot.store.has_synced  # stores dropped
    assert gen.slots == {} and rec.finals == [("a", 1, "pods", "REMOVED")]
    assert rec.done == [gen] and rec.start_failures == [(1, None)]
    with pytest.raises(ContextRemoved, match="stopped by the test"):
        gen.ensure_slot(PODS_KEY, PODS, persistent=False)  # nothing starts on it again
    with pytest.raises(ContextRemoved):
        await gen.connection()
    gen.request_stop("again", "RESET")  # idempotent: the first reason stays
    assert gen.stop_reason == "stopped by the test" and gen.final_change == "REMOVED"


async def test_a_stop_requested_before_it_runs_cancels_it_on_entry() -> None:
    fake = FakeConnector()
    rec = Recorder()
    gen = generation(fake, rec)
    slot = gen.ensure_slot(PODS_KEY, PODS, persistent=False)
    gen.request_stop("removed from the kubeconfig", "REMOVED")
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.run)
            await gen.wait_done()
    assert fake.connects == []  # never connected
    assert slot.ready.is_set() and slot.failure is not None
    assert isinstance(slot.failure.error, ContextRemoved)
    assert rec.finals == []  # it never had anything to say goodbye to
    assert rec.done == [gen]


async def test_a_lazy_generation_whose_connect_fails_ends_and_hands_the_error_to_its_slots() -> (
    None
):
    fake = FakeConnector()
    fake.fail_connect("a", ClusterUnreachable("https://a.fake.invalid", "connection refused"))
    rec = Recorder()
    gen = generation(fake, rec)
    slot = gen.ensure_slot(PODS_KEY, PODS, persistent=False)
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.run)
            await gen.wait_done()
    assert slot.failure is not None and isinstance(slot.failure.error, ClusterUnreachable)
    assert gen.failure is slot.failure and gen.failure.pending  # kept for the backoff
    ((number, failure),) = rec.start_failures
    assert number == 1 and failure is gen.failure
    assert fake.open_connections() == 0 and fake.connects == ["a"]


async def test_a_persistent_generation_backs_off_and_retries_in_place() -> None:
    fake = FakeConnector()
    fake.fail_connect("a", Unauthorized(401, "Unauthorized", "token expired"), times=2)
    rec = Recorder()
    gen = generation(fake, rec, persistent=True)
    slot = gen.ensure_slot(PODS_KEY, PODS, persistent=True)
    states: list[ContextState] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(gen.run)

        def running() -> bool:
            states.append(gen.state)
            return gen.is_running and slot.store.has_synced

        await wait_until(running, registry=rec.signal)
        assert fake.connects == ["a", "a", "a"]
        assert ContextState.BACKING_OFF in states
        assert [f is None for _, f in rec.start_failures] == [False, False, True]
        assert gen.failure is None and slot.failure is None  # the failed start is over
        gen.request_stop("done", None)
    assert fake.open_connections() == 0


async def test_a_start_that_takes_too_long_fails_with_start_timeout() -> None:
    fake = FakeConnector()
    gate = fake.hold_connect("a")  # never opened: an exec plugin that hangs
    rec = Recorder()
    gen = generation(fake, rec, start_timeout=0.2)
    slot = gen.ensure_slot(PODS_KEY, PODS, persistent=False)
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.run)
            await gen.wait_done()
    assert slot.failure is not None and isinstance(slot.failure.error, StartTimeout)
    assert gate.reached == 1 and gate.waiting == 0  # the held connect was cancelled
    assert fake.open_connections() == 0


async def test_a_lazy_slot_whose_first_sync_fails_is_dropped_and_the_idle_generation_ends() -> None:
    fake = FakeConnector()
    fake.fail_sync("a", "pods", Unauthorized(401, "Unauthorized", "token expired"))
    rec = Recorder()
    gen = generation(fake, rec)
    slot = gen.ensure_slot(PODS_KEY, PODS, persistent=False)
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.run)
            await slot.ready.wait()
            assert slot.failure is not None and isinstance(slot.failure.error, Unauthorized)
            await gen.wait_done()  # nothing left to run: no idle session stays open
    assert gen.stop_reason == "idle after a failed start" and gen.slots == {}
    ((number, key, failure),) = rec.slot_failures
    assert (number, key) == (1, PODS_KEY) and failure is slot.failure
    assert rec.finals == []  # final_change None: not a removal
    assert fake.open_connections() == 0


async def test_a_persistent_slot_retries_its_first_sync_while_its_sibling_runs() -> None:
    fake = FakeConnector()
    fake.create("a", "services", {"metadata": {"name": "svc"}})
    fake.fail_sync("a", "pods", ApiError(503, "ServiceUnavailable", "try later"), times=2)
    rec = Recorder()
    gen = generation(fake, rec, persistent=True)
    pods = gen.ensure_slot(PODS_KEY, PODS, persistent=True)
    services = gen.ensure_slot(SERVICES_KEY, SERVICES, persistent=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(gen.run)
        await wait_until(lambda: services.store.has_synced, registry=rec.signal)
        await wait_until(lambda: len(rec.slot_failures) == 4, registry=rec.signal)
        assert pods.store.has_synced
        assert [(k, f is None) for _, k, f in rec.slot_failures if k == PODS_KEY] == [
            (PODS_KEY, False),
            (PODS_KEY, False),
            (PODS_KEY, True),
        ]
        assert fake.connects == ["a"]  # the context itself never restarted
        assert services.store.get("default", "svc") is not None
        gen.request_stop("done", None)


async def test_an_informer_that_crashes_after_its_sync_is_contained_and_restarted() -> None:
    fake = FakeConnector()
    fake.create("a", "pods", make_pod("web-1"))
    rec = Recorder()
    gen = generation(fake, rec)
    slot = gen.ensure_slot(PODS_KEY, PODS, persistent=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(gen.run)
        with anyio.fail_after(TIMEOUT):
            await slot.ready.wait()
        assert fake.crash("a", "pods", RuntimeError("a bug below the registry")) == 1
        await wait_until(lambda: slot.failure is not None, registry=rec.signal)
        assert slot.failure is not None and isinstance(slot.failure.error, InternalError)
        assert "a bug below the registry" in str(slot.failure.error)
        assert gen.is_running  # contained: the generation goes on
        with anyio.fail_after(TIMEOUT):
            await fake.wait_for(lambda: fake.running("a", "pods") == 1)  # restarted
        await wait_until(lambda: slot.failure is None, registry=rec.signal)
        assert fake.connects == ["a"]
        gen.request_stop("done", None)


async def test_a_stop_during_a_first_sync_ends_it_and_wakes_its_waiters() -> None:
    fake = FakeConnector()
    gate = fake.hold_sync("a", "pods")
    rec = Recorder()
    gen = generation(fake, rec)
    slot = gen.ensure_slot(PODS_KEY, PODS, persistent=False)
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.run)
            await gate.wait_reached()
            gen.request_stop("stopped by stop_watcher()", "REMOVED")
            await slot.ready.wait()
            await gen.wait_done()
    assert slot.failure is not None and isinstance(slot.failure.error, ContextRemoved)
    assert gate.waiting == 0 and fake.open_connections() == 0 and fake.running() == 0
    assert rec.finals == [("a", 1, "pods", "REMOVED")]  # it had connected: subscribers hear


async def test_an_unused_lazy_generation_stops_itself_unless_a_caller_is_about_to_use_it() -> None:
    fake = FakeConnector()
    rec = Recorder()
    gen = generation(fake, rec)
    async with anyio.create_task_group() as tg:
        tg.start_soon(gen.run)
        with anyio.fail_after(TIMEOUT):
            await gen.connection()
        gen.pending += 1  # a caller resolving a name
        assert not gen.stop_if_unused() and gen.is_running
        gen.pending -= 1
        assert gen.stop_if_unused() and gen.stop_reason == "idle: nothing to watch"
        with anyio.fail_after(TIMEOUT):
            await gen.wait_done()
    persistent = generation(fake, rec, number=2, persistent=True)
    assert not persistent.stop_if_unused()  # autowatched contexts are not idle
    assert fake.open_connections() == 0


@pytest.mark.parametrize("persistent", [False, True])
async def test_a_forbidden_cluster_wide_sync_is_narrowed_to_the_namespaces_not_failed(
    persistent: bool,
) -> None:
    fake = FakeConnector()
    fake.create("a", "pods", make_pod("web-1", "team-a"))
    fake.create("a", "pods", make_pod("db-1", "team-b"))
    forbidden = Forbidden(403, "Forbidden", 'pods is forbidden: User "jane" cannot list ...')
    fake.fail_sync("a", "pods", forbidden)
    rec = Recorder()
    gen = generation(fake, rec, persistent=persistent, namespace="team-a")
    slot = gen.ensure_slot(PODS_KEY, PODS, persistent=persistent)
    team_a = InformerKey("pods", namespace="team-a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(gen.run)
        with anyio.fail_after(TIMEOUT):
            await slot.ready.wait()
        assert slot.failure is not None and isinstance(slot.failure.error, Forbidden)
        assert list(gen.slots) == [team_a] and gen.slots[team_a].persistent is persistent
        await wait_until(lambda: gen.slots[team_a].store.has_synced, registry=rec.signal)
        assert [o["metadata"]["name"] for o in gen.slots[team_a].store.list()] == ["web-1"]
        assert gen.narrowed[PODS_KEY].scope == ("team-a",)
        assert "watching team-a (the context's namespace)" in gen.notes["pods"]
        assert all(f is None for _, _, f in rec.slot_failures)  # a note, never a failure
        assert gen.is_running
        gen.request_stop("done", None)
