"""The dashboard example: JSON API, server-sent events and safety, against FakeClusters.

The JSON API goes through httpx's ASGITransport with the app's lifespan entered by hand; the
event streams go over real HTTP to uvicorn running in the test's event loop (ASGITransport
buffers whole responses, so it cannot carry an endless stream).
"""

from __future__ import annotations

import contextlib
import socket
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
from starlette.applications import Starlette

from kubemux import Backoff, Change, TableColumn, WatchSettings, dashboard, parse_resource
from kubemux._wire.codec import Entry
from kubemux.dashboard import _rows, streams, views
from kubemux.testing import FakeCluster, FakeContext, make_event, make_pod, write_kubeconfig
from kubemux.testing._hostile import HostileServer
from support import TIMEOUT, wait_until

XSS = "<img src=x onerror=alert(1)>"
FAST = {
    "settings": WatchSettings(backoff=Backoff(initial_delay=0.02, max_delay=0.1)),
    "start_backoff": Backoff(initial_delay=0.05, max_delay=0.2),
    "debounce_delay": 0.05,
}


def make_app(path: Path, **options: Any) -> Starlette:
    options.setdefault("registry_options", FAST)
    options.setdefault("status_period", 0.2)
    app: Starlette = dashboard.create_app(kubeconfig=str(path), **options)
    return app


@contextlib.asynccontextmanager
async def api_client(path: Path, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan entered, and a client calling it in-process."""
    app = make_app(path, **options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client


@contextlib.asynccontextmanager
async def served(path: Path, **options: Any) -> AsyncIterator[str]:
    """The dashboard served by uvicorn on a free port; yields its URL."""
    async with serving(make_app(path, **options)) as url:
        yield url


@contextlib.asynccontextmanager
async def serving(app: Starlette, port: int = 0) -> AsyncIterator[str]:
    """``app`` served by uvicorn in this event loop; yields its URL."""
    server = dashboard.DashboardServer(app, port=port)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(TIMEOUT):
            url: str = await tg.start(server.serve)
        try:
            yield url
        finally:
            server.shutdown()


class EventStream:
    """Reads server-sent events and keeps the table the way the page does."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()
        self.rows: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.stale: set[tuple[str, str, str]] = set()
        self.contexts: dict[str, Any] = {}
        self.columns: dict[str, list[str]] = {}  # context -> column names
        self.definitions: dict[str, list[str]] = {}  # column set id -> column names
        self.seen: list[tuple[str, Any]] = []
        self.raw: list[str] = []

    async def next(self) -> tuple[str, Any]:
        event, data = "message", []
        async for line in self._lines:
            self.raw.append(line)
            if not line:
                if data:
                    item = (event, orjson.loads("\n".join(data)))
                    self.seen.append(item)
                    self._apply(*item)
                    return item
                event = "message"
            elif not line.startswith(":"):
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "event":
                    event = value
                elif field == "data":
                    data.append(value)
        raise EOFError("the stream ended")

    def _apply(self, event: str, data: Any) -> None:
        if event == "reset":
            self.stale = set(self.rows)
        elif event == "synced":
            for key in self.stale:
                self.rows.pop(key, None)
            self.stale = set()
        elif event == "contexts" and "contexts" in data:  # the whole panel
            self.contexts = {c["name"]: c for c in data["contexts"]}
        elif event == "contexts":  # what changed in it
            self.contexts.update((c["name"], c) for c in data["changed"])
            for name in data["removed"]:
                self.contexts.pop(name, None)
        elif event == "columns":  # whole once per snapshot, then by id
            if "columns" in data:
                self.definitions[data["id"]] = [c["name"] for c in data["columns"]]
            if "context" in data:
                self.columns[data["context"]] = self.definitions[data["id"]]
        elif event == "changes":
            for c in data:
                if c["type"] in ("ADDED", "MODIFIED"):
                    key = (c["context"], c["namespace"], c["name"])
                    self.rows[key] = c["row"]
                    self.stale.discard(key)
                elif c["type"] == "DELETED":
                    self.rows.pop((c["context"], c["namespace"], c["name"]), None)
                else:  # RESET, REMOVED
                    for key in [k for k in self.rows if k[0] == c["context"]]:
                        del self.rows[key]
                    if c["type"] == "REMOVED":
                        self.columns.pop(c["context"], None)

    async def until(self, predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(TIMEOUT):
            while not predicate():
                await self.next()

    async def until_event(self, name: str) -> Any:
        with anyio.fail_after(TIMEOUT):
            while True:
                event, data = await self.next()
                if event == name:
                    return data

    def cell(self, key: tuple[str, str, str], column: str) -> Any:
        """A row's cell in the named column of its context (None if it has no such column)."""
        names = self.columns.get(key[0], [])
        if key not in self.rows or column not in names:
            return None
        return self.rows[key]["cells"][names.index(column)]

    def names(self, context: str | None = None) -> set[str]:
        return {n for (c, _, n) in self.rows if context is None or c == context}


def parse_event(raw: bytes) -> tuple[str, Any]:
    """One encoded server-sent event as (event, data)."""
    fields = dict(line.split(": ", 1) for line in raw.decode().split("\r\n") if line)
    return fields["event"], orjson.loads(fields["data"])


@contextlib.asynccontextmanager
async def event_stream(url: str, query: str = "") -> AsyncIterator[EventStream]:
    async with (
        httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
        client.stream("GET", "/api/stream" + query) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        yield EventStream(response)


@pytest.fixture
async def clusters() -> AsyncIterator[tuple[FakeCluster, FakeCluster]]:
    async with FakeCluster(tokens={"tok-a"}) as a, FakeCluster(tokens={"tok-b"}) as b:
        a.create("pods", make_pod("web-1"))
        a.create("pods", make_pod("web-2"))
        b.create("pods", make_pod("db-1", "data"))
        yield a, b


# ---------------------------------------------------------------------- views (no I/O)
def test_pod_row_follows_kubectl() -> None:
    pod = make_pod("web-1", phase="Running")
    pod["status"]["containerStatuses"][0].update(
        ready=False, restartCount=4, state={"waiting": {"reason": "CrashLoopBackOff"}}
    )
    row = views.summarize("pods", pod)
    assert row["status"] == "CrashLoopBackOff"
    assert (row["ready"], row["restarts"], row["node"]) == ("0/1", 4, "node-1")
    pod["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert views.summarize("pods", pod)["status"] == "Terminating"
    deploy = {"kind": "Deployment", "spec": {"replicas": 3}, "status": {"readyReplicas": 2}}
    assert views.summarize("deployments.apps", deploy)["ready"] == "2/3"
    assert views.summarize("widgets.v1.example.com", {"metadata": None})["status"] == ""


def test_events_of_both_shapes() -> None:
    new = make_event(make_pod("web-1"), reason="BackOff", note="restarting", type_="Warning")
    core = {
        "metadata": {"name": "web-1.1"},
        "involvedObject": {"kind": "Pod", "name": "web-1"},
        "type": "Normal",
        "reason": "Pulled",
        "message": "pulled",
        "count": 3,
        "lastTimestamp": "2025-01-01T00:00:00Z",
        "source": {"component": "kubelet"},
    }
    a, b = views.event_payload(new), views.event_payload(core)
    assert (a["type"], a["reason"], a["message"], a["count"]) == (
        "Warning",
        "BackOff",
        "restarting",
        1,
    )
    assert a["time"] == new["eventTime"] and a["source"] == "kubelet"
    assert (b["message"], b["count"], b["time"], b["source"]) == (
        "pulled",
        3,
        "2025-01-01T00:00:00Z",
        "kubelet",
    )


def test_secrets_are_redacted() -> None:
    secret = {
        "kind": "Secret",
        "metadata": {
            "name": "db",
            "annotations": {views.LAST_APPLIED: '{"data":{"password":"aHVudGVyMg=="}}'},
        },
        "data": {"password": "aHVudGVyMg=="},
        "stringData": {"token": "hunter2"},
    }
    shown = views.redact(parse_resource("secrets"), secret)
    assert "aHVudGVyMg" not in orjson.dumps(shown).decode()
    assert "hunter2" not in orjson.dumps(shown).decode()
    assert set(shown["data"]) == {"password"} and set(shown["stringData"]) == {"token"}
    assert secret["data"]["password"] == "aHVudGVyMg=="  # the cached object is untouched
    pod = make_pod("web-1")
    assert views.redact(parse_resource("pods"), pod) == pod


def test_server_url_loses_its_password() -> None:
    assert (
        views.safe_server("https://admin:hunter2@k8s.example:6443/x")
        == "https://***@k8s.example:6443/x"
    )
    assert views.safe_server("https://k8s.example") == "https://k8s.example"


def test_change_payload() -> None:
    pod = make_pod("web-1", labels={"app": XSS})
    added = views.change_payload(Change("prod", "pods", "ADDED", pod))
    assert added["row"]["labels"] == {"app": XSS}  # text, the page renders it as text
    assert views.change_payload(Change("prod", "pods", "DELETED", pod)) == {
        "type": "DELETED",
        "context": "prod",
        "namespace": "default",
        "name": "web-1",
    }
    reset = views.change_payload(Change("prod", "pods", "RESET"))
    assert reset == {"type": "RESET", "context": "prod", "resource": "pods"}


# ---------------------------------------------------------------------- JSON API
async def test_api_contexts_and_lists(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    async with api_client(path) as client:
        with anyio.fail_after(TIMEOUT):
            listed = (await client.get("/api/contexts/prod/pods")).json()
        assert listed["context"] == "prod" and listed["resource"] == "pods"
        assert sorted(o["metadata"]["name"] for o in listed["items"]) == ["web-1", "web-2"]
        assert "managedFields" not in listed["items"][0]["metadata"]
        data = (await client.get("/api/contexts/dev/pods", params={"namespace": "data"})).json()
        assert [o["metadata"]["name"] for o in data["items"]] == ["db-1"]
        empty = (await client.get("/api/contexts/dev/pods", params={"namespace": "web"})).json()
        assert empty["items"] == []

        response = await client.get("/api/contexts")
        assert response.status_code == 200
        body = response.json()
        assert body["current_context"] == "prod"
        prod = next(c for c in body["contexts"] if c["name"] == "prod")
        assert prod["state"] == "running" and prod["objects"] == {"pods": 2}
        assert prod["server"] == a.server and prod["last_sync"] is not None
        assert "tok-a" not in response.text and "tok-b" not in response.text

        one = await client.get("/api/contexts/prod/pods/default/web-1")
        assert one.status_code == 200 and one.json()["metadata"]["name"] == "web-1"
        missing = await client.get("/api/contexts/prod/pods/default/nope")
        assert missing.status_code == 404
        assert missing.json()["error"] == "pods default/nope not found in context 'prod'"


async def test_api_context_names_with_slashes_and_percents(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = clusters
    eks = "arn:aws:eks:us-west-2:123456789012:cluster/prod"  # how EKS names contexts
    odd = "team a/%2F 100%"
    path = write_kubeconfig(tmp_path / "config", {eks: a, odd: b})
    async with api_client(path) as client:
        for name, pods in ((eks, ["web-1", "web-2"]), (odd, ["db-1"])):
            quoted = urllib.parse.quote(name, safe="")
            with anyio.fail_after(TIMEOUT):
                listed = await client.get(f"/api/contexts/{quoted}/pods")
            assert listed.status_code == 200, listed.text
            assert listed.json()["context"] == name
            assert sorted(o["metadata"]["name"] for o in listed.json()["items"]) == pods
        quoted = urllib.parse.quote(eks, safe="")
        one = await client.get(f"/api/contexts/{quoted}/pods/default/web-1")
        assert one.status_code == 200 and one.json()["metadata"]["name"] == "web-1"
        with anyio.fail_after(TIMEOUT):
            events = await client.get(f"/api/contexts/{quoted}/events/Pod/default/web-1")
        assert events.status_code == 200 and events.json()["context"] == eks
        unknown = await client.get("/api/contexts/" + urllib.parse.quote("a/b", safe="") + "/pods")
        assert unknown.json()["error"] == "context 'a/b' not found in the kubeconfig"


async def test_api_errors_are_json(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a})
    async with api_client(path) as client:
        unknown = await client.get("/api/contexts/nope/pods")
        assert unknown.status_code == 404
        assert unknown.json() == {
            "error": "context 'nope' not found in the kubeconfig",
            "status": 404,
        }
        bad = await client.get("/api/contexts/prod/nonsense")
        assert bad.status_code == 400 and "unknown resource 'nonsense'" in bad.json()["error"]
        with anyio.fail_after(TIMEOUT):
            crd = await client.get("/api/contexts/prod/widgets.v1.example.com")
        assert crd.status_code == 404 and crd.json()["status"] == 404
        nothing = await client.get("/api/nothing/here")
        assert nothing.status_code == 404 and "no such API endpoint" in nothing.json()["error"]


async def test_api_not_synced_is_503_with_retry_after(tmp_path: Path) -> None:
    async with FakeCluster() as slow:
        path = write_kubeconfig(tmp_path / "config", {"slow": slow})
        slow.stall()  # LISTs hang until unstalled
        try:
            async with api_client(path, sync_timeout=0.2) as client:
                response = await client.get("/api/contexts/slow/pods")
                assert response.status_code == 503
                assert response.headers["retry-after"] == "1"
                assert response.json()["error"] == "pods in context 'slow' is not synced yet"
                slow.unstall()
                with anyio.fail_after(TIMEOUT):
                    while (await client.get("/api/contexts/slow/pods")).status_code != 200:
                        await slow.wait_for(lambda: bool(slow.requests))
        finally:
            slow.unstall()


async def test_api_unreachable_cluster(tmp_path: Path) -> None:
    async with FakeCluster() as dead:
        server = dead.server
    path = write_kubeconfig(tmp_path / "config", {"dead": FakeContext(cluster=server)})
    async with api_client(path) as client:
        with anyio.fail_after(TIMEOUT):
            response = await client.get("/api/contexts/dead/pods")
        assert response.status_code == 503
        assert int(response.headers["retry-after"]) >= 1
        assert response.json()["error"].startswith(f"cannot reach {server}")
        contexts = (await client.get("/api/contexts")).json()["contexts"]
        assert contexts[0]["state"] in ("backing off", "error")
        assert contexts[0]["last_error"].startswith(f"cannot reach {server}")


async def test_api_events_and_xss_payload_stays_text(tmp_path: Path) -> None:
    async with FakeCluster(tokens={"tok-a"}) as c:
        pod = c.create("pods", make_pod("web-1", labels={"app": XSS}))
        c.create("events.events.k8s.io", make_event(pod, reason="BackOff", note=XSS, seq=1))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with api_client(path) as client:
            with anyio.fail_after(TIMEOUT):
                response = await client.get("/api/contexts/prod/events/Pod/default/web-1")
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/json"
            events = response.json()["events"]
            assert [(e["reason"], e["message"]) for e in events] == [("BackOff", XSS)]
            by_plural = await client.get("/api/contexts/prod/events/pods/default/web-1")
            assert by_plural.json()["events"] == events
            none = await client.get("/api/contexts/prod/events/Pod/default/nope")
            assert none.json()["events"] == []
            pods = (await client.get("/api/contexts/prod/pods")).json()["items"]
            assert pods[0]["metadata"]["labels"] == {"app": XSS}


async def test_api_redacts_secrets(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create(
            "secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "db", "namespace": "default"},
                "data": {"password": "aHVudGVyMg=="},
            },
        )
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with api_client(path) as client:
            with anyio.fail_after(TIMEOUT):
                listed = await client.get("/api/contexts/prod/secrets")
            one = await client.get("/api/contexts/prod/secrets/default/db")
        for response in (listed, one):
            assert response.status_code == 200
            assert "aHVudGVyMg" not in response.text
        assert listed.json()["items"][0]["data"] == {"password": "(redacted)"}


async def test_pages_hosts_and_headers(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a})
    async with api_client(path) as client:
        page = await client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "<script>" not in page.text  # no inline script: the CSP would block it
        assert (await client.get("/object?context=prod&name=x")).text == page.text
        script = await client.get("/static/app.js")
        assert script.status_code == 200 and "innerHTML" not in script.text.split("\n", 5)[-1]
        # DNS rebinding: a page on evil.example resolving to 127.0.0.1 gets nothing
        evil = await client.get("/api/contexts", headers={"host": "evil.example:8000"})
        assert (
            evil.status_code == 400 and evil.json()["error"] == "host 'evil.example' is not allowed"
        )
        for host in ("localhost:8000", "127.0.0.1", "[::1]:8000"):
            assert (await client.get("/api/contexts", headers={"host": host})).status_code == 200


# ---------------------------------------------------------------------- event streams
async def test_stream_snapshot_then_live_changes(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    async with served(path) as url, event_stream(url) as stream:
        event, data = await stream.next()
        assert event == "reset" and data["resource"] == "pods"
        await stream.until(lambda: stream.names() == {"web-1", "web-2", "db-1"})
        await stream.until(lambda: set(stream.contexts) == {"prod", "dev"})
        a.create("pods", make_pod("web-3"))
        await stream.until(lambda: "web-3" in stream.names("prod"))
        pod = a.get("pods", "default", "web-1")
        assert pod is not None
        pod["status"]["phase"] = "Failed"
        a.update("pods", pod)
        web1 = ("prod", "default", "web-1")
        await stream.until(lambda: stream.cell(web1, "Status") == "Failed")
        a.delete("pods", "default", "web-2")
        await stream.until(lambda: "web-2" not in stream.names())
        await stream.until(
            lambda: (
                stream.contexts["prod"]["objects"] == {"pods": 2}
                and stream.contexts["prod"]["state"] == "running"
            )
        )
        assert "tok-a" not in "\n".join(stream.raw) and "tok-b" not in "\n".join(stream.raw)


async def test_stream_follows_the_kubeconfig(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    async with served(path) as url, event_stream(url) as stream:
        await stream.until(lambda: stream.names() == {"web-1", "web-2", "db-1"})
        write_kubeconfig(path, {"prod": a})  # dev removed
        await stream.until(
            lambda: stream.names() == {"web-1", "web-2"} and "dev" not in stream.contexts
        )
        assert any(
            e == "changes" and any(c["type"] == "REMOVED" and c["context"] == "dev" for c in d)
            for e, d in stream.seen
        )
        write_kubeconfig(path, {"prod": a, "dev": b, "staging": b})  # dev back, staging new
        await stream.until(
            lambda: stream.names("dev") == {"db-1"} and stream.names("staging") == {"db-1"}
        )
        generation = stream.contexts["prod"]["generation"]
        a.tokens.add("rotated")
        write_kubeconfig(path, {"prod": FakeContext(cluster=a, token="rotated"), "dev": b})
        await stream.until(
            lambda: (
                "staging" not in stream.contexts
                and stream.contexts["prod"]["generation"] != generation
                and stream.names("prod") == {"web-1", "web-2"}
            )
        )
        # a rotated token keeps the cluster: the rows go on, nothing is reset (issue 29)
        assert not any(
            e == "changes" and any(c["type"] == "RESET" and c["context"] == "prod" for c in d)
            for e, d in stream.seen
        )


async def test_context_states_reach_the_page_without_waiting_for_the_period(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    # a period far beyond the test's timeout: only state changes can move the panel
    async with served(path, status_period=3600) as url, event_stream(url) as stream:
        await stream.until(lambda: stream.names() == {"web-1", "web-2", "db-1"})
        await stream.until(lambda: stream.contexts["dev"]["state"] == "running")
        b.fail_next(1000, status=503, watch=True)
        b.drop_watches()  # dev's watch breaks and cannot come back: backing off
        await stream.until(lambda: stream.contexts["dev"]["state"] == "backing off")


async def test_reconnect_resynchronises(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    app = make_app(path)
    async with serving(app) as url:
        async with event_stream(url) as first:
            await first.until(lambda: first.names() == {"web-1", "web-2", "db-1"})
        # changes while the page is disconnected
        a.delete("pods", "default", "web-1")
        b.create("pods", make_pod("db-2", "data"))
        registry = app.state.dashboard.registry
        with anyio.fail_after(TIMEOUT):
            await a.wait_for(lambda: len(registry.store("prod", "pods", view="table")) == 1)
            await b.wait_for(lambda: len(registry.store("dev", "pods", view="table")) == 2)
        async with event_stream(url) as second:
            second.rows = dict(first.rows)  # what the page still shows
            assert await second.until_event("reset") is not None
            await second.until_event("synced")
            assert second.names() == {"web-2", "db-1", "db-2"}


async def test_stream_of_another_resource_and_namespace(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = clusters
    a.create("configmaps", {"metadata": {"name": "settings", "namespace": "default"}, "data": {}})
    b.create("configmaps", {"metadata": {"name": "other", "namespace": "data"}, "data": {}})
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    async with served(path) as url:
        async with event_stream(url, "?resource=configmaps") as stream:  # not autowatched
            await stream.until(lambda: stream.names() == {"settings", "other"})
        async with event_stream(url, "?namespace=data") as stream:
            await stream.until(lambda: stream.names() == {"db-1"})
            a.create("pods", make_pod("web-3"))
            b.create("pods", make_pod("db-2", "data"))
            await stream.until(lambda: stream.names() == {"db-1", "db-2"})
            assert {ns for (_, ns, _) in stream.rows} == {"data"}
        async with event_stream(url, "?resource=nonsense") as stream:
            # one problem naming it, then the stream stays: the contexts panel goes on
            data = await stream.until_event("problem")
            assert data == {
                "message": "the server doesn't have a resource type 'nonsense' "
                "(none of the 2 contexts that answered serves it); did you mean 'nodes'?",
                "fatal": False,
                "kind": "resource",
            }
            await stream.until(lambda: stream.contexts.get("prod", {}).get("state") == "running")
            assert stream.rows == {} and not stream.contexts["prod"]["last_error"]


async def test_object_stream_with_events(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        pod = c.create("pods", make_pod("web-1", labels={"app": XSS}))
        c.create("events.events.k8s.io", make_event(pod, reason="Scheduled", note="ok", seq=1))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        query = "?context=prod&resource=pods&namespace=default&name=web-1"
        async with served(path) as url, event_stream(url, query) as stream:
            obj = await stream.until_event("object")
            assert obj["object"]["metadata"]["labels"] == {"app": XSS}
            events = await stream.until_event("events")
            assert [e["reason"] for e in events] == ["Scheduled"]
            c.create("events.events.k8s.io", make_event(pod, reason="BackOff", note=XSS, seq=2))
            events = await stream.until_event("events")
            assert [e["reason"] for e in events] == ["BackOff", "Scheduled"]
            assert events[0]["message"] == XSS
            c.delete("pods", "default", "web-1")
            assert (await stream.until_event("object"))["object"] is None


async def test_slow_stream_resubscribes_with_a_snapshot(tmp_path: Path) -> None:
    """A stream that falls behind its subscription buffer starts again from a snapshot."""
    async with FakeCluster() as c:
        c.create("pods", make_pod("p-0"))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        options = {**FAST, "subscriber_buffer": 4}
        app = make_app(path, registry_options=options)
        resource = parse_resource("pods")
        async with app.router.lifespan_context(app):
            registry = app.state.dashboard.registry
            with anyio.fail_after(TIMEOUT):
                store = await registry.watch("prod", "pods")
            send, receive = anyio.create_memory_object_stream[Any](0)
            stream = streams.Stream(app.state.dashboard.stream_context, send.send)
            seen: list[tuple[str, Any]] = []

            async def read_until(name: str) -> None:
                with anyio.fail_after(TIMEOUT):
                    async for item in receive:
                        event, data = parse_event(item)
                        seen.append((event, data))
                        if event == name:
                            return

            async with anyio.create_task_group() as tg, send, receive:
                tg.start_soon(stream.table, resource, None)
                await read_until("synced")
                # stop reading: the stream blocks, its subscription overflows
                for i in range(1, 40):
                    c.create("pods", make_pod(f"p-{i}"))
                with anyio.fail_after(TIMEOUT):
                    await c.wait_for(lambda: len(store) == 40)
                mark = len(seen)
                await read_until("reset")
                await read_until("synced")
                rows = {
                    ch["name"]
                    for event, data in seen[mark:]
                    if event == "changes"
                    for ch in data
                    if ch["type"] == "ADDED"
                }
                assert rows == {f"p-{i}" for i in range(40)}
                tg.cancel_scope.cancel()


async def test_shutdown_ends_open_streams(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a})
    server = dashboard.DashboardServer(make_app(path), port=0)
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            url = await tg.start(server.serve)
            async with event_stream(url) as stream:
                await stream.until_event("synced")
                server.shutdown()
                with pytest.raises((EOFError, httpx.HTTPError)):
                    await drain(stream)


async def test_dashboard_connections_are_tcp_nodelay(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = clusters  # proto IPPROTO_TCP on the listening socket: asyncio sets TCP_NODELAY
    server = dashboard.DashboardServer(make_app(write_kubeconfig(tmp_path / "c", {"a": a})), port=0)
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            await tg.start(server.serve)
            uv = server._server
            assert uv is not None
            await wait_until(lambda: uv.started, poll=0.01)  # the app starts before uvicorn
            listening = [sock for s in uv.servers for sock in s.sockets]
            assert listening and all(sock.proto == socket.IPPROTO_TCP for sock in listening)
            server.shutdown()


async def drain(stream: EventStream) -> None:
    while True:
        await stream.next()


# ---------------------------------------------------------------------- secrets and load
async def test_no_password_from_a_server_url(tmp_path: Path) -> None:
    async with FakeCluster() as dead:
        server = dead.server.replace("http://", "http://admin:hunter2@")
    path = write_kubeconfig(tmp_path / "config", {"dead": FakeContext(cluster=server)})
    async with api_client(path) as client:
        with anyio.fail_after(TIMEOUT):
            failed = await client.get("/api/contexts/dead/pods")
        assert failed.status_code == 503 and "hunter2" not in failed.text
        assert "http://***@127.0.0.1:" in failed.json()["error"]
        contexts = await client.get("/api/contexts")
        assert "hunter2" not in contexts.text
        assert contexts.json()["contexts"][0]["server"].startswith("http://***@127.0.0.1:")


async def test_create_app_serves_a_registry_it_does_not_own(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    from kubemux import WatcherRegistry

    a, b = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    async with WatcherRegistry.from_kubeconfig(str(path), **FAST) as registry:
        app = dashboard.create_app(registry)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                with anyio.fail_after(TIMEOUT):
                    listed = (await c.get("/api/contexts/dev/pods")).json()["items"]
                assert [p["metadata"]["name"] for p in listed] == ["db-1"]
        # the app's shutdown left the registry running
        with anyio.fail_after(TIMEOUT):
            assert len(await registry.watch("prod", "pods")) == 2
    with pytest.raises(TypeError, match="kubeconfig="):
        dashboard.create_app(str(path))  # type: ignore[arg-type]


async def test_streams_share_one_snapshot_and_the_cap_answers_503(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    app = make_app(path, max_streams=3)
    state = app.state.dashboard
    async with serving(app) as url, contextlib.AsyncExitStack() as stack:
        streams_open = [await stack.enter_async_context(event_stream(url)) for _ in range(3)]
        for stream in streams_open:
            await stream.until(lambda s=stream: s.names() == {"web-1", "web-2", "db-1"})
        # one encoding per context served every stream (the first may have raced the sync)
        assert state.snapshots.encodings <= 4
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            refused = await client.get("/api/stream")
            assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
            assert "too many event streams" in refused.json()["error"]
            assert (await client.get("/api/contexts")).status_code == 200
    assert state.streams == 0


async def test_a_client_that_stops_reading_is_dropped(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        for i in range(1500):  # a snapshot of some MB: more than the socket buffers hold
            c.create("pods", make_pod(f"p-{i:04d}", labels={"blob": "x" * 4000}))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        app = make_app(path, stream_send_timeout=0.5)
        state = app.state.dashboard
        async with serving(app) as url:
            port = int(url.rsplit(":", 1)[1].strip("/"))
            async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
                with anyio.fail_after(TIMEOUT):
                    await client.get("/api/contexts/prod/pods")  # synced
                sockets = []
                try:
                    for _ in range(4):  # connect, ask for the stream, never read
                        sock = socket.socket()
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                        sock.connect(("127.0.0.1", port))
                        sock.sendall(b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                        sockets.append(sock)
                    with anyio.fail_after(TIMEOUT):
                        await c.wait_for(lambda: state.streams == 4)
                        for i in range(1500, 1700):  # keep changes coming
                            c.create("pods", make_pod(f"p-{i:04d}"))
                        # the server stays responsive, and drops every stalled client
                        while state.streams:
                            assert (await client.get("/api/contexts")).status_code == 200
                            await anyio.sleep(0.1)
                finally:
                    for sock in sockets:
                        sock.close()


async def test_many_streams_at_once_leave_the_api_answering(tmp_path: Path) -> None:
    """A burst of streams (half never read) is admitted and fed; /api/contexts still answers."""
    n = 40
    async with FakeCluster() as c:
        for i in range(600):
            c.create("pods", make_pod(f"p-{i:04d}", size=1200))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        app = make_app(path, max_streams=4 * n, stream_send_timeout=TIMEOUT)
        state = app.state.dashboard
        synced = [anyio.Event() for _ in range(n)]
        fed = [anyio.Event() for _ in range(n)]

        async def read(port: int, index: int) -> None:
            stream = await anyio.connect_tcp("127.0.0.1", port)
            async with stream:
                await stream.send(b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                seen = b""
                while not fed[index].is_set():
                    seen = seen[-64:] + await stream.receive()
                    if b"event: synced" in seen:
                        synced[index].set()
                    if synced[index].is_set() and b'"name":"live-' in seen:
                        fed[index].set()

        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            port = int(url.rsplit(":", 1)[1].strip("/"))
            with anyio.fail_after(TIMEOUT):
                await client.get("/api/contexts/prod/pods")  # synced
            stalled = []
            try:
                async with anyio.create_task_group() as tg:
                    for i in range(n):  # all at once: n that never read, n that do
                        sock = socket.socket()
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                        sock.connect(("127.0.0.1", port))  # the backlog takes it at once
                        sock.sendall(b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                        stalled.append(sock)
                        tg.start_soon(read, port, i)
                    # while the streams start and are fed, the API answers, each time
                    i = 0
                    while not all(event.is_set() for event in fed):
                        c.create("pods", make_pod(f"live-{i}"))
                        i += 1
                        with anyio.fail_after(2):
                            answer = await client.get("/api/contexts")
                        assert answer.status_code == 200
                        assert answer.json()["contexts"][0]["name"] == "prod"
                        assert i < 500, "the streams were not fed"
                # the readers left (their streams ended), the stalled ones are still open
                with anyio.fail_after(TIMEOUT):
                    await c.wait_for(lambda: state.streams == n)
            finally:
                for sock in stalled:
                    sock.close()


# ---------------------------------------------------------------------- metrics
async def test_metrics_are_served_and_parse(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    a, b = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    async with api_client(path) as client:
        with anyio.fail_after(TIMEOUT):
            await client.get("/api/contexts/prod/pods")  # synced
        response = await client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples
        }
        assert samples[("kubemux_contexts", ())] == 2
        assert any(
            name.startswith("kubemux_") and ("context", "prod") in labels
            for name, labels in samples
        )
        assert "tok-a" not in response.text


async def test_metrics_of_a_mounted_app(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    """Mounted, the app has no lifespan: a scrape reports the registry all the same."""
    from kubemux import WatcherRegistry

    a, _ = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a})
    async with WatcherRegistry.from_kubeconfig(str(path), **FAST) as registry:
        app = dashboard.create_app(registry)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            first = await c.get("/metrics")
            second = await c.get("/metrics")  # registered for the scrape only: again fine
        assert first.status_code == second.status_code == 200
        assert "kubemux_contexts 1.0" in second.text


async def test_api_contexts_is_the_shared_status_json(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    """/api/contexts is RegistryStatus.to_json() (the CLI's -o json) plus derived fields."""
    a, b = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    app = make_app(path)
    async with app.router.lifespan_context(app):
        registry = app.state.dashboard.registry
        with anyio.fail_after(TIMEOUT):
            await registry.watch("prod", "pods")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            body = (await c.get("/api/contexts")).json()
        shared = orjson.loads(orjson.dumps(registry.status().to_json()))
    assert set(body) == set(shared)
    assert [ctx["name"] for ctx in body["contexts"]] == [ctx["name"] for ctx in shared["contexts"]]
    for mine, theirs in zip(body["contexts"], shared["contexts"], strict=True):
        assert set(mine) == set(theirs) | {"current", "objects", "last_sync"}
        for key in ("state", "generation", "cluster_name", "user_name", "namespace", "source"):
            assert mine[key] == theirs[key], key
        assert [i["resource"] for i in mine["informers"]] == [
            i["resource"] for i in theirs["informers"]
        ]
    prod = body["contexts"][0]
    assert prod["current"] and prod["objects"] == {"pods": 2} and prod["last_sync"]


# ---------------------------------------------------------------------- server columns
async def test_table_api_has_the_servers_columns(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    async with api_client(path) as client:
        with anyio.fail_after(TIMEOUT):
            table = await client.get("/api/contexts/prod/pods/table")
        assert table.status_code == 200, table.text
        body = table.json()
        names = [c["name"] for c in body["columns"]]
        assert names[:2] == ["Name", "Ready"] and "Status" in names
        assert [(r["namespace"], r["name"]) for r in body["rows"]] == [
            ("default", "web-1"),
            ("default", "web-2"),
        ]
        assert all(len(r["cells"]) == len(names) for r in body["rows"])
        assert body["rows"][0]["cells"][0] == "web-1"
        with anyio.fail_after(TIMEOUT):  # a short name, resolved by discovery
            deploys = await client.get("/api/contexts/prod/deploy/table")
        assert deploys.status_code == 200 and deploys.json()["resource"] == "deployments.apps"
        with anyio.fail_after(TIMEOUT):
            data = await client.get("/api/contexts/dev/pods/table?namespace=data")
        assert [r["name"] for r in data.json()["rows"]] == ["db-1"]


async def test_one_poisoned_row_spoils_neither_the_table_nor_the_stream(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    """A row with a 400-digit cell (issue 18): the table API answers, the live table keeps
    every context's rows and keeps going."""
    a, _ = clusters
    async with HostileServer("hostile-table", poison=("big-number",)) as bad:
        path = write_kubeconfig(tmp_path / "config", {"prod": a, "bad": bad.server})
        async with api_client(path) as client:
            with anyio.fail_after(TIMEOUT):
                table = await client.get("/api/contexts/bad/pods/table")
            assert table.status_code == 200, table.text
            rows = {r["name"]: r["cells"] for r in table.json()["rows"]}
            assert rows["big-number"] == ["big-number", "Running", 7, None]  # inf: JSON null
            assert {"p-0", "p-1", "p-2"} <= set(rows)
        async with served(path) as url, event_stream(url) as stream:
            await stream.until(
                lambda: {"web-1", "web-2", "big-number", "w-big", "w-after"} <= stream.names()
            )
            a.create("pods", make_pod("web-3"))  # the stream is still live for every context
            await stream.until(lambda: "web-3" in stream.names("prod"))
            assert stream.cell(("bad", "default", "p-0"), "Size") == 1


async def test_table_api_typo_and_resource_picker(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, _ = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a})
    async with api_client(path) as client:
        with anyio.fail_after(TIMEOUT):
            typo = await client.get("/api/contexts/prod/podz/table")
        assert typo.status_code == 404
        assert "podz" in typo.json()["error"] and "pods" in typo.json()["suggestions"]
        with anyio.fail_after(TIMEOUT):
            served = await client.get("/api/contexts/prod/resources")
        assert served.status_code == 200
        by_name = {r["name"]: r for r in served.json()["resources"]}
        assert by_name["pods"]["kind"] == "Pod" and by_name["pods"]["namespaced"]
        assert "po" in by_name["pods"]["short_names"]
        assert not by_name["namespaces"]["namespaced"]
        with anyio.fail_after(TIMEOUT):
            unknown = await client.get("/api/contexts/nope/resources")
        assert unknown.status_code == 404


# ---------------------------------------------------------------------- the live table's columns
def test_change_payload_of_a_table_row() -> None:
    row = {
        "cells": ["web-1", "1/1", "Running", 0, "5m"],
        "metadata": {
            "name": "web-1",
            "namespace": "default",
            "labels": {"app": XSS},
            "annotations": {views.LAST_APPLIED: "secret"},
            "creationTimestamp": "2025-01-01T00:00:00Z",
        },
    }
    change = Change("prod", "pods", "MODIFIED", row, view="table")
    assert views.change_payload(change) == {
        "type": "MODIFIED",
        "context": "prod",
        "namespace": "default",
        "name": "web-1",
        "row": {
            "cells": ["web-1", "1/1", "Running", 0, "5m"],
            "labels": {"app": XSS},
            "created": "2025-01-01T00:00:00Z",
        },
    }


def test_one_row_encoder_for_snapshots_and_live_changes() -> None:
    """Snapshot rows and live changes go through one encoder (issue 19): the cells joined
    as the server sent them, the same JSON as the general way, nothing of the metadata but
    labels and creation time; a row the fast way cannot take (a raw line break, labels
    that are not strings) takes the general way, one it cannot encode is skipped."""
    meta = {
        "name": "web-1",
        "namespace": "default",
        "labels": {"app": XSS},
        "annotations": {views.LAST_APPLIED: "secret"},
        "creationTimestamp": "2025-01-01T00:00:00Z",
    }
    raw = orjson.dumps({"cells": ["web-1", "1/1", 0, 1.5], "metadata": meta})
    expected = {
        "type": "ADDED",
        "context": "prod",
        "namespace": "default",
        "name": "web-1",
        "row": {
            "cells": ["web-1", "1/1", 0, 1.5],
            "labels": {"app": XSS},
            "created": "2025-01-01T00:00:00Z",
        },
    }
    snapshot = _rows.row_change("ADDED", "prod", raw)
    assert snapshot is not None and orjson.loads(snapshot) == expected
    assert b"secret" not in snapshot
    live = Change.from_entry(
        "prod", "pods", "ADDED", Entry("default", "web-1", "1", raw), 1, view="table"
    )
    assert _rows.change_bytes(live) == snapshot  # the same bytes, whichever way
    spaced = raw.replace(b'"1/1",', b'"1/1",\n')  # valid JSON, but not one SSE line
    odd = orjson.dumps(
        {"cells": ["web-1", "1/1", 0, 1.5], "metadata": {**meta, "labels": {"n": 5}}}
    )
    for other in (spaced, odd):
        got = _rows.row_change("ADDED", "prod", other)
        assert got is not None and b"\n" not in got and b"secret" not in got
        assert orjson.loads(got)["row"]["cells"] == ["web-1", "1/1", 0, 1.5]
    assert orjson.loads(_rows.row_change("ADDED", "prod", odd) or b"")["row"]["labels"] == {
        "n": "5"
    }
    assert _rows.row_change("ADDED", "prod", b'{"cells":[1],"metadata":\xff}') is None
    gone = Change("prod", "pods", "DELETED", None, view="table", namespace="default", name="x")
    assert orjson.loads(_rows.change_bytes(gone) or b"") == {
        "type": "DELETED",
        "context": "prod",
        "namespace": "default",
        "name": "x",
    }


def deployment(name: str, replicas: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}},
        },
        "status": {"replicas": replicas, "readyReplicas": 1, "availableReplicas": 1},
    }


async def test_stream_sends_each_contexts_columns_before_its_rows(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    a, b = clusters
    a.create("deployments.apps", deployment("web"))
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    async with served(path) as url:
        async with event_stream(url) as stream:
            await stream.until(lambda: stream.names() == {"web-1", "web-2", "db-1"})
            # every context's columns came before its first row
            for context in ("prod", "dev"):
                first_row = next(
                    i
                    for i, (e, d) in enumerate(stream.seen)
                    if e == "changes" and any(c["context"] == context for c in d)
                )
                assert any(
                    e == "columns" and d["context"] == context for e, d in stream.seen[:first_row]
                )
            assert stream.columns["prod"][:3] == ["Name", "Ready", "Status"]
            assert "Node" in stream.columns["prod"]  # wide columns come too, the page hides them
            for key, row in stream.rows.items():
                assert len(row["cells"]) == len(stream.columns[key[0]])
                assert set(row) == {"cells", "labels", "created"}
            assert stream.cell(("dev", "data", "db-1"), "Name") == "db-1"
            assert stream.cell(("dev", "data", "db-1"), "Status") == "Running"
            reset = next(d for e, d in stream.seen if e == "reset")
            assert reset["namespaced"] is True
        async with event_stream(url, "?resource=deployments.apps") as stream:
            await stream.until(lambda: stream.names() == {"web"})
            names = stream.columns["prod"]
            assert names[:4] == ["Name", "Ready", "Up-to-date", "Available"]
            assert "Status" not in names and "Restarts" not in names
            assert stream.cell(("prod", "default", "web"), "Ready") == "1/2"
            a.create("deployments.apps", deployment("api", replicas=3))
            await stream.until(lambda: stream.cell(("prod", "default", "api"), "Ready") == "1/3")
            # dev has no deployment, but its columns come all the same
            await stream.until(lambda: stream.columns.get("dev") == names)


async def test_stream_columns_differ_per_context_and_follow_the_server(tmp_path: Path) -> None:
    """A CRD with other printer columns in each cluster; one cluster edits them live."""
    size = {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}
    color = {"name": "Color", "type": "string", "jsonPath": ".spec.color"}
    async with FakeCluster() as a, FakeCluster() as b:
        a.add_crd("example.com", "widgets", "Widget", printer_columns=[size])
        b.add_crd("example.com", "widgets", "Widget", printer_columns=[color, size])
        a.create("widgets.example.com", {"metadata": {"name": "w1"}, "spec": {"size": 3}})
        b.create(
            "widgets.example.com",
            {"metadata": {"name": "w9", "namespace": "x"}, "spec": {"size": 9, "color": "red"}},
        )
        path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
        query = "?resource=widgets.v1.example.com"
        async with served(path) as url, event_stream(url, query) as stream:
            await stream.until(lambda: stream.names() == {"w1", "w9"})
            assert stream.columns == {"prod": ["Name", "Size"], "dev": ["Name", "Color", "Size"]}
            assert stream.cell(("prod", "default", "w1"), "Size") == 3
            assert stream.cell(("dev", "x", "w9"), "Color") == "red"
            # prod's columns change: its columns come again, and its rows with them (a
            # relist keeps an unchanged object's resourceVersion: no MODIFIED for w1)
            crd = a.get("customresourcedefinitions", None, "widgets.example.com")
            assert crd is not None
            crd["spec"]["versions"][0]["additionalPrinterColumns"] = [size, color]
            a.update("customresourcedefinitions", crd)
            a.drop_watches()  # the next watch's first event carries the new columns
            a.create(
                "widgets.example.com",
                {"metadata": {"name": "w2"}, "spec": {"size": 5, "color": "blue"}},
            )
            await stream.until(
                lambda: (
                    stream.columns["prod"] == ["Name", "Size", "Color"]
                    and stream.cell(("prod", "default", "w2"), "Color") == "blue"
                    and len(stream.rows[("prod", "default", "w1")]["cells"]) == 3
                )
            )
            assert stream.columns["dev"] == ["Name", "Color", "Size"]


async def test_stream_never_shows_a_secrets_values(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create(
            "secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "db",
                    "namespace": "default",
                    "labels": {"app": "db"},
                    "annotations": {views.LAST_APPLIED: '{"data":{"password":"aHVudGVyMg=="}}'},
                },
                "data": {"password": "aHVudGVyMg=="},
            },
        )
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with served(path) as url, event_stream(url, "?resource=secrets") as stream:
            await stream.until(lambda: stream.names() == {"db"})
            row = stream.rows[("prod", "default", "db")]
            assert row["labels"] == {"app": "db"} and row["cells"][0] == "db"
            assert "aHVudGVyMg" not in "\n".join(stream.raw)
            assert views.LAST_APPLIED not in "\n".join(stream.raw)


# ---------------------------------------------------------------------- pickers
async def test_api_resources_and_namespaces_of_every_context(tmp_path: Path) -> None:
    async with (
        FakeCluster(tokens={"admin"}) as a,
        FakeCluster(tokens={"admin", "jane"}) as b,
        FakeCluster() as dead,
    ):
        for ns in ("default", "web"):
            a.create("namespaces", {"metadata": {"name": ns}})
        for ns in ("default", "data", "secret-team"):
            b.create("namespaces", {"metadata": {"name": ns}})
        b.restrict("jane", user="jane", namespaces=["data"])
        a.add_crd("example.com", "widgets", "Widget")
        server = dead.server
    contexts: dict[str, Any] = {
        "prod": FakeContext(cluster=a, token="admin"),
        "dev": FakeContext(cluster=b, token="admin"),
        "jane": FakeContext(cluster=b, token="jane", namespace="data"),
        "dead": FakeContext(cluster=server),
    }
    async with a, b:
        path = write_kubeconfig(tmp_path / "config", contexts)
        async with api_client(path, sync_timeout=5) as client:

            async def answered(endpoint: str) -> httpx.Response:
                """The endpoint's answer once no context is pending (it answers at once
                with what it has, and asks the others in the background)."""
                found: list[httpx.Response] = []

                async def done() -> bool:
                    found[:] = [await client.get(endpoint)]
                    assert found[0].status_code == 200, found[0].text
                    return not found[0].json()["pending"]

                await wait_until(done, poll=0.05)
                return found[0]

            body = (await answered("/api/namespaces")).json()
            by_name = {n["name"]: n["contexts"] for n in body["namespaces"]}
            assert by_name == {
                "data": ["dev", "jane"],  # jane may not list namespaces: her own one
                "default": ["prod", "dev"],
                "secret-team": ["dev"],
                "web": ["prod"],
            }
            assert [n["name"] for n in body["namespaces"]] == sorted(by_name)
            assert set(body["errors"]) == {"jane", "dead"}
            assert body["errors"]["dead"].startswith(f"cannot reach {server}")
            answer = await answered("/api/resources")
            served = {r["name"]: r for r in answer.json()["resources"]}
            assert served["pods"]["contexts"] == ["prod", "dev", "jane"]
            assert served["widgets.example.com"]["contexts"] == ["prod"]
            assert served["pods"]["namespaced"] and not served["namespaces"]["namespaced"]
            assert answer.json()["resources"][0]["name"] == "pods"  # kubectl's order
            assert set(answer.json()["errors"]) == {"dead"}


async def test_stream_of_a_user_who_may_read_some_namespaces(tmp_path: Path) -> None:
    """A forbidden cluster-wide LIST: the table view of the user's namespaces, in every
    stream's snapshot (not only as the live rows of its first LIST)."""
    async with FakeCluster(tokens={"admin", "jane"}) as c:
        for ns in ("a", "b", "c"):
            c.create("pods", make_pod(f"{ns}-1", ns))
        c.restrict("jane", user="jane", namespaces=["a", "b"])
        contexts: dict[str, Any] = {
            "admin": FakeContext(cluster=c, token="admin"),
            "jane": FakeContext(cluster=c, token="jane"),
        }
        path = write_kubeconfig(tmp_path / "config", contexts)
        options = {**FAST, "namespaces": {"jane": ["a", "b"]}}
        async with served(path, registry_options=options) as url:
            async with event_stream(url) as first:
                await first.until(
                    lambda: first.names("jane") == {"a-1", "b-1"} and "jane" in first.columns
                )
                assert first.names("admin") == {"a-1", "b-1", "c-1"}
            async with event_stream(url) as second:  # the views run: all from the snapshot
                await second.until_event("synced")
                assert second.names("jane") == {"a-1", "b-1"}
                assert second.columns["jane"][:2] == ["Name", "Ready"]
                c.create("pods", make_pod("b-2", "b"))
                await second.until(lambda: second.names("jane") == {"a-1", "b-1", "b-2"})


async def test_the_live_resource_costs_each_cluster_one_watch(
    tmp_path: Path, clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    """The dashboard's autowatched resource is its table view: a page showing it opens no
    second (full-object) watch of the same resource."""
    a, b = clusters
    path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
    async with served(path) as url, event_stream(url) as stream:
        await stream.until(lambda: stream.names() == {"web-1", "web-2", "db-1"})
        with anyio.fail_after(TIMEOUT):
            for cluster in (a, b):
                await cluster.wait_for(lambda c=cluster: c.open_watches == 1)
        for cluster in (a, b):
            lists = [
                r
                for r in cluster.requests
                if r.path.endswith("/pods")
                and (not r.is_watch or r.query.get("sendInitialEvents") == "true")
            ]
            assert len(lists) == 1  # one LIST (the table view's), no full-object one


def test_each_app_keeps_its_own_encodings(tmp_path: Path) -> None:
    """Encoded changes and columns events are the app's, not the process's (two dashboards
    in one process share nothing, and one that is gone leaves nothing behind)."""
    path = write_kubeconfig(tmp_path / "config", {"prod": "http://127.0.0.1:9"})
    first, second = make_app(path).state.dashboard, make_app(path).state.dashboard
    assert first.encodings is not second.encodings
    assert first.stream_context.encodings is first.encodings
    resource = parse_resource("pods")
    columns = (TableColumn(name="Name", format="name"),)
    raw = first.encodings.columns_event("prod", resource, columns)
    assert first.encodings.columns_event("prod", resource, columns) is raw  # kept
    assert second.encodings.columns_event("prod", resource, columns) is not raw  # its own
