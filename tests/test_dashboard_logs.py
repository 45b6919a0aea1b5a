"""Logs on the dashboard's object page: the API (bounded, the server's errors) and the page in
a real browser (headless Chromium, as tests/test_dashboard_browser.py drives it)."""

from __future__ import annotations

import socket
import urllib.parse
from pathlib import Path
from typing import Any

import anyio
import httpx
import yaml

from kubemux.dashboard._logs import TAIL_MAX
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from support import TIMEOUT, wait_until
from test_dashboard import make_app, served, serving
from test_dashboard_browser import WAIT_MS, XSS, PageWatch, browser, expect, object_url


def pod_with_containers() -> dict[str, Any]:
    pod = make_pod("web-1")
    pod["spec"]["initContainers"] = [{"name": "migrate", "image": "migrate:2"}]
    pod["spec"]["containers"].append({"name": "sidecar", "image": "sidecar:1"})
    return pod


async def test_log_api_caps_the_tail_and_answers_the_servers_errors(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create("pods", pod_with_containers())
        c.append_log("default", "web-1", "".join(f"line {i}\n" for i in range(TAIL_MAX + 50)))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with served(path) as url, httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            base = "/api/contexts/prod/pods/default/web-1/log"
            answer = await client.get(base, params={"container": "app", "tailLines": "999999"})
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/plain")
            lines = answer.text.splitlines()
            assert len(lines) == TAIL_MAX and lines[-1] == f"line {TAIL_MAX + 49}"
            answer = await client.get(base, params={"container": "app", "tailLines": "3"})
            assert answer.text == "".join(
                f"line {i}\n" for i in range(TAIL_MAX + 47, TAIL_MAX + 50)
            )
            # the server's refusals, with its words
            answer = await client.get(base, params={"container": "app", "previous": "1"})
            assert answer.status_code == 400
            assert answer.json()["error"] == (
                'previous terminated container "app" in pod "web-1" not found'
            )
            answer = await client.get(base, params={"container": "nope"})
            assert answer.status_code == 400 and "nope" in answer.json()["error"]
            answer = await client.get("/api/contexts/prod/pods/default/gone/log")
            assert answer.status_code == 404
            answer = await client.get("/api/contexts/nowhere/pods/default/web-1/log")
            assert answer.status_code == 404 and "nowhere" in answer.json()["error"]


async def test_log_stream_follows_and_ends_with_the_client(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create("pods", make_pod("web-1"))
        c.append_log("default", "web-1", "first\n")
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with served(path) as url, httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            await client.get("/api/contexts/prod/pods")  # the context runs, its watch is open
            before = c.open_connections
            query = urllib.parse.urlencode({"follow": "1"})
            async with client.stream(
                "GET", f"/api/contexts/prod/pods/default/web-1/log?{query}"
            ) as response:
                lines = response.aiter_lines()
                with anyio.fail_after(TIMEOUT):
                    assert await anext(lines) == "first"
                    c.append_log("default", "web-1", "second\n")
                    assert await anext(lines) == "second"
                assert c.open_connections == before + 1
                assert c.request_count("get", "pods", subresource="log") == 1
            # the client left: the request upstream ends too
            await wait_until(lambda: c.open_connections == before)


async def test_a_log_request_carries_the_contexts_refreshed_credential(tmp_path: Path) -> None:
    """The log is asked with the context's own credential, refreshed as the informers' is
    (a token file rewritten: the 401 rereads it, the request goes again), no restart."""
    token_file = tmp_path / "token"
    token_file.write_text("one\n")
    async with FakeCluster(tokens={"one"}) as c:
        c.create("pods", make_pod("web-1"))
        c.append_log("default", "web-1", "hello\n")
        path = tmp_path / "config"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": c.server}}],
            "users": [{"name": "u", "user": {"tokenFile": str(token_file)}}],
            "contexts": [{"name": "prod", "context": {"cluster": "c", "user": "u"}}],
        }
        path.write_text(yaml.safe_dump(config))
        async with served(path) as url, httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            await client.get("/api/contexts/prod/pods")  # the context runs with "one"
            token_file.write_text("two\n")
            c.tokens.clear()
            c.tokens.add("two")
            answer = await client.get("/api/contexts/prod/pods/default/web-1/log")
            assert answer.status_code == 200 and answer.text == "hello\n"
            asked = [r.token for r in c.requests if r.subresource == "log"]
            assert asked == ["one", "two"]


async def test_a_log_reader_that_takes_nothing_is_cut_off(tmp_path: Path) -> None:
    """A browser that stops reading a followed log holds one chunk here, never the log: its
    stream is cut off after ``stream_send_timeout``, the request upstream with it."""
    async with FakeCluster() as c:
        c.create("pods", make_pod("web-1"))
        # 10,000 lines of 1 kB: more than the socket buffers on the way hold
        c.append_log("default", "web-1", f"{'x' * 1000}\n" * TAIL_MAX)
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        app = make_app(path, stream_send_timeout=0.5)
        state = app.state.dashboard
        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            await client.get("/api/contexts/prod/pods")  # the context runs, its watch is open
            before = c.open_connections
            port = int(url.rsplit(":", 1)[1].strip("/"))
            with socket.socket() as sock:  # asks for the log, never reads
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(("127.0.0.1", port))
                query = f"follow=1&tailLines={TAIL_MAX}"
                sock.sendall(
                    f"GET /api/contexts/prod/pods/default/web-1/log?{query} HTTP/1.1\r\n"
                    "Host: 127.0.0.1\r\n\r\n".encode()
                )
                await wait_until(lambda: c.open_connections == before + 1)
                await wait_until(lambda: state.streams == 0 and c.open_connections == before)
            assert (await client.get("/api/contexts")).status_code == 200


async def test_object_page_shows_logs_as_text_following(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create("pods", pod_with_containers())
        c.append_log("default", "web-1", f"started\n\x1b[31mred\x1b[0m alert\n{XSS}\n")
        c.append_log("default", "web-1", "sidecar says hi\n", container="sidecar")
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with served(path) as url, browser() as chromium:
            page = await chromium.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(WAIT_MS)
            watch = PageWatch(page)
            await page.goto(object_url(url, "prod", "pods", "default", "web-1"))
            log = page.locator("#log")
            await expect(log).to_have_text(f"started\nred alert\n{XSS}\n")  # as text, no codes
            assert await page.locator("img").count() == 0
            # the picker: the pod's containers, init first; the first main one is shown
            picker = page.locator("#log-container option")
            await expect(picker).to_have_text(["migrate (init)", "app", "sidecar"])
            await expect(page.locator("#log-container")).to_have_value("app")
            await expect(page.locator("#log-state")).to_have_text("following")
            # following: a new line arrives
            c.append_log("default", "web-1", "later\n")
            await expect(log).to_contain_text("later")
            # another container
            await page.select_option("#log-container", "sidecar")
            await expect(log).to_have_text("sidecar says hi\n")
            # the previous container: the server's answer, as text
            await page.check("#log-previous")
            await expect(log).to_have_text(
                'previous terminated container "sidecar" in pod "web-1" not found'
            )
            # (Chromium logs the 400 on the console: the one error expected here)
            watch.errors.remove(
                "console: Failed to load resource: the server responded with a status of 400 "
                "(Bad Request)"
            )
            await page.uncheck("#log-previous")
            await expect(log).to_have_text("sidecar says hi\n")
            # the container restarts: the stream followed ends, its log is the previous one
            c.restart_container("default", "web-1", container="sidecar")
            await expect(page.locator("#log-state")).to_have_text("the log ended")
            c.append_log("default", "web-1", "sidecar again\n", container="sidecar")
            await page.check("#log-previous")
            await expect(log).to_have_text("sidecar says hi\n")
            await page.uncheck("#log-previous")
            await expect(log).to_have_text("sidecar again\n")
            # a huge log: the page keeps the last MiB, whole lines, the newest at the end
            await page.select_option("#log-container", "app")
            await page.select_option("#log-tail", "10000")
            await expect(log).to_contain_text("later")
            c.append_log("default", "web-1", "".join(f"{i:06d} {'x' * 200}\n" for i in range(8000)))
            await expect(log).to_contain_text(f"{7999:06d} ")
            await expect(log.locator(".log-dropped")).to_contain_text("older lines dropped")
            size = await log.evaluate("el => el.textContent.length")
            assert size <= (1 << 20) + 200
            kept = await log.evaluate("el => el.lastChild.textContent.split('\\n').slice(-3)")
            assert kept[-1] == "" and kept[-2].startswith("007999 ")
            watch.check()
