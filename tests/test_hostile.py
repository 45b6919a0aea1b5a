"""Hostile API servers (issue 11) and hostile objects (issue 9), over real HTTP.

Each server misbehaves in one way (``kubemux.testing._hostile``); the informer must end with
a clear KubemuxError or keep running with the bad part skipped and counted, never spin,
never cache what no reader can decode.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from kubemux import (
    Backoff,
    ContextConfig,
    InternalError,
    ProtocolError,
    ResponseTooLarge,
    ServerTimeout,
    Store,
    WatcherRegistry,
    WatchSettings,
    parse_resource,
)
from kubemux._http.client import open_client
from kubemux._informer.informer import WAITING, Informer, InformerKey
from kubemux.testing import FakeCluster, FakeContext, kubeconfig_dict, make_pod, write_kubeconfig
from kubemux.testing._hostile import BAD_OBJECT_LINES, HostileServer
from support import TIMEOUT, listen, wait_until

QUICK = WatchSettings(
    backoff=Backoff(initial_delay=0.05, max_delay=0.2),
    response_timeout=0.5,
    read_timeout=0.5,
    min_read_rate=1024,
    inactivity_timeout=5.0,
    skip_log_period=3600,
)

LISTS = dataclasses.replace(QUICK, streaming_list=False)  # FakeCluster: one watch at a time


def _registry(tmp_path: Path, server: str, settings: WatchSettings = QUICK, **kw: Any) -> Any:
    path = write_kubeconfig(tmp_path / "config", {"c": server})
    return WatcherRegistry.from_kubeconfig(str(path), settings=settings, **kw)


def _informer(reg: WatcherRegistry) -> Any:
    return reg.status().contexts["c"].informers[0]


async def test_a_repeated_continue_token_is_refused(tmp_path: Path) -> None:
    async with HostileServer("continue-loop") as srv, _registry(tmp_path, srv.server) as reg:
        with anyio.fail_after(TIMEOUT), pytest.raises(ProtocolError, match="same continue token"):
            await reg.watch("c", "pods")
        assert srv.lists() == 2  # the first page, then the repeat: refused at once


async def test_pages_per_list_are_capped(tmp_path: Path) -> None:
    settings = dataclasses.replace(QUICK, max_list_pages=1)
    async with (
        HostileServer("continue-loop") as srv,
        _registry(tmp_path, srv.server, settings) as reg,
    ):
        with anyio.fail_after(TIMEOUT), pytest.raises(ProtocolError, match="did not end after 1"):
            await reg.watch("c", "pods")


async def test_a_watch_that_ends_after_one_event_backs_off_and_is_rate_limited(
    tmp_path: Path,
) -> None:
    # no backoff at all, so only the health rule and the rate limiter stand in the way
    settings = dataclasses.replace(
        QUICK, backoff=Backoff(initial_delay=0.0, max_delay=0.0), qps=5.0, burst=10
    )
    async with (
        HostileServer("one-event-watch") as srv,
        _registry(tmp_path, srv.server, settings) as reg,
    ):
        with anyio.fail_after(TIMEOUT):
            await reg.watch("c", "pods")
        start = time.monotonic()
        await anyio.sleep(2.0)  # time passing is what is measured here
        elapsed = time.monotonic() - start
        recent = [t for t, _ in srv.requests if t >= start]
        assert len(recent) <= 10 + 5 * elapsed + 1  # burst + qps * t: no spinning
        st = _informer(reg)
        assert st.last_error is not None and "closed at once (1 events" in st.last_error


async def test_informers_of_one_context_share_its_rate_limit(tmp_path: Path) -> None:
    settings = dataclasses.replace(
        QUICK, backoff=Backoff(initial_delay=0.0, max_delay=0.0), qps=5.0, burst=10
    )
    async with (
        HostileServer("one-event-watch") as srv,
        _registry(tmp_path, srv.server, settings) as reg,
    ):
        with anyio.fail_after(TIMEOUT):
            await reg.watch("c", "pods")
            await reg.watch("c", "pods", "default")
            await reg.watch("c", "pods", "other")
        start = time.monotonic()
        await anyio.sleep(2.0)  # time passing is what is measured here
        recent = [t for t, _ in srv.requests if t >= start]
        assert len(recent) <= 10 + 5 * (time.monotonic() - start) + 1  # one bucket for all three


async def test_the_health_rule_alone_backs_off_a_watch_that_ends_after_one_event(
    tmp_path: Path,
) -> None:
    settings = dataclasses.replace(
        QUICK, backoff=Backoff(initial_delay=0.2, max_delay=0.4, jitter=False), qps=0
    )
    async with (
        HostileServer("one-event-watch") as srv,
        _registry(tmp_path, srv.server, settings) as reg,
    ):
        with anyio.fail_after(TIMEOUT):
            await reg.watch("c", "pods")
        before = srv.watches()
        await anyio.sleep(1.0)  # time passing is what is measured here
        assert srv.watches() - before <= 5  # delays 0.2, 0.4, 0.4...: not hundreds
        assert _informer(reg).state in ("backing off", "watching")


async def test_junk_lines_are_counted_logged_once_and_the_stream_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kubemux")
    async with HostileServer("junk-watch") as srv, _registry(tmp_path, srv.server) as reg:
        with anyio.fail_after(TIMEOUT):
            await reg.watch("c", "pods")
            await wait_until(lambda: _informer(reg).skipped_lines >= 5_000)
        st = _informer(reg)
        assert st.last_error is not None and "stream abandoned" in st.last_error
        assert len(reg.store("c", "pods") or ()) == 3  # the cache is kept
    skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert 1 <= len(skipped) <= 2  # the first one; no flood


async def test_the_junk_summary_is_logged_after_the_period(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kubemux")
    settings = dataclasses.replace(QUICK, skip_log_period=0.3)
    async with HostileServer("junk-watch") as srv, _registry(tmp_path, srv.server, settings) as reg:
        with anyio.fail_after(TIMEOUT):
            await reg.watch("c", "pods")
            await wait_until(lambda: any("in the last" in r.getMessage() for r in caplog.records))
    summaries = [r.getMessage() for r in caplog.records if "in the last" in r.getMessage()]
    assert "malformed lines or objects" in summaries[0]
    assert len(caplog.records) < 100


async def test_a_huge_list_page_is_refused_after_smaller_pages_were_tried(tmp_path: Path) -> None:
    settings = dataclasses.replace(QUICK, max_response_size=1 << 20, page_size=4)
    async with (
        HostileServer("huge-list", huge_bytes=64 << 20) as srv,
        _registry(tmp_path, srv.server, settings) as reg,
    ):
        with anyio.fail_after(TIMEOUT), pytest.raises(ResponseTooLarge, match="exceeds 1048576"):
            await reg.watch("c", "pods")
        assert srv.lists() == 3  # limit 4, 2, 1, each too large


async def test_a_silent_server_fails_within_the_response_timeout(tmp_path: Path) -> None:
    async with HostileServer("silent") as srv, _registry(tmp_path, srv.server) as reg:
        t0 = time.monotonic()
        with anyio.fail_after(TIMEOUT), pytest.raises(ServerTimeout, match="no response within"):
            await reg.watch("c", "pods")
        assert time.monotonic() - t0 < 3
        assert len(srv.requests) == 1  # the streaming-list attempt is not followed by a LIST


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_trickling_list_fails_in_bounded_time(tmp_path: Path, streaming: bool) -> None:
    settings = dataclasses.replace(QUICK, streaming_list=streaming, read_timeout=2.0)
    async with (
        HostileServer("trickle-list") as srv,
        _registry(tmp_path, srv.server, settings) as reg,
    ):
        t0 = time.monotonic()
        with anyio.fail_after(TIMEOUT), pytest.raises(ServerTimeout, match="stalled"):
            await reg.watch("c", "pods")
        assert time.monotonic() - t0 < 6


async def test_a_trickling_watch_line_shows_waiting_then_fails(tmp_path: Path) -> None:
    settings = dataclasses.replace(QUICK, read_timeout=2.5, min_read_rate=1 << 20)
    async with (
        HostileServer("trickle-watch") as srv,
        _registry(tmp_path, srv.server, settings) as reg,
    ):
        with anyio.fail_after(TIMEOUT):
            await reg.watch("c", "pods")
            await wait_until(lambda: _informer(reg).state == WAITING)
            await wait_until(lambda: (_informer(reg).last_error or "").count("stalled"))
        assert "a watch line stalled" in _informer(reg).last_error
        assert len(reg.store("c", "pods") or ()) == 3  # the cache is kept


def _strip_status(obj: dict[str, Any]) -> dict[str, Any]:
    obj.pop("status", None)
    return obj


@pytest.mark.parametrize("path", ["fast", "general"])
async def test_undecodable_objects_are_skipped_and_siblings_kept(tmp_path: Path, path: str) -> None:
    kw: dict[str, Any] = {} if path == "fast" else {"transforms": {"pods": _strip_status}}
    async with HostileServer("undecodable") as srv, _registry(tmp_path, srv.server, **kw) as reg:
        with anyio.fail_after(TIMEOUT):
            store = await reg.watch("c", "pods")
            async with reg.subscribe("pods", ["c"]) as changes:
                async for change in changes:  # a subscriber reads every object too
                    assert change.object is not None
                    if change.name == "after":
                        break
        names = {o["metadata"]["name"] for o in store.list()}  # never raises
        assert {"p-0", "p-1", "p-2", "after", "big-number"} <= names
        assert not names & {"deep", "bad-utf8", "bad-deep"}
        dup = store.get("default", "bad-dup")  # the envelope's last "object", decoded whole
        assert dup is None or dup["kind"] == "Pod"
        big = store.get("default", "big-number")
        # read as a float (inf); a transform's re-encode writes it as null
        assert big is not None and big["spec"]["n"] in (float("inf"), None)
        orjson.dumps(big)  # and it encodes again
        for raw in store.list_raw():
            if b"9" * 400 not in raw:
                orjson.loads(raw)  # every other cached object decodes with orjson itself
        st = _informer(reg)
        assert st.skipped_lines >= 3  # the deep LIST item, invalid UTF-8, the deep watch line
        assert st.state == "watching" and st.has_synced


async def test_a_list_item_nested_6000_deep_is_skipped_alone() -> None:
    """Deeper than msgspec goes even with a raised limit: the page is cut without
    recursion, the item refused alone and named in status (issue 18)."""
    async with HostileServer("undecodable") as srv:
        config = ContextConfig.from_dict("c", kubeconfig_dict({"c": srv.server}))
        pods = parse_resource("pods")
        store = Store(pods)
        async with open_client(config) as client:
            informer = Informer(client, pods, InformerKey("pods"), settings=LISTS, store=store)
            with anyio.fail_after(TIMEOUT):
                await informer.initial_sync()
        assert {o["metadata"]["name"] for o in store.list()} == {"p-0", "p-1", "p-2"}
        st = informer.status()
        assert st.skipped_lines == 2  # "deep" (1,000 levels) and "deeper" (6,000)
        assert st.last_skip == 'undecodable LIST item "default/deeper" (nested too deep)'


@pytest.mark.parametrize("name", sorted(BAD_OBJECT_LINES))
async def test_each_bad_line_alone_is_skipped(tmp_path: Path, name: str) -> None:
    async with FakeCluster(bookmark_period=0.2) as cluster:
        cluster.create("pods", make_pod("keep"))
        async with _registry(tmp_path, cluster.server, LISTS) as reg:
            with anyio.fail_after(TIMEOUT):
                store = await reg.watch("c", "pods")
                await cluster.wait_for(lambda: cluster.open_watches == 1)
            cluster.inject_watch_line("pods", BAD_OBJECT_LINES[name])
            cluster.create("pods", make_pod("after"))
            with anyio.fail_after(TIMEOUT):
                await wait_until(lambda: store.get("default", "after") is not None)
            for obj in store.list():
                assert obj["metadata"]["name"] in ("keep", "after", "bad-dup")
            if name != "repeated object key":
                assert _informer(reg).skipped_lines == 1


async def test_a_transform_that_raises_on_one_object_skips_only_it(tmp_path: Path) -> None:
    def picky(obj: dict[str, Any]) -> dict[str, Any]:
        if obj["metadata"]["name"] in ("p-1", "late"):
            raise RuntimeError("I do not like this one")
        return obj

    async with FakeCluster(bookmark_period=0.2) as cluster:
        for i in range(3):
            cluster.create("pods", make_pod(f"p-{i}"))
        async with _registry(tmp_path, cluster.server, LISTS, transforms={"pods": picky}) as reg:
            with anyio.fail_after(TIMEOUT):
                store = await reg.watch("c", "pods")
                await cluster.wait_for(lambda: cluster.open_watches == 1)
            cluster.create("pods", make_pod("late"))
            cluster.create("pods", make_pod("later"))
            with anyio.fail_after(TIMEOUT):
                await wait_until(lambda: store.get("default", "later") is not None)
            assert sorted(o["metadata"]["name"] for o in store.list()) == ["later", "p-0", "p-2"]
            st = _informer(reg)
            assert st.skipped_lines == 2 and st.state == "watching"


# ---------------------------------------------------------------- the informer's contract
@contextlib.asynccontextmanager
async def _bare_informer(
    cluster: FakeCluster, store: Store | None = None
) -> AsyncIterator[Informer]:
    config = ContextConfig.from_dict("c", kubeconfig_dict({"c": cluster}))
    pods = parse_resource("pods")
    async with open_client(config) as client:
        yield Informer(
            client,
            pods,
            InformerKey("pods"),
            settings=LISTS,
            store=store if store is not None else Store(pods),
        )


async def test_initial_sync_raises_only_kubemux_errors() -> None:
    def broken(*_: Any) -> list[str]:
        raise KeyError("a bug in an indexer")

    store = Store(parse_resource("pods"), indexers={"broken": broken})
    async with FakeCluster() as cluster:
        cluster.create("pods", make_pod("p"))
        async with _bare_informer(cluster, store=store) as informer:
            with anyio.fail_after(TIMEOUT), pytest.raises(InternalError, match="KeyError") as info:
                await informer.initial_sync()
            assert isinstance(info.value.__cause__, KeyError)
            assert informer.status().state == "error"


async def test_a_store_listener_that_raises_is_removed_and_the_watch_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A listener's bug is contained by the store's writer: logged, that listener removed;
    the informer sees no failure and the other listeners hear every change."""
    calls = 0

    def flaky(*_: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # the first watch event after the initial list
            raise RuntimeError("a bug in a callback")

    heard: list[str] = []
    pods = parse_resource("pods")
    store = listen(listen(Store(pods), flaky), lambda _t, entry, _o: heard.append(entry.name))
    async with FakeCluster(bookmark_period=0.2) as cluster:
        cluster.create("pods", make_pod("p"))
        async with (
            _bare_informer(cluster, store=store) as informer,
            anyio.create_task_group() as tg,
        ):
            with anyio.fail_after(TIMEOUT):
                await informer.initial_sync()
            tg.start_soon(informer.watch_forever)
            await wait_until(lambda: cluster.open_watches == 1)
            cluster.create("pods", make_pod("q"))  # the first listener raises on this one
            cluster.create("pods", make_pod("r"))
            await wait_until(lambda: informer.store.get("default", "r") is not None)
            assert heard == ["p", "q", "r"] and calls == 2  # removed after it raised
            assert informer.status().errors_by_type == {} and informer.status().relists == 0
            assert "raised; it is removed" in caplog.text
            tg.cancel_scope.cancel()


async def test_waiting_for_the_server_is_announced_when_it_begins_and_ends() -> None:
    settings = dataclasses.replace(LISTS, response_timeout=3.0)
    states: list[str] = []
    async with HostileServer("silent") as srv:
        config = ContextConfig.from_dict(
            "c", kubeconfig_dict({"c": FakeContext(cluster=srv.server)})
        )
        pods = parse_resource("pods")
        async with open_client(config) as client:
            informer = Informer(
                client,
                pods,
                InformerKey("pods"),
                settings=settings,
                store=Store(pods),
                on_state=lambda: states.append(informer.status().state),
            )
            with anyio.fail_after(TIMEOUT), pytest.raises(ServerTimeout):
                await informer.initial_sync()
    assert WAITING in states  # announced by a timer while the request was owed
    assert states[-1] == "error"


async def test_an_unpaginated_list_too_large_is_paged() -> None:
    settings = dataclasses.replace(LISTS, page_size=0, max_response_size=30_000)
    async with FakeCluster() as cluster:
        for i in range(40):
            cluster.create("pods", make_pod(f"p-{i}", size=2000))
        config = ContextConfig.from_dict("c", kubeconfig_dict({"c": cluster}))
        pods = parse_resource("pods")
        async with open_client(config) as client:
            store = Store(pods)
            informer = Informer(client, pods, InformerKey("pods"), settings=settings, store=store)
            with anyio.fail_after(TIMEOUT):
                await informer.initial_sync()
        assert len(store) == 40
        limits = [r.query.get("limit") for r in cluster.requests]
        assert limits[0] is None and "500" in limits  # refused whole, then in pages
