"""The contexts panel the dashboard's streams send: whole once, then only what changed.

A fleet where nothing changes sends nothing (an informer's bookmark moves its
resourceVersion and last-event time, which the page does not show); a change of one
context sends that context's item only.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from kubemux import Backoff, WatcherRegistry, WatchSettings
from kubemux.dashboard._panel import PanelDiff, build_panel
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from support import wait_until

FAST = WatchSettings(backoff=Backoff(initial_delay=0.02, max_delay=0.1))


def last_events(registry: WatcherRegistry) -> dict[str, float | None]:
    return {
        name: next(i.last_event for i in ctx.informers)
        for name, ctx in registry.status().contexts.items()
    }


async def test_idle_fleet_sends_nothing_and_a_change_sends_one_item(tmp_path: Path) -> None:
    async with FakeCluster(bookmark_period=0.05) as a, FakeCluster(bookmark_period=0.05) as b:
        a.create("pods", make_pod("web-1"))
        contexts = {f"a-{i}": a for i in range(3)} | {f"b-{i}": b for i in range(3)}
        path = write_kubeconfig(tmp_path / "config", contexts)
        async with WatcherRegistry.from_kubeconfig(
            str(path), autowatch=["pods"], settings=FAST
        ) as registry:
            await wait_until(
                lambda: all(
                    ctx.state == "running" and ctx.informers
                    for ctx in registry.status().contexts.values()
                ),
                registry=registry,
            )
            diff = PanelDiff()
            first = diff.next(build_panel(registry.status()))
            assert first is not None
            whole = orjson.loads(first)
            assert [c["name"] for c in whole["contexts"]] == list(contexts)
            a0 = whole["contexts"][0]
            assert a0["objects"] == {"pods": 1} and a0["state"] == "running" and a0["current"]
            assert a0["retry_at"] is None and a0["skipped"] is None
            assert "informers" not in a0  # what moves with every bookmark stays out

            # bookmarks arrive in every context: the status moves, the panel does not
            before = last_events(registry)
            await wait_until(
                lambda: all(
                    t is not None and t != before[n] for n, t in last_events(registry).items()
                ),
                poll=0.02,
            )
            assert diff.next(build_panel(registry.status())) is None

            # one pod more in cluster b: the three contexts on it change, the others do not
            b.create("pods", make_pod("db-1"))
            await wait_until(
                lambda: all(
                    ctx.informers[0].objects == 1
                    for name, ctx in registry.status().contexts.items()
                    if name.startswith("b-")
                ),
                poll=0.02,
            )
            delta = orjson.loads(diff.next(build_panel(registry.status())) or b"null")
            assert [c["name"] for c in delta["changed"]] == ["b-0", "b-1", "b-2"]
            assert delta["removed"] == [] and "order" not in delta
            assert delta["changed"][0]["objects"] == {"pods": 1}
            full = orjson.loads(diff.full() or b"null")
            assert [c["objects"] for c in full["contexts"]] == [{"pods": 1}] * 6


async def test_a_removed_context_is_named_and_the_order_sent(tmp_path: Path) -> None:
    async with FakeCluster() as a:
        path = write_kubeconfig(tmp_path / "config", {"one": a, "two": a})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as registry:
            diff = PanelDiff()
            assert diff.next(build_panel(registry.status())) is not None
            syncs = registry.kubeconfig_syncs
            write_kubeconfig(path, {"two": a, "three": a})
            await wait_until(lambda: registry.kubeconfig_syncs > syncs, registry=registry)
            delta = orjson.loads(diff.next(build_panel(registry.status())) or b"null")
            assert delta["removed"] == ["one"]
            assert delta["order"] == ["two", "three"]
            assert [c["name"] for c in delta["changed"]] == ["two", "three"]  # two: now current
            assert delta["kubeconfig_syncs"] == registry.kubeconfig_syncs
