"""``kubemux proxy`` over HTTP/2 (ALPN ``h2``) and over HTTP/1.1 on the same port.

Each kind of request the proxy serves is asked over both protocols with httpx (``http2=True``
offers ``h2`` and ``http/1.1``; without it only HTTP/1.1), and must answer the same:
LIST, GET, WATCH, Table, paging, writes, errors, the watch cap, the token and Host checks.
Then what HTTP/2 adds: a stream whose client stops reading beside live ones on the same
connection (the live ones go on, the stalled one is cut by the watch's idle rule with
RST_STREAM, the connection stays), the stream cap in SETTINGS, a clean stop, and kubectl
1.33 negotiating ``h2`` for its reads while ``exec`` keeps HTTP/1.1's upgrade.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import h2.errors
import h2.settings
import httpx
import pytest

from h2_support import h2_client
from kubectl_support import kubectl_process, run_kubectl
from kubemux.proxy import ProxyServer, ProxySettings
from kubemux.proxy._serve.http2 import TRANSPORT_HIGH, WRITE_NOW
from kubemux.proxy._serve.sni import server_name
from kubemux.proxy._watch.views import WatchLimits
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from proxy_support import (
    TABLE,
    TinyUpstream,
    informer_watching,
    running_proxy,
    upstream_cluster,  # noqa: F401
    upstream_kubeconfig,  # noqa: F401
)

PROTOCOLS = [pytest.param(True, id="h2"), pytest.param(False, id="http1")]


def test_the_h2_library_is_importable() -> None:
    import h2.connection

    assert h2.connection.H2Connection


async def _client(server: ProxyServer, http2: bool, **kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        http2=http2,
        verify=server.certificates.client_context(),
        base_url=f"{server.url}/clusters/prod",
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=10,
        **kwargs,
    )


def _version(http2: bool) -> str:
    return "HTTP/2" if http2 else "HTTP/1.1"


@contextlib.asynccontextmanager
async def capped(kubeconfig: Path) -> AsyncIterator[ProxyServer]:
    """A proxy whose watch cap is 2 per credential and context."""
    settings = ProxySettings(max_watches_per_credential=2)
    async with running_proxy(kubeconfig, settings=settings) as (server, _):
        yield server


@pytest.mark.parametrize("http2", PROTOCOLS)
async def test_reads_over_each_protocol(kubeconfig: Path, http2: bool) -> None:
    async with capped(kubeconfig) as proxy:
        with anyio.fail_after(20):
            async with await _client(proxy, http2) as client:
                listed = await client.get("/api/v1/namespaces/default/pods")
                assert listed.http_version == _version(http2) and listed.status_code == 200
                assert sorted(p["metadata"]["name"] for p in listed.json()["items"]) == [
                    "web-1",
                    "web-2",
                ]
                got = await client.get("/api/v1/namespaces/default/pods/web-1")
                assert got.status_code == 200 and got.json()["metadata"]["name"] == "web-1"
                assert got.headers["content-length"] == str(len(got.content))
                table = await client.get("/api/v1/pods", headers={"Accept": TABLE})
                assert table.json()["kind"] == "Table" and len(table.json()["rows"]) == 3
                page = (await client.get("/api/v1/pods?limit=2")).json()
                token = page["metadata"]["continue"]
                rest = (await client.get(f"/api/v1/pods?limit=2&continue={token}")).json()
                names = [p["metadata"]["name"] for p in page["items"] + rest["items"]]
                assert sorted(names) == ["db-1", "web-1", "web-2"] and not rest["metadata"].get(
                    "continue"
                )
                missing = await client.get("/api/v1/namespaces/default/pods/nope")
                assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"


@pytest.mark.parametrize("http2", PROTOCOLS)
async def test_writes_over_each_protocol(
    kubeconfig: Path, cluster: FakeCluster, http2: bool
) -> None:
    async with capped(kubeconfig) as proxy:
        body = json.dumps(make_pod("made", size=200_000)).encode()  # several frames, windows
        with anyio.fail_after(20):
            async with await _client(proxy, http2) as client:
                made = await client.post("/api/v1/namespaces/default/pods", content=body)
                assert made.http_version == _version(http2)
                assert made.status_code == 201, made.text
                assert cluster.get("pods", "default", "made") is not None
                gone = await client.delete("/api/v1/namespaces/default/pods/made")
                assert gone.status_code == 200
                again = await client.delete("/api/v1/namespaces/default/pods/made")
                assert again.status_code == 404 and again.json()["reason"] == "NotFound"


@pytest.mark.parametrize("http2", PROTOCOLS)
async def test_watches_and_their_cap_over_each_protocol(
    kubeconfig: Path, cluster: FakeCluster, http2: bool
) -> None:
    async with capped(kubeconfig) as proxy:
        with anyio.fail_after(20):
            async with await _client(proxy, http2) as client:
                rv = (await client.get("/api/v1/pods")).json()["metadata"]["resourceVersion"]
                path = f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}"
                async with (
                    client.stream("GET", path) as first,
                    client.stream("GET", path) as second,
                ):
                    assert first.http_version == second.http_version == _version(http2)
                    refused = await client.get(path)  # the cap is 2 (per credential and context)
                    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
                    cluster.create("pods", make_pod("later"))
                    for response in (first, second):
                        lines = response.aiter_lines()
                        event = json.loads(await anext(lines))
                        assert (event["type"], event["object"]["metadata"]["name"]) == (
                            "ADDED",
                            "later",
                        )


@pytest.mark.parametrize("http2", PROTOCOLS)
async def test_the_token_and_host_checks_over_each_protocol(kubeconfig: Path, http2: bool) -> None:
    async with capped(kubeconfig) as proxy:
        with anyio.fail_after(20):
            async with await _client(proxy, http2) as client:
                bare = await client.get("/api/v1/pods", headers={"Authorization": "Bearer wrong"})
                assert bare.http_version == _version(http2)
                assert bare.status_code == 401 and bare.json()["reason"] == "Unauthorized"
        # over h2 the Host is the :authority pseudo-header (RFC 9113 8.3.1)
        with anyio.fail_after(20):
            async with h2_client(proxy) as raw:
                sid = raw.request("GET", "/clusters/prod/api/v1/pods", authority="evil.example:443")
                reply = await raw.reply(sid)
                assert reply.status == 400 and b"this Host is not the proxy's" in reply.data
                sid = raw.request("GET", "/clusters/prod/api/v1/pods", token=False)
                assert (await raw.reply(sid)).status == 401


async def test_alpn_serves_h2_or_hands_the_connection_to_http1(kubeconfig: Path) -> None:
    async with capped(kubeconfig) as proxy:
        async with h2_client(proxy) as h2c:
            assert h2c.alpn == "h2"
            await h2c.until(lambda: bool(h2c.remote_settings))
            assert h2c.remote_settings[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == 250
        async with await _client(proxy, False) as client:
            assert (await client.get("/version")).http_version == "HTTP/1.1"
        assert proxy.http2 is not None
        assert proxy.http2.counts["h2"] >= 1 and proxy.http2.counts["http/1.1"] >= 1


async def test_http2_can_be_switched_off(kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig, settings=ProxySettings(http2=False)) as (server, _):
        assert server.http2 is None
        async with await _client(server, True) as client:
            with anyio.fail_after(20):
                got = await client.get("/api/v1/namespaces/default/pods/web-1")
                assert got.status_code == 200 and got.http_version == "HTTP/1.1"


async def test_the_sni_names_the_context_over_h2(kubeconfig: Path) -> None:
    """kubectl before 1.34 drops the server URL's path for ``get --raw`` (.sni): over h2 the
    connection's SNI names the context as over HTTP/1.1."""
    async with capped(kubeconfig) as proxy, h2_client(proxy, sni=server_name("prod")) as client:
        with anyio.fail_after(20):
            reply = await client.reply(client.request("GET", "/api/v1/namespaces/default/pods"))
            assert reply.status == 200
            assert len(json.loads(reply.data)["items"]) == 2
            wrong = await client.reply(client.request("GET", "/clusters/other/api/v1/pods"))
            assert wrong.status == 421


async def test_a_stalled_stream_stalls_no_other_stream_and_is_cut_alone(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    """One connection, a watch whose client never opens its window beside three it reads:
    the three get every event, the stalled one is cut by the idle rule (RST_STREAM CANCEL)
    and the connection goes on (a new stream on it is answered)."""
    settings = ProxySettings(watch=WatchLimits(idle_timeout=1.0))
    async with running_proxy(kubeconfig, settings=settings) as (server, _):
        window = {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16 * 1024}
        with anyio.fail_after(30):
            async with h2_client(server, settings=window) as client:
                sid = client.request("GET", "/clusters/prod/api/v1/pods?limit=1")
                rv = json.loads((await client.reply(sid)).data)["metadata"]["resourceVersion"]
                path = f"/clusters/prod/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}"
                stalled = client.request("GET", path)
                client.stalled.add(stalled)
                live = [client.request("GET", path) for _ in range(3)]
                for n in range(12):  # 12 x ~4 KiB: past the stalled stream's 16 KiB window
                    cluster.create("pods", make_pod(f"big-{n}", size=4000))
                await client.until(lambda: all(len(client.replies[s].lines()) == 12 for s in live))
                await client.until(lambda: client.replies[stalled].reset is not None)
                assert client.replies[stalled].reset == h2.errors.ErrorCodes.CANCEL
                assert len(client.replies[stalled].data) <= 16 * 1024
                cluster.create("pods", make_pod("after"))
                await client.until(lambda: all(len(client.replies[s].lines()) == 13 for s in live))
                assert all(client.replies[s].reset is None for s in live)
                sid = client.request("GET", "/clusters/prod/api/v1/namespaces/default/pods/after")
                assert (await client.reply(sid)).status == 200
                assert client.goaway is None


async def test_a_connection_that_reads_nothing_holds_what_its_watchers_may(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    """A client with wide-open windows that stops reading the connection altogether: the
    proxy's transport holds at most its high-water mark and one write, the streams wait
    (their events stay in the watchers' budgets) and the idle rule cuts every one."""
    settings = ProxySettings(watch=WatchLimits(idle_timeout=1.0))
    wide = {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1}
    async with (
        running_proxy(kubeconfig, settings=settings) as (server, _),
        h2_client(server, settings=wide) as client,
    ):
        with anyio.fail_after(30):
            client.conn.increment_flow_control_window(2**30)
            path = "/clusters/prod/api/v1/namespaces/default/pods?watch=1&resourceVersion=0"
            streams = [client.request("GET", path) for _ in range(2)]
            await client.until(lambda: all(client.replies[s].status == 200 for s in streams))
            client.writer.transport.pause_reading()  # nothing is read again
            proxy = server.app.state.proxy
            assert proxy.statistics().watches == 2
            for n in range(700):  # ~8 KB each, ~11 MB for two: more than the sockets hold
                cluster.create("pods", make_pod(f"big-{n}", size=8000))
            assert server.http2 is not None
            (connection,) = server.http2.connections
            most = 0
            while proxy.statistics().watches:
                transport = connection.transport  # type: ignore[attr-defined]
                most = max(most, transport.get_write_buffer_size())
                await anyio.sleep(0.05)
            assert 0 < most <= TRANSPORT_HIGH + WRITE_NOW + 256 * 1024


async def test_a_clean_stop_ends_each_watch_stream_then_goaway(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (server, _):
        with anyio.fail_after(30):
            async with h2_client(server) as client:
                path = "/clusters/prod/api/v1/pods?watch=1"
                streams = [client.request("GET", path) for _ in range(5)]
                await client.until(lambda: all(client.replies[s].status == 200 for s in streams))
                server.shutdown()
                await client.until_closed()
                assert all(client.replies[s].ended for s in streams)  # END_STREAM, not reset
                assert client.goaway == h2.errors.ErrorCodes.NO_ERROR


KUBECTL_133 = None
_found = shutil.which("kubectl")
if _found:
    _pinned = os.path.join(os.path.dirname(os.path.realpath(_found)), "kubectl.1.33")
    KUBECTL_133 = _pinned if os.access(_pinned, os.X_OK) else None


@pytest.mark.skipif(KUBECTL_133 is None, reason="kubectl 1.33 not installed")
async def test_kubectl_133_watches_over_h2(
    cluster: FakeCluster, kubeconfig: Path, tmp_path: Path
) -> None:
    assert KUBECTL_133 is not None
    out = tmp_path / "proxy.yaml"
    async with running_proxy(kubeconfig) as (server, _):
        server.write_kubeconfig(out)
        assert server.http2 is not None
        with anyio.fail_after(30):
            async with kubectl_process(KUBECTL_133, out, "get", "pods", "-w") as proc:
                assert proc.stdout is not None
                seen = b""
                while b"web-2" not in seen:  # the first list, then the watch
                    seen += await proc.stdout.readline()
                await informer_watching(cluster)
                cluster.create("pods", make_pod("watched"))
                while b"watched" not in seen:
                    seen += await proc.stdout.readline()
            proxy = server.app.state.proxy
            assert server.http2.counts["h2"] >= 1 and server.http2.counts["http/1.1"] == 0
            while proxy.statistics().watches:  # noqa: ASYNC110 - kubectl's watch ends with it
                await anyio.sleep(0.01)


@pytest.mark.skipif(KUBECTL_133 is None, reason="kubectl 1.33 not installed")
async def test_kubectl_133_reads_over_h2_and_execs_over_http1(tmp_path: Path) -> None:
    assert KUBECTL_133 is not None
    async with TinyUpstream() as tiny:
        source = write_kubeconfig(tmp_path / "config", {"tiny": FakeContext(cluster=tiny.url)})
        out = tmp_path / "proxy.yaml"
        async with running_proxy(source) as (server, _):
            server.write_kubeconfig(out)
            assert server.http2 is not None
            counts = server.http2.counts
            with anyio.fail_after(60):
                code, stdout, err = await run_kubectl(KUBECTL_133, out, "get", "pod", "shell")
                assert code == 0, err
                assert stdout.split()[:3] == ["NAME", "AGE", "shell"]
                assert counts["h2"] >= 1 and counts["streams"] >= 1
                h1_before = counts["http/1.1"]
                code, stdout, err = await run_kubectl(
                    KUBECTL_133, out, "exec", "shell", "--", "echo", "hi", "there"
                )
                assert code == 0, err
                assert stdout == "hi there\n"
                assert counts["http/1.1"] == h1_before + 1  # the upgrade's own connection
    exec_requests = [r for r in tiny.requests if "/exec" in r[1]]
    assert len(exec_requests) == 1 and exec_requests[0][2]["Upgrade"].lower() == "websocket"


async def test_h2_watches_go_on_without_their_tasks_and_free_their_slots(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    """Once its starting point is written, a watch over h2 goes on without its task (its
    view's rounds write into its stream): each stream's task has ended, the watch slots
    stay taken (the cap refuses one more), every event arrives, and a stream the client
    resets leaves its view and frees its slot for the next watch."""
    settings = ProxySettings(max_watches_per_credential=3)
    async with running_proxy(kubeconfig, settings=settings) as (server, _):
        assert server.http2 is not None
        with anyio.fail_after(30):
            async with h2_client(server) as client:
                sid = client.request("GET", "/clusters/prod/api/v1/pods?limit=1")
                rv = json.loads((await client.reply(sid)).data)["metadata"]["resourceVersion"]
                path = f"/clusters/prod/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}"
                watches = [client.request("GET", path) for _ in range(3)]
                await client.until(lambda: all(client.replies[s].status == 200 for s in watches))
                streams = [s for p in server.http2.connections for s in p.streams.values()]
                assert len(streams) == 3
                tasks = [s.task for s in streams if s.task is not None]
                if tasks:
                    await asyncio.wait(tasks)
                assert all(s.detached and s.task is None for s in streams)
                refused = client.request("GET", path)
                assert (await client.reply(refused)).status == 429
                cluster.create("pods", make_pod("one"))
                await client.until(
                    lambda: all(len(client.replies[s].lines()) == 1 for s in watches)
                )
                client.conn.reset_stream(watches[0], h2.errors.ErrorCodes.CANCEL)
                client.flush()
                again = client.request("GET", path)
                await client.until(lambda: client.replies[again].status == 200)
                cluster.create("pods", make_pod("two"))
                await client.until(
                    lambda: all(len(client.replies[s].lines()) == 2 for s in [*watches[1:], again])
                )
                assert len(client.replies[watches[0]].lines()) == 1
                assert sum(s.watches for s in server.app.state.proxy.status()) == 3
                assert client.goaway is None
