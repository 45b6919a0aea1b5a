"""Fanout and Subscription on their own: filters, bounds, snapshots, lifecycle."""

from __future__ import annotations

import anyio
import pytest

from kubemux import Change, SubscriberOverflow
from kubemux._registry.fanout import Fanout
from kubemux._wire.codec import Entry
from support import TIMEOUT


def change(context: str = "c", resource: str = "pods", name: str = "p", ns: str = "d") -> Change:
    entry = Entry(ns, name, "1", b'{"metadata":{"name":"%s"}}' % name.encode())
    return Change.from_entry(context, resource, "ADDED", entry, 1)


async def test_filters_by_context_resource_and_namespace() -> None:
    fanout = Fanout()
    async with fanout.subscribe(
        resource="pods", contexts=["c"], namespace="d", buffer_size=10
    ) as sub:
        fanout.publish(change(context="other"), "d")
        fanout.publish(change(resource="services"), "d")
        fanout.publish(change(ns="e"), "e")
        fanout.publish(change(name="wanted"), "d")
        fanout.publish(Change("c", "pods", "RESET", None, 2), None)  # no namespace: for all
        with anyio.fail_after(TIMEOUT):
            assert (await sub.__anext__()).name == "wanted"
            assert (await sub.__anext__()).type == "RESET"
        assert sub.pending == 0
    assert len(fanout) == 0


async def test_a_slow_subscriber_is_closed_not_waited_for() -> None:
    fanout = Fanout()
    async with (
        fanout.subscribe(resource=None, contexts=None, namespace=None, buffer_size=3) as slow,
        fanout.subscribe(resource=None, contexts=None, namespace=None, buffer_size=100) as fast,
    ):
        for i in range(10):
            fanout.publish(change(name=f"p{i}"), "d")  # never blocks
        assert len(fanout) == 1 and fanout.overflows == 1
        got = [slow.receive_nowait().name for _ in range(3)]
        assert got == ["p0", "p1", "p2"]
        with anyio.fail_after(TIMEOUT), pytest.raises(SubscriberOverflow, match="resubscribe"):
            await slow.__anext__()
        assert fast.pending == 10


async def test_snapshot_comes_first_then_live_changes() -> None:
    fanout = Fanout()
    sub = fanout.subscribe(
        resource=None,
        contexts=None,
        namespace=None,
        buffer_size=10,
        snapshot=lambda: [change(name="old")],
    )
    assert len(fanout) == 0  # registered only when entered
    async with sub:
        fanout.publish(change(name="new"), "d")
        with anyio.fail_after(TIMEOUT):
            assert [(await sub.__anext__()).name for _ in range(2)] == ["old", "new"]
    with pytest.raises(RuntimeError, match="entered once"):
        await sub.__aenter__()


async def test_close_ends_iteration_and_close_all_ends_everyone() -> None:
    fanout = Fanout()
    async with fanout.subscribe(resource=None, contexts=None, namespace=None, buffer_size=5) as s:
        fanout.publish(change(), "d")
        fanout.close_all()
        with anyio.fail_after(TIMEOUT):
            assert [c.name async for c in s] == ["p"]  # drained, then ended
    assert len(fanout) == 0


def test_change_is_immutable_and_decodes_lazily() -> None:
    c = change(name="lazy")
    assert c._object is None
    assert c.object == {"metadata": {"name": "lazy"}}
    assert c.raw == b'{"metadata":{"name":"lazy"}}'
    with pytest.raises(AttributeError):
        c.name = "x"  # type: ignore[misc]
    assert c == change(name="lazy") and c != change(name="other")


async def test_named_contexts_are_those_subscriptions_name() -> None:
    fanout = Fanout()
    async with (
        fanout.subscribe(resource=None, contexts=["a", "b"], namespace=None, buffer_size=1),
        fanout.subscribe(resource=None, contexts=None, namespace=None, buffer_size=1),
    ):
        assert fanout.named_contexts() == {"a", "b"}
    assert fanout.named_contexts() == set()
