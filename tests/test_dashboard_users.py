"""The per-user dashboard (issue 33, ``create_app(user_tokens=True)``, ``kubemux dashboard
--user-tokens``) against FakeClusters enforcing RBAC: each user sees exactly what their own
token may list, in the JSON API and in the live streams; the API server's 403 word for
word; the session cookie; cross-site refusals; logging out; revocation and new grants
reaching an open stream within 2 s; a context refusing the token beside one that takes it.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx
import orjson
import pytest
import trustme

from kubemux._authz.authorizer import AuthorizerSettings
from kubemux._authz.user import User
from kubemux.cli import run
from kubemux.dashboard import _sessions, _viewer
from kubemux.dashboard._sessions import Sessions, cross_site, read_cookie, session_cookie
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from kubemux.testing._state.state import RBAC_RESOURCES
from support import TIMEOUT, wait_until
from test_cli import Output
from test_dashboard import EventStream, make_app, serving

RBAC = "rbac.authorization.k8s.io"
PODS_READ = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
SAME = {"Origin": "http://127.0.0.1"}


def binding(namespace: str, name: str, kind: str, role: str, user: str) -> dict[str, Any]:
    meta = {"namespace": namespace, "name": name} if namespace else {"name": name}
    return {
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role},
        "subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}],
    }


ALICE_BINDING = binding("web", "alice", "Role", "reader", "alice")


@pytest.fixture
async def prod() -> AsyncIterator[FakeCluster]:
    """alice reads pods in ``web``; carol views everything (``view``); bob nothing."""
    async with FakeCluster(tokens={"admin"}, rbac=True, name="prod") as c:
        c.create(
            RBAC_RESOURCES["roles"],
            {"metadata": {"namespace": "web", "name": "reader"}, "rules": [PODS_READ]},
        )
        c.create(RBAC_RESOURCES["rolebindings"], ALICE_BINDING)
        c.create(
            RBAC_RESOURCES["clusterrolebindings"],
            binding("", "carol", "ClusterRole", "view", "carol"),
        )
        for ns, names in (("web", ("web-0", "web-1")), ("db", ("db-0",)), ("other", ("o-0",))):
            c.create("namespaces", {"metadata": {"name": ns}})
            for name in names:
                c.create("pods", make_pod(name, ns))
        yield c


@contextlib.asynccontextmanager
async def app_client(
    path: Path, base_url: str = "http://127.0.0.1", **options: Any
) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(path, user_tokens=True, **options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
            yield client


async def log_in(client: httpx.AsyncClient, token: str, **headers: str) -> httpx.Response:
    origin = str(client.base_url).rstrip("/")
    sent = {"Origin": origin, **headers}
    return await client.post("/login", data={"token": token}, headers=sent)


async def upstream_403(cluster: FakeCluster, token: str, path: str) -> str:
    """What the API server itself answers ``token`` (its 403 message)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(cluster.server + path, headers={"Authorization": f"Bearer {token}"}) as resp,
    ):
        assert resp.status == 403
        message: str = (await resp.json())["message"]
        return message


async def namespaces(client: httpx.AsyncClient) -> Any:
    """``/api/namespaces`` once every context answered (the picker asks again likewise)."""
    answer: list[Any] = []

    async def answered() -> bool:
        answer[:] = [(await client.get("/api/namespaces")).json()]
        return not answer[0]["pending"]

    await wait_until(answered, poll=0.05)
    return answer[0]


async def read_to_the_end(stream: EventStream) -> None:
    while True:
        await stream.next()


def names(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return sorted(i["metadata"]["name"] for i in answer.json()["items"])


async def test_each_user_lists_exactly_what_rbac_allows(prod: FakeCluster, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    alice, bob, carol = (prod.add_user(n) for n in ("alice", "bob", "carol"))
    async with app_client(path) as client:
        # nothing without a session: the API 401s, a page goes to the login page
        assert (await client.get("/api/contexts/prod/pods")).status_code == 401
        page = await client.get("/")
        assert page.status_code == 303 and page.headers["location"] == "/login"
        assert (await client.get("/login")).status_code == 200
        answer = await log_in(client, alice)
        assert answer.status_code == 303, answer.text
        assert names(await client.get("/api/contexts/prod/pods")) == ["web-0", "web-1"]
        assert names(await client.get("/api/contexts/prod/pods?namespace=web")) == [
            "web-0",
            "web-1",
        ]
        # a denial is the API server's 403, word for word
        denied = await client.get("/api/contexts/prod/pods?namespace=db")
        assert denied.status_code == 403
        expected = await upstream_403(prod, alice, "/api/v1/namespaces/db/pods")
        assert denied.json()["error"] == expected
        assert expected.startswith('pods is forbidden: User "alice" cannot list resource "pods"')
        obj = await client.get("/api/contexts/prod/pods/db/db-0")
        assert obj.status_code == 403
        assert obj.json()["error"] == await upstream_403(
            prod, alice, "/api/v1/namespaces/db/pods/db-0"
        )
        # authorization before routing: a missing object she may not get is a 403 too
        missing = await client.get("/api/contexts/prod/pods/db/nope")
        assert missing.status_code == 403
        assert (await client.get("/api/contexts/prod/pods/web/web-0")).status_code == 200
        table = (await client.get("/api/contexts/prod/pods/table")).json()
        assert sorted(r["name"] for r in table["rows"]) == ["web-0", "web-1"]
        secrets = await client.get("/api/contexts/prod/secrets")
        assert secrets.status_code == 403
        assert secrets.json()["error"] == await upstream_403(prod, alice, "/api/v1/secrets")
        events = await client.get("/api/contexts/prod/events/pods/db/db-0")
        assert events.status_code == 403
        who = (await client.get("/api/session")).json()
        assert who["user"] == "alice" and who["contexts"] == {"prod": "alice"}
        # the namespace picker: she may not list namespaces, so those she may list pods in
        found = await namespaces(client)
        assert [n["name"] for n in found["namespaces"]] == ["web"]
        status = (await client.get("/api/contexts")).json()
        assert "secrets" not in str(status["contexts"][0]["objects"])

    async with app_client(path) as client:
        await log_in(client, carol)
        found = await namespaces(client)
        assert {"web", "db", "other"} <= {n["name"] for n in found["namespaces"]}
        assert names(await client.get("/api/contexts/prod/pods")) == [
            "db-0",
            "o-0",
            "web-0",
            "web-1",
        ]
    async with app_client(path) as client:
        await log_in(client, bob)
        denied = await client.get("/api/contexts/prod/pods")
        assert denied.status_code == 403
        assert denied.json()["error"] == await upstream_403(prod, bob, "/api/v1/pods")
        assert denied.json()["error"].endswith("at the cluster scope")


async def test_the_session_cookie_holds_no_token(
    prod: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    alice = prod.add_user("alice", ttl=3600)
    async with app_client(path) as client:
        answer = await log_in(client, alice)
        cookie = answer.headers["set-cookie"]
        assert cookie.startswith("kubemux_session=")
        attributes = {part.strip().split("=")[0] for part in cookie.split(";")[1:]}
        assert {"HttpOnly", "SameSite", "Path", "Max-Age"} <= attributes
        assert "SameSite=Strict" in cookie and "Secure" not in cookie  # plain HTTP
        max_age = int(cookie.split("Max-Age=")[1].split(";")[0])
        assert 3500 < max_age <= 3600  # the token's own expiry bounds the session
        assert alice not in cookie
        seen = [answer.text, cookie]
        for url in ("/api/session", "/api/contexts", "/", "/api/contexts/prod/pods"):
            seen.append((await client.get(url)).text)
        assert all(alice not in text for text in seen)
        assert alice not in caplog.text
        # a made-up or tampered session id is no session
        client.cookies.set("kubemux_session", "forged")
        assert (await client.get("/api/session")).status_code == 401
    # over TLS the cookie is Secure, with the __Host- prefix (bound to this origin)
    async with app_client(path, base_url="https://127.0.0.1") as client:
        cookie = (await log_in(client, alice)).headers["set-cookie"]
        assert cookie.startswith("__Host-kubemux_session=") and "; Secure" in cookie
        assert (await client.get("/api/session")).status_code == 200
        first = client.cookies["__Host-kubemux_session"]
        await log_in(client, alice)  # again: a new id, the old session gone
        assert client.cookies["__Host-kubemux_session"] != first
        client.cookies.set("__Host-kubemux_session", first)
        assert (await client.get("/api/session")).status_code == 401
    # a refused token gets the login page again, 401, and never sees itself
    async with app_client(path) as client:
        answer = await log_in(client, "not-a-token-" + "x" * 20)
        assert answer.status_code == 401 and "set-cookie" not in answer.headers
        assert "not-a-token" not in answer.text
        assert (await log_in(client, "")).status_code == 400
        huge = await client.post(
            "/login",
            content=b"token=" + b"a" * 300_000,
            headers={**SAME, "Content-Type": "application/x-www-form-urlencoded"},
        )
        assert huge.status_code == 413
        as_json = await client.post("/login", json={"token": alice}, headers=SAME)
        assert as_json.status_code == 415


async def test_cross_site_posts_are_refused(prod: FakeCluster, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    alice = prod.add_user("alice")
    async with app_client(path) as client:
        for headers in (
            {"Origin": "http://evil.example"},
            {"Origin": "http://127.0.0.1.evil.example"},
            {"Origin": "null"},  # opaque, and nothing else says where it is from
            {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
            {"Origin": "http://127.0.0.1", "Sec-Fetch-Site": "same-site"},
            {"Sec-Fetch-Site": "cross-site"},
        ):
            answer = await client.post("/login", data={"token": alice}, headers=headers)
            assert answer.status_code == 403, headers
            assert "set-cookie" not in answer.headers
        # Chromium's Origin: null on a same-origin form post: Sec-Fetch-Site decides
        answer = await client.post(
            "/login",
            data={"token": alice},
            headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"},
        )
        assert answer.status_code == 303
        # a cross-site logout leaves the session alone
        evil = await client.post("/logout", headers={"Origin": "http://evil.example"})
        assert evil.status_code == 403
        assert (await client.get("/api/session")).status_code == 200


async def test_logout_ends_the_session_and_its_streams(prod: FakeCluster, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    alice = prod.add_user("alice")
    async with (
        serving(make_app(path, user_tokens=True)) as url,
        httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
    ):
        origin = url.rstrip("/")
        await client.post("/login", data={"token": alice}, headers={"Origin": origin})
        session_id = client.cookies["kubemux_session"]
        async with client.stream("GET", "/api/stream?resource=pods") as response:
            stream = EventStream(response)
            await stream.until(lambda: stream.names() == {"web-0", "web-1"})
            answer = await client.post("/logout", headers={"Origin": origin})
            assert answer.status_code == 303 and answer.headers["location"] == "login"
            assert "Max-Age=0" in answer.headers["set-cookie"]
            with anyio.fail_after(TIMEOUT), pytest.raises((EOFError, httpx.ReadError)):
                await read_to_the_end(stream)  # the session is gone server-side
        # the old cookie, replayed, is no session any more
        client.cookies.set("kubemux_session", session_id)
        assert (await client.get("/api/session")).status_code == 401
        assert (await client.get("/api/stream")).status_code == 401


async def test_streams_show_each_user_their_objects_and_follow_revocation(
    prod: FakeCluster, tmp_path: Path
) -> None:
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    tokens = {n: prod.add_user(n) for n in ("alice", "bob", "carol")}
    async with (
        serving(make_app(path, user_tokens=True)) as url,
        contextlib.AsyncExitStack() as stack,
    ):
        streams: dict[str, EventStream] = {}
        for user, token in tokens.items():
            client = await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, timeout=TIMEOUT)
            )
            origin = url.rstrip("/")
            await client.post("/login", data={"token": token}, headers={"Origin": origin})
            response = await stack.enter_async_context(
                client.stream("GET", "/api/stream?resource=pods")
            )
            streams[user] = EventStream(response)
        alice, bob, carol = streams["alice"], streams["bob"], streams["carol"]
        await alice.until(lambda: alice.names() == {"web-0", "web-1"})
        await carol.until(lambda: carol.names() == {"web-0", "web-1", "db-0", "o-0"})
        await bob.until(lambda: "prod" in bob.contexts and bool(bob.contexts["prod"]["last_error"]))
        assert bob.names() == set()
        assert bob.contexts["prod"]["last_error"] == await upstream_403(
            prod, tokens["bob"], "/api/v1/pods"
        )
        assert "pods" not in bob.contexts["prod"]["objects"]  # not even how many
        # live changes: each sees the new pod only where they may list it
        prod.create("pods", make_pod("web-2", "web"))
        prod.create("pods", make_pod("db-1", "db"))
        await carol.until(lambda: {"web-2", "db-1"} <= carol.names())
        await alice.until(lambda: "web-2" in alice.names())
        assert "db-1" not in alice.names() and bob.names() == set()
        assert all(key[1] == "web" for key in alice.rows)

        # revocation: alice's rows leave her open stream within 2 s
        prod.delete(RBAC_RESOURCES["rolebindings"], "web", "alice")
        with anyio.fail_after(2.0):
            await alice.until(lambda: alice.names() == set())
        await alice.until(lambda: bool(alice.contexts["prod"]["last_error"]))
        assert alice.contexts["prod"]["last_error"].startswith(
            'pods is forbidden: User "alice" cannot list resource "pods"'
        )
        # a new grant reaches it within 2 s too
        prod.create(RBAC_RESOURCES["rolebindings"], ALICE_BINDING)
        with anyio.fail_after(2.0):
            await alice.until(lambda: alice.names() == {"web-0", "web-1", "web-2"})
        assert carol.names() >= {"web-0", "web-1", "web-2", "db-0", "db-1", "o-0"}


async def test_contexts_that_refuse_the_token_or_deny_leave_the_others(
    prod: FakeCluster, tmp_path: Path
) -> None:
    """Three contexts: ``prod`` lets alice list pods in ``web``; ``staging`` accepts her
    token (an OIDC token a fleet's clusters all accept) but grants her nothing; ``dev``
    does not know the token. prod's rows stream on, each other card says why."""
    async with (
        FakeCluster(tokens={"admin-dev"}, rbac=True, name="dev") as dev,
        FakeCluster(tokens={"admin-staging"}, rbac=True, name="staging") as staging,
    ):
        dev.create("pods", make_pod("dev-0", "web"))
        staging.create("pods", make_pod("stage-0", "web"))
        contexts = {"prod": prod, "staging": staging, "dev": dev}
        path = write_kubeconfig(tmp_path / "config", contexts)
        alice = prod.add_user("alice")
        staging.add_user("alice", token=alice)  # dev's API server does not know it
        denial = await upstream_403(staging, alice, "/api/v1/pods")
        async with app_client(path) as client:
            assert (await log_in(client, alice)).status_code == 303
            who = (await client.get("/api/session")).json()
            assert who["contexts"] == {"prod": "alice", "staging": "alice"}
            assert "401" in who["refused"]["dev"]
            assert names(await client.get("/api/contexts/prod/pods")) == ["web-0", "web-1"]
            refused = await client.get("/api/contexts/dev/pods")
            assert refused.status_code == 401
            denied = await client.get("/api/contexts/staging/pods")
            assert denied.status_code == 403 and denied.json()["error"] == denial
            status = (await client.get("/api/contexts")).json()
            by_name = {c["name"]: c for c in status["contexts"]}
            assert "401" in by_name["dev"]["last_error"] and by_name["dev"]["objects"] == {}
        async with (
            serving(make_app(path, user_tokens=True)) as url,
            httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
        ):
            await client.post("/login", data={"token": alice}, headers={"Origin": url.rstrip("/")})
            async with client.stream("GET", "/api/stream?resource=pods") as response:
                stream = EventStream(response)
                await stream.until(
                    lambda: (
                        stream.names() == {"web-0", "web-1"}
                        and all(
                            stream.contexts.get(c, {}).get("last_error") for c in ("dev", "staging")
                        )
                    )
                )
                assert "401" in stream.contexts["dev"]["last_error"]
                assert stream.contexts["staging"]["last_error"] == denial
                assert not stream.contexts["prod"]["last_error"]
                prod.create("pods", make_pod("web-9", "web"))  # prod stays live
                staging.create("pods", make_pod("stage-1", "web"))
                await stream.until(lambda: "web-9" in stream.names())
                # a grant in staging brings its rows, the others as they were
                staging.create(
                    RBAC_RESOURCES["clusterrolebindings"],
                    binding("", "al", "ClusterRole", "view", "alice"),
                )
                with anyio.fail_after(2.0):
                    await stream.until(lambda: stream.names("staging") == {"stage-0", "stage-1"})
                assert stream.names("prod") == {"web-0", "web-1", "web-9"}
                assert stream.names("dev") == set()


async def test_object_page_and_logs_as_the_user(prod: FakeCluster, tmp_path: Path) -> None:
    prod.create(
        RBAC_RESOURCES["roles"],
        {
            "metadata": {"namespace": "web", "name": "logs"},
            "rules": [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}],
        },
    )
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    alice = prod.add_user("alice")
    async with app_client(path) as client:
        await log_in(client, alice)
        # pods does not grant pods/log: the API server's 403, before any upstream request
        denied = await client.get("/api/contexts/prod/pods/web/web-0/log")
        assert denied.status_code == 403
        assert denied.json()["error"] == await upstream_403(
            prod, alice, "/api/v1/namespaces/web/pods/web-0/log"
        )
        prod.create(RBAC_RESOURCES["rolebindings"], binding("web", "al", "Role", "logs", "alice"))
        log = "/api/contexts/prod/pods/web/web-0/log"

        async def granted() -> bool:
            return (await client.get(log)).status_code != 403

        await wait_until(granted, poll=0.05)
        answer = await client.get(log)
        assert answer.status_code == 200, answer.text
    async with (
        serving(make_app(path, user_tokens=True)) as url,
        httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
    ):
        await client.post("/login", data={"token": alice}, headers={"Origin": url.rstrip("/")})
        query = "/api/stream?resource=pods&context=prod&namespace=db&name=db-0"
        async with client.stream("GET", query) as response:
            stream = EventStream(response)
            data = await stream.until_event("object")
            assert data["object"] is None
            assert data["gone"] == await upstream_403(
                prod, alice, "/api/v1/namespaces/db/pods/db-0"
            )
        query = "/api/stream?resource=pods&context=prod&namespace=web&name=web-0"
        async with client.stream("GET", query) as response:
            stream = EventStream(response)
            data = await stream.until_event("object")
            assert data["object"]["metadata"]["name"] == "web-0"
            prod.delete(RBAC_RESOURCES["rolebindings"], "web", "alice")
            with anyio.fail_after(2.0):
                while data["object"] is not None:  # (a context's RESET sends it again)
                    data = await stream.until_event("object")
            assert data["gone"] == await upstream_403(
                prod, alice, "/api/v1/namespaces/web/pods/web-0"
            )


async def test_without_user_tokens_nothing_changes(prod: FakeCluster, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    app = make_app(path)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            assert names(await client.get("/api/contexts/prod/pods")) == [
                "db-0",
                "o-0",
                "web-0",
                "web-1",
            ]
            assert (await client.get("/login")).status_code == 404
            assert (await client.get("/api/session")).json() == {"user": None}
            assert (await client.post("/logout")).status_code == 404


async def test_in_chromium_log_in_see_the_table_log_out(prod: FakeCluster, tmp_path: Path) -> None:
    """A real browser: the login form (Chromium posts it with ``Origin: null`` under the
    page's ``no-referrer`` policy: ``Sec-Fetch-Site`` decides), the user's table, who is
    logged in, and the Log out button."""
    from playwright.async_api import expect

    from test_dashboard_browser import PageWatch, browser, rows  # skips without Chromium

    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    alice = prod.add_user("alice")
    async with serving(make_app(path, user_tokens=True)) as url, browser() as chromium:
        page = await chromium.new_page()
        watch = PageWatch(page)
        await page.goto(url)
        await expect(page).to_have_url(url + "login")
        await page.fill("#token", alice)
        await page.click("#login")
        await expect(page).to_have_url(url)
        await expect(rows(page)).to_have_count(2)
        await expect(rows(page, "prod").first).to_contain_text("web-")
        await expect(page.locator("#who")).to_have_text("alice")
        await expect(page.locator("#logout")).to_be_visible()
        cookies = await page.context.cookies()
        assert [c["httpOnly"] and c["sameSite"] for c in cookies] == ["Strict"]
        assert alice not in await page.content()
        await page.click("#logout")
        await expect(page).to_have_url(url + "login")
        assert await page.context.cookies() == []
        await page.goto(url)  # the session is gone: back to the login page
        await expect(page).to_have_url(url + "login")
        watch.check()


# ---------------------------------------------------------------------- sessions, no I/O
def test_sessions_are_bounded_and_expire() -> None:
    now = [1000.0]
    sessions = Sessions(max_sessions=3, max_per_user=2, ttl=60.0, clock=lambda: now[0])
    alice, bob = User("alice"), User("bob")
    first = sessions.add("t1", {"prod": alice}, {}, set())
    second = sessions.add("t2", {"prod": alice}, {}, set())
    assert first is not None and second is not None
    third = sessions.add("t3", {"prod": alice}, {}, set())  # alice's oldest goes
    assert third is not None and sessions.get(first[0]) is None and len(sessions) == 2
    assert first[1].ended
    assert sessions.add("t4", {"prod": bob}, {}, set()) is not None
    assert sessions.add("t5", {"dev": User("carol")}, {}, set()) is None  # full: refused
    assert sessions.get(second[0]) is second[1]
    now[0] += 61  # past the ttl: gone, and room again
    assert sessions.get(second[0]) is None
    assert sessions.add("t5", {"dev": User("carol")}, {}, set()) is not None
    for bad in (None, "", "x" * 300, "forged"):
        assert sessions.get(bad) is None
    assert "t5" not in repr(sessions) + repr(sessions._items)  # never the token
    # a JWT's exp bounds the session
    exp = int(time.time()) + 10
    payload = base64.urlsafe_b64encode(orjson.dumps({"exp": exp})).decode().rstrip("=")
    added = sessions.add(f"e30.{payload}.sig", {"prod": bob}, {}, set())
    assert added is not None and 8 < sessions.seconds_left(added[1]) <= 10
    with pytest.raises(ValueError, match="must be positive"):
        Sessions(max_sessions=0)


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ({}, False),  # no browser: curl, a script
        ({"origin": "http://dash.example:8000"}, False),
        ({"origin": "https://dash.example:8000"}, False),  # behind a TLS proxy
        ({"origin": "null", "sec-fetch-site": "same-origin"}, False),
        ({"sec-fetch-site": "none"}, False),  # typed or bookmarked
        # Host rewritten by a reverse proxy: the browser's Sec-Fetch-Site still says it
        ({"origin": "https://dash.corp.example", "sec-fetch-site": "same-origin"}, False),
        ({"origin": "http://evil.example"}, True),
        ({"origin": "http://dash.example:8001"}, True),
        ({"origin": "http://dash.example:8000/path"}, True),
        ({"origin": "javascript:alert(1)"}, True),
        ({"origin": "http://dash.example:8000\r\nx: y"}, True),
        ({"origin": "null"}, True),
        ({"origin": ""}, True),
        ({"sec-fetch-site": "same-site"}, True),
        ({"sec-fetch-site": "cross-site", "origin": "http://dash.example:8000"}, True),
        ({"sec-fetch-site": "x" * 10_000}, True),
    ],
)
def test_cross_site_rules(headers: dict[str, str], refused: bool) -> None:
    assert (cross_site(headers, "dash.example:8000") is not None) is refused


def test_cookies_from_hostile_headers() -> None:
    assert read_cookie("kubemux_session=abc") == "abc"
    assert read_cookie("a=b; __Host-kubemux_session=xyz") == "xyz"
    for bad in ("", "kubemux_session", '"; kubemux_session', "x" * 20_000, "=;=;="):
        assert read_cookie(bad) is None
    assert session_cookie("id", 0.2, secure=False).startswith(
        "kubemux_session=id; Path=/; Max-Age=1"
    )


async def test_a_session_ends_with_its_token(prod: FakeCluster, tmp_path: Path) -> None:
    """A token that expires (a JWT's ``exp``) ends the session and its open stream."""
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    brief = prod.add_user("alice", ttl=3)
    async with (
        serving(make_app(path, user_tokens=True)) as url,
        httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
    ):
        answer = await client.post("/login", data={"token": brief}, headers={"Origin": url[:-1]})
        assert answer.status_code == 303
        assert int(answer.headers["set-cookie"].split("Max-Age=")[1].split(";")[0]) <= 3
        async with client.stream("GET", "/api/stream?resource=pods") as response:
            # (on a loaded machine the 3 s may be over already: then a 401)
            assert response.status_code in (200, 401)
            if response.status_code == 200:
                stream = EventStream(response)
                with anyio.fail_after(TIMEOUT), pytest.raises((EOFError, httpx.ReadError)):
                    await read_to_the_end(stream)  # the session's end ends it
        assert (await client.get("/api/session")).status_code == 401


async def test_cli_user_tokens_over_tls(prod: FakeCluster, tmp_path: Path) -> None:
    """``kubemux dashboard --user-tokens --tls-cert-file ... --tls-private-key-file ...``."""
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    alice = prod.add_user("alice")
    out = Output()
    argv = [
        "dashboard",
        "--kubeconfig",
        str(path),
        "--port",
        "0",
        "--user-tokens",
        "--tls-cert-file",
        str(cert),
        "--tls-private-key-file",
        str(key),
    ]
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(run, argv, stdout=out))
        url = (await out.wait_for(r"open (https://127\.0\.0\.1:\d+/)")).group(1)
        ssl_context = ssl.create_default_context()
        ca.configure_trust(ssl_context)
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT, verify=ssl_context) as client:
            assert (await client.get("/api/contexts")).status_code == 401
            answer = await client.post(
                "/login", data={"token": alice}, headers={"Origin": url[:-1]}
            )
            cookie = answer.headers["set-cookie"]
            assert cookie.startswith("__Host-kubemux_session=") and "; Secure" in cookie
            assert names(await client.get("/api/contexts/prod/pods")) == ["web-0", "web-1"]
        tg.cancel_scope.cancel()
    assert "each user logs in with their own token" in out.getvalue()
    assert alice not in out.getvalue()
    errors = io.StringIO()  # a certificate without its key
    assert await run([*argv[:-2]], stdout=Output(), stderr=errors) != 0
    assert "--tls-cert-file and --tls-private-key-file go together" in errors.getvalue()


async def test_a_token_the_cluster_stops_accepting_ends_the_session(
    prod: FakeCluster, tmp_path: Path
) -> None:
    """When its cached TokenReview answer expires, a revoked token is reviewed again: the
    session ends, and its open stream with it."""
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    alice = prod.add_user("alice")
    app = make_app(path, user_tokens=True, authorizer_settings=AuthorizerSettings(token_ttl=0.3))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
        await client.post("/login", data={"token": alice}, headers={"Origin": url[:-1]})
        async with client.stream("GET", "/api/stream?resource=pods") as response:
            stream = EventStream(response)
            await stream.until(lambda: stream.names() == {"web-0", "web-1"})
            assert prod.revoke_token(alice)
            with anyio.fail_after(TIMEOUT), pytest.raises((EOFError, httpx.ReadError)):
                await read_to_the_end(stream)
        assert (await client.get("/api/session")).status_code == 401
        assert len(app.state.dashboard.sessions) == 0


@pytest.mark.parametrize(
    ("body", "kind", "status"),
    [
        (b"token=%ff%fe", "application/x-www-form-urlencoded", 400),  # not UTF-8
        (b"token=a&token=b", "application/x-www-form-urlencoded", 400),
        (b"&".join(b"f%d=1" % i for i in range(20)), "application/x-www-form-urlencoded", 400),
        ("token=é".encode(), "application/x-www-form-urlencoded", 400),
        (b"token=a%0Ab%1b", "application/x-www-form-urlencoded", 401),  # no review sent
        (b"token=" + b"t" * 70_000, "application/x-www-form-urlencoded", 401),  # over 64 KiB
        (b"token=abc", "text/plain", 415),
        (b"token=abc", "", 415),
    ],
)
async def test_hostile_login_forms(
    prod: FakeCluster, tmp_path: Path, body: bytes, kind: str, status: int
) -> None:
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    async with app_client(path) as client:
        headers = {**SAME, "Content-Type": kind} if kind else SAME
        answer = await client.post("/login", content=body, headers=headers)
        assert answer.status_code == status
        assert "set-cookie" not in answer.headers
        assert "<script" not in answer.text


async def test_streams_per_session_are_capped(
    prod: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sessions, "STREAMS_PER_SESSION", 2)
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    carol, alice = prod.add_user("carol"), prod.add_user("alice")  # carol may read logs
    async with (
        serving(make_app(path, user_tokens=True)) as url,
        httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as a,
        httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as c,
    ):
        for client, token in ((a, carol), (c, alice)):
            await client.post("/login", data={"token": token}, headers={"Origin": url[:-1]})
        async with a.stream("GET", "/api/stream"), a.stream("GET", "/api/stream"):
            third = await a.get("/api/stream")
            assert third.status_code == 503 and "one session" in third.json()["error"]
            logs = await a.get("/api/contexts/prod/pods/web/web-0/log")
            assert logs.status_code == 503
            async with c.stream("GET", "/api/stream") as other:  # another session: its own
                assert other.status_code == 200

        async def room_again() -> bool:  # once the server has seen the two streams end
            async with a.stream("GET", "/api/stream") as again:
                return again.status_code == 200

        await wait_until(room_again, poll=0.05)


async def test_no_path_slips_past_the_login(prod: FakeCluster, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", {"prod": prod})
    async with app_client(path) as client:
        for url in (
            "/static/../api/contexts/prod/pods",
            "/static/%2e%2e/api/contexts/prod/pods",
            "/static%2F..%2Fapi/contexts/prod/pods",
            "/login/../api/contexts/prod/pods",
            "//api/contexts/prod/pods",
            "/api/contexts/prod/pods/",
            "/API/contexts/prod/pods",
            "/metrics",
            "/object?context=prod&resource=pods&namespace=web&name=web-0",
        ):
            answer = await client.get(url)
            assert answer.status_code in (303, 401, 404), url
            assert "web-0" not in answer.text and "resourceVersion" not in answer.text, url
        for key, value in (("kubemux_session", "a" * 300), ("__Host-kubemux_session", "x")):
            client.cookies.set(key, value)
            assert (await client.get("/api/contexts")).status_code == 401


async def test_a_context_that_does_not_answer_holds_no_login(
    prod: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster that accepts connections and never answers: the login waits
    ``LOGIN_WAIT`` at most, and the other contexts serve the user meanwhile."""
    monkeypatch.setattr(_viewer, "LOGIN_WAIT", 0.5)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections wait in the backlog, never answered
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        contexts = {"prod": prod, "stuck": FakeContext(cluster=url, token="x")}
        path = write_kubeconfig(tmp_path / "config", contexts)
        alice = prod.add_user("alice")
        async with app_client(path) as client:

            async def logged_in() -> bool:  # a 503 while prod's RBAC informers sync
                return (await log_in(client, alice)).status_code == 303

            await wait_until(logged_in)
            who = (await client.get("/api/session")).json()
            assert who["contexts"] == {"prod": "alice"}
            assert "could not check the token" in who["refused"]["stuck"]
            assert names(await client.get("/api/contexts/prod/pods")) == ["web-0", "web-1"]
