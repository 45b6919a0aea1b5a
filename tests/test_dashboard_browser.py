"""The dashboard in a real browser: headless Chromium driven by Playwright.

Needs Debian's ``chromium`` (``/usr/bin/chromium``) and the ``playwright`` package (never
``playwright install``: the system browser is used). Without them the tests are skipped,
except in CI (``CI=true``), where they must run.

``KUBEMUX_SCREENSHOT=docs/dashboard.png pytest tests/test_dashboard_browser.py`` also
takes the docs' screenshots (the table, an object page, the dark theme), of a simulated
workload like ``kubemux demo``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest

from kubemux.dashboard.views import summarize
from kubemux.testing import (
    FakeCluster,
    FakeContext,
    make_event,
    make_pod,
    set_pod_state,
    simulate_workload,
    write_kubeconfig,
)

CHROMIUM = os.environ.get("KUBEMUX_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 10_000
XSS = "<img src=x onerror=alert(1)>"


def _missing() -> str | None:
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed"
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"no chromium at {CHROMIUM}"
    return None


if (_why := _missing()) is not None and os.environ.get("CI") != "true":
    pytest.skip(_why, allow_module_level=True)

from playwright.async_api import Browser, Page, async_playwright, expect

from support import TIMEOUT
from test_dashboard import make_app, serving

pytestmark = pytest.mark.browser
expect.set_options(timeout=WAIT_MS)


@contextlib.asynccontextmanager
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        with anyio.fail_after(TIMEOUT):
            chromium = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


class PageWatch:
    """Fails the test on a JavaScript error or any dialog (``alert(1)`` from an XSS)."""

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        page.on("dialog", self._dialog)
        page.on(
            "console",
            lambda msg: self.errors.append(f"console: {msg.text}") if msg.type == "error" else None,
        )

    async def _dialog(self, dialog: Any) -> None:
        self.errors.append(f"dialog: {dialog.message}")
        await dialog.dismiss()

    def check(self) -> None:
        assert self.errors == []


def rows(page: Page, context: str | None = None) -> Any:
    selector = "#rows tbody tr"
    if context is not None:
        selector += f'[data-context="{context}"]'
    return page.locator(selector)


async def test_live_table_follows_clusters_and_kubeconfig(tmp_path: Path) -> None:
    async with (
        FakeCluster(tokens={"tok-prod"}) as prod,
        FakeCluster(tokens={"tok-dev"}) as dev,
        FakeCluster(tokens={"tok-staging"}) as staging,
    ):
        prod.create("pods", make_pod("web-1"))
        prod.create("pods", make_pod("web-2", "web"))
        dev.create("pods", make_pod("api-1"))
        evil = make_pod("evil-1", labels={"app": XSS}, node=XSS)
        evil["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": XSS}}
        evil = staging.create("pods", evil)
        staging.create("events.events.k8s.io", make_event(evil, reason="BackOff", note=XSS))
        contexts: dict[str, Any] = {"prod": prod, "dev": dev, "staging": staging}
        path = write_kubeconfig(tmp_path / "config", contexts)
        app = make_app(path)
        async with serving(app) as url, browser() as chromium:
            page = await chromium.new_page(viewport={"width": 1300, "height": 900})
            page.set_default_timeout(WAIT_MS)
            watch = PageWatch(page)
            await page.goto(url)

            # pods from three contexts, and the contexts panel
            await expect(rows(page)).to_have_count(4)
            for name, count in (("prod", 2), ("dev", 1), ("staging", 1)):
                await expect(rows(page, name)).to_have_count(count)
            await expect(page.locator("#contexts .card")).to_have_count(3)
            await expect(page.locator('.card[data-context="prod"] .state')).to_have_text("running")
            await expect(page.locator("#conn")).to_have_text("live")
            await page.evaluate("window.__noReload = true")

            # cluster data is text, never markup (Node is a wide column: shown on demand)
            evil_row = rows(page, "staging")
            await expect(evil_row.locator(".col-status")).to_have_text(XSS)
            await expect(evil_row.locator(".col-node")).to_have_count(0)
            await page.check("#wide")
            await expect(evil_row.locator(".col-node")).to_have_text(XSS)
            await page.uncheck("#wide")
            await expect(evil_row.locator(".col-node")).to_have_count(0)
            assert await page.locator("img").count() == 0

            # rows appear, change and vanish as the clusters change
            prod.create("pods", make_pod("web-3"))
            await expect(rows(page, "prod")).to_have_count(3)
            pod = prod.get("pods", "default", "web-1")
            assert pod is not None
            pod["status"]["phase"] = "Pending"
            prod.update("pods", pod)
            web1 = rows(page, "prod").filter(has_text="web-1")
            await expect(web1.locator(".col-status")).to_have_text("Pending")
            dev.delete("pods", "default", "api-1")
            await expect(rows(page, "dev")).to_have_count(0)

            # the text filter
            await page.fill("#filter", "web")
            await expect(page.locator("#rows tbody tr:visible")).to_have_count(3)
            await expect(page.locator("#count")).to_have_text("3 of 4 pods")
            await page.fill("#filter", "")
            await expect(page.locator("#rows tbody tr:visible")).to_have_count(4)

            # a context removed from the kubeconfig: its card and rows go, no reload
            del contexts["staging"]
            write_kubeconfig(path, contexts)
            await expect(rows(page, "staging")).to_have_count(0)
            await expect(page.locator("#contexts .card")).to_have_count(2)
            await expect(page.locator("#activity")).to_contain_text("context staging removed")
            # ... and one added
            contexts["qa"] = dev
            write_kubeconfig(path, contexts)
            dev.create("pods", make_pod("api-2"))
            await expect(rows(page, "qa")).to_have_count(1)
            await expect(rows(page, "dev")).to_have_count(1)
            await expect(page.locator("#activity")).to_contain_text("context qa added")
            # ... and one reloaded (new credentials): its rows come back from the new generation
            prod.tokens.add("rotated")
            contexts["prod"] = FakeContext(cluster=prod, token="rotated")
            write_kubeconfig(path, contexts)
            await expect(page.locator("#activity")).to_contain_text("context prod reloaded")
            await expect(rows(page, "prod")).to_have_count(3)
            assert await page.evaluate("window.__noReload") is True
            watch.check()


async def test_object_page_shows_events_as_text(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        pod = c.create("pods", make_pod("evil-1", labels={"app": XSS}))
        c.create("events.events.k8s.io", make_event(pod, reason="BackOff", note=XSS, seq=1))
        path = write_kubeconfig(tmp_path / "config", {"staging": c})
        async with serving(make_app(path)) as url, browser() as chromium:
            page = await chromium.new_page()
            page.set_default_timeout(WAIT_MS)
            watch = PageWatch(page)
            await page.goto(url)
            await page.click("text=evil-1")
            await page.wait_for_url("**/object?**")
            await expect(page.locator("#obj-title")).to_have_text("default/evil-1")
            message = page.locator("#events tbody tr .ev-message")
            await expect(message).to_have_text(XSS)
            await expect(page.locator("#obj-summary .chip")).to_have_text(f"app={XSS}")
            assert await page.locator("img").count() == 0
            # live: a new event arrives, the pod goes away
            c.create("events.events.k8s.io", make_event(pod, reason="Killing", note="bye", seq=2))
            await expect(page.locator("#events tbody tr")).to_have_count(2)
            c.delete("pods", "default", "evil-1")
            await expect(page.locator("#obj-gone")).to_be_visible()
            watch.check()


def object_url(url: str, context: str, resource: str, namespace: str, name: str) -> str:
    query = urllib.parse.urlencode(
        {"context": context, "resource": resource, "namespace": namespace, "name": name}
    )
    return f"{url}object?{query}"


async def test_object_page_yaml_owner_links_and_containers(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        pod = make_pod("web-1", labels={"app": XSS}, node="node-7")
        pod["metadata"]["ownerReferences"].append(
            {"apiVersion": "example.com/v1", "kind": "Widget", "name": XSS, "uid": "u"}
        )
        pod["spec"]["initContainers"] = [{"name": "migrate", "image": "migrate:2"}]
        pod["status"]["initContainerStatuses"] = [
            {
                "name": "migrate",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
            }
        ]
        pod["spec"]["containers"].append({"name": "sidecar", "image": XSS})
        pod["status"]["containerStatuses"].append(
            {
                "name": "sidecar",
                "ready": False,
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": XSS}},
            }
        )
        c.create("pods", pod)
        owner = pod["metadata"]["ownerReferences"][0]["name"]
        c.create("replicasets.apps", {"metadata": {"name": owner, "namespace": "default"}})
        c.create("nodes", {"metadata": {"name": "node-7", "labels": {"zone": "eu-1"}}})
        c.create("secrets", {"metadata": {"name": "db"}, "data": {"password": "aHVudGVyMg=="}})
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with serving(make_app(path)) as url, browser() as chromium:
            page = await chromium.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(WAIT_MS)
            watch = PageWatch(page)
            await page.goto(object_url(url, "prod", "pods", "default", "web-1"))

            # the YAML, rendered by the server, as text
            yaml_box = page.locator("#obj-yaml")
            await expect(yaml_box).to_contain_text("kind: Pod")
            text = await yaml_box.text_content()
            assert text is not None and "managedFields" not in text
            assert (
                f"app: {XSS}" in text and "\n  ownerReferences:\n  - apiVersion: apps/v1\n" in text
            )

            # containers: init first, then the others, state and restarts from the status
            cells = page.locator("#containers tbody tr")
            await expect(cells).to_have_count(3)
            await expect(cells.nth(0)).to_contain_text("migrate")
            await expect(cells.nth(0).locator(".badge-init")).to_have_text("init")
            await expect(cells.nth(0)).to_contain_text("Terminated: Completed (exit code 0)")
            await expect(cells.nth(1).locator("td")).to_have_text(
                ["app", "registry.example.com/web:1.4.2", "yes", "0", "Running"]
            )
            await expect(cells.nth(2).locator("td")).to_have_text(
                ["sidecar", XSS, "no", "3", "Waiting: CrashLoopBackOff"]
            )
            assert await cells.nth(2).locator("td").nth(4).get_attribute("title") == XSS

            # owners and the node: links when the kind has a page, text otherwise
            summary = page.locator("#obj-summary")
            status = summary.locator("dt:text-is('Status') + dd")
            await expect(status).to_have_text("CrashLoopBackOff (phase Running)")
            await expect(summary.locator(".link-unknown")).to_have_text(f"Widget {XSS}")
            await expect(summary.locator("a.obj-link")).to_have_text(
                [f"ReplicaSet {owner}", "Node node-7"]
            )
            assert await page.locator("img").count() == 0
            await summary.locator("a.obj-link", has_text="ReplicaSet").click()
            await page.wait_for_url("**resource=replicasets.apps**")
            await expect(page.locator("#obj-title")).to_have_text(f"default/{owner}")
            await expect(page.locator("#obj-yaml")).to_contain_text("kind: ReplicaSet")
            await expect(page.locator("#obj-containers")).to_be_hidden()
            await page.go_back()
            await summary.locator("a.obj-link", has_text="Node").click()
            await page.wait_for_url("**resource=nodes**")
            await expect(page.locator("#obj-title")).to_have_text("node-7")
            await expect(page.locator("#obj-yaml")).to_contain_text("zone: eu-1")

            # a Secret's values never reach the page
            await page.goto(object_url(url, "prod", "secrets", "default", "db"))
            await expect(page.locator("#obj-yaml")).to_contain_text("password: (redacted)")
            assert "aHVudGVyMg" not in await page.content()
            watch.check()


# Text whose contrast with what is behind it is below WCAG AA (4.5:1), as
# [text, colour, background, ratio]; backgrounds are composed up the tree, animations finished.
LOW_CONTRAST_JS = """() => {
  for (const a of document.getAnimations()) a.finish();
  const parse = (c) => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return [0, 0, 0, 0];
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, under) => [0, 1, 2].map((i) => top[i] * top[3] + under[i] * (1 - top[3]));
  const background = (node) => {
    const chain = [];
    for (let n = node; n; n = n.parentElement) chain.unshift(n);
    let colour = [255, 255, 255];
    for (const n of chain) colour = over(parse(getComputedStyle(n).backgroundColor), colour);
    return colour;
  };
  const lum = (rgb) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(rgb[0]) + 0.7152 * f(rgb[1]) + 0.0722 * f(rgb[2]);
  };
  const bad = [];
  for (const node of document.body.querySelectorAll("*")) {
    if (!node.checkVisibility()) continue;
    const own = [...node.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim());
    if (!own) continue;
    const bg = background(node);
    const fg = over(parse(getComputedStyle(node).color), bg);
    const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    const ratio = (hi + 0.05) / (lo + 0.05);
    if (ratio < 4.5) bad.push([node.textContent.trim().slice(0, 40), fg, bg, ratio]);
  }
  return bad;
}"""
LUMINANCE_JS = """(selector) => {
  const node = document.querySelector(selector);
  const style = getComputedStyle(node);
  const lum = (c) => {
    const [r, g, b] = c.match(/[\\d.]+/g).map(Number);
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
  };
  return [lum(style.backgroundColor), lum(style.color)];
}"""


@pytest.mark.parametrize("scheme", ["dark", "light"])
async def test_theme_follows_the_system_and_all_text_is_readable(
    tmp_path: Path, scheme: Literal["dark", "light"]
) -> None:
    async with FakeCluster() as c:
        pods = {
            "web-1": "Running",
            "web-2": "Pending",
            "job-1": "Failed",
            "job-2": "Succeeded",
            "api-1": "CrashLoopBackOff",
        }
        for name, state in pods.items():
            pod = make_pod(name)
            set_pod_state(pod, state)
            pod = c.create("pods", pod)
        c.create(
            "events.events.k8s.io", make_event(pod, reason="BackOff", type_="Warning", note="x")
        )
        c.create("events.events.k8s.io", make_event(pod, reason="Pulled", note="y", seq=1))
        path = write_kubeconfig(tmp_path / "config", {"prod": c, "dev": c})
        async with serving(make_app(path)) as url, browser() as chromium:
            page = await chromium.new_page(
                color_scheme=scheme, viewport={"width": 1280, "height": 900}
            )
            page.set_default_timeout(WAIT_MS)
            watch = PageWatch(page)
            for view in ("table", "object"):
                if view == "table":
                    await page.goto(url)
                    await expect(rows(page)).to_have_count(10)
                    await expect(page.locator("#conn")).to_have_text("live")
                else:
                    await page.goto(object_url(url, "prod", "pods", "default", "api-1"))
                    await expect(page.locator("#events tbody tr")).to_have_count(2)
                background, ink = await page.evaluate(LUMINANCE_JS, "html")
                if scheme == "dark":
                    assert background < 0.2 and ink > 0.8, (view, background, ink)
                else:
                    assert background > 0.9 and ink < 0.2, (view, background, ink)
                low = await page.evaluate(LOW_CONTRAST_JS)
                assert low == [], (view, low)
            watch.check()


async def test_page_resynchronises_after_the_server_restarts(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create("pods", make_pod("web-1"))
        c.create("pods", make_pod("web-2"))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with browser() as chromium:
            page = await chromium.new_page()
            page.set_default_timeout(WAIT_MS)
            app = make_app(path)
            async with serving(app) as url:
                await page.goto(url)
                await expect(rows(page)).to_have_count(2)
                await page.evaluate("window.__noReload = true")
            # the server is gone; the page keeps its rows and tries to reconnect
            await expect(page.locator("#conn")).not_to_have_text("live")
            c.delete("pods", "default", "web-1")
            c.create("pods", make_pod("web-3"))
            port = int(url.rstrip("/").rsplit(":", 1)[1])
            async with serving(make_app(path), port=port):
                await expect(page.locator("#conn")).to_have_text("live")
                await expect(page.locator("#activity")).to_contain_text("reconnected")
                await expect(rows(page)).to_have_count(2)
                await expect(rows(page).filter(has_text="web-3")).to_have_count(1)
                await expect(rows(page).filter(has_text="web-1")).to_have_count(0)
            assert await page.evaluate("window.__noReload") is True


SHOWCASE_LOG = """\
2026-12-05T09:12:01Z INFO  starting web 1.4.2 (commit 3f9c2e1)
2026-12-05T09:12:01Z INFO  config loaded from /etc/web/config.yaml
2026-12-05T09:12:02Z INFO  connecting to postgres at db.data.svc:5432
2026-12-05T09:12:02Z WARN  postgres not ready, retrying in 2s
2026-12-05T09:12:04Z INFO  connected to postgres (pool size 10)
2026-12-05T09:12:04Z INFO  listening on :8080
2026-12-05T09:13:10Z ERROR upstream cache.default.svc:6379: connection refused
2026-12-05T09:13:10Z FATAL cannot start without the cache, exiting (code 1)
"""


def _showcase(clusters: list[FakeCluster], names: list[str]) -> tuple[str, dict[str, Any]]:
    """A pod worth a picture: crash-looping if one is, else running (context, pod)."""
    found: list[tuple[int, str, dict[str, Any]]] = []
    for name, cluster in zip(names, clusters, strict=False):
        for pod in cluster.objects("pods"):
            status = summarize("pods", pod)["status"]
            rank = {"CrashLoopBackOff": 0, "Running": 1}.get(status, 2)
            found.append((rank, name, pod))
    rank, context, pod = min(found, key=lambda item: item[0])
    return context, pod


@pytest.mark.skipif(not os.environ.get("KUBEMUX_SCREENSHOT"), reason="KUBEMUX_SCREENSHOT not set")
async def test_screenshot(tmp_path: Path) -> None:
    """The docs' pictures: ``kubemux demo``'s simulated workload, mid-run.

    ``KUBEMUX_SCREENSHOT=docs/dashboard.png`` writes the table (``dashboard.png``), an
    object page (``dashboard-object.png``) and the table in the dark theme
    (``dashboard-dark.png``), 1280x800 each.
    """
    target = Path(os.environ["KUBEMUX_SCREENSHOT"])
    shots = {
        view: target.with_name(f"{target.stem}{suffix}{target.suffix}")
        for view, suffix in (("table", ""), ("object", "-object"), ("dark", "-dark"))
    }
    viewport = {"width": 1280, "height": 800}
    clusters = [FakeCluster(tokens={f"token-{i}"}) for i in range(4)]
    async with contextlib.AsyncExitStack() as stack:
        for c in clusters:
            await stack.enter_async_context(c)
        names = ["prod-eu", "prod-us", "staging"]
        contexts: dict[str, Any] = dict(zip(names, clusters, strict=False))
        path = write_kubeconfig(tmp_path / "config", contexts)
        app = make_app(path, title="kubemux demo", status_period=0.5)
        async with serving(app) as url, browser() as chromium:
            async with anyio.create_task_group() as tg:
                for i, c in enumerate(clusters):
                    workload = functools.partial(simulate_workload, c, seed=i, period=0.3, pods=7)
                    tg.start_soon(workload)
                page = await chromium.new_page(viewport=viewport)
                page.set_default_timeout(WAIT_MS)
                await page.goto(url)
                await expect(page.locator("#contexts .card")).to_have_count(3)
                for step, edit in enumerate(("add", "reload", "remove", "add")):
                    if edit == "add":
                        contexts["dev"] = clusters[3]
                    elif edit == "remove":
                        del contexts["dev"]
                    else:
                        clusters[0].tokens.add("rotated")
                        contexts["prod-eu"] = FakeContext(cluster=clusters[0], token="rotated")
                    write_kubeconfig(path, contexts)
                    await expect(page.locator("#activity li")).to_have_count(step + 2)
                await expect(page.locator("#contexts .card")).to_have_count(4)
                await expect(rows(page, "dev")).not_to_have_count(0)
                for card in await page.locator("#contexts .card .state").all():
                    await expect(card).to_have_text("running")
                target.parent.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(shots["table"]), animations="disabled")
                tg.cancel_scope.cancel()  # the workload stops: the next pictures stay true

            context, pod = _showcase(clusters, [*names, "dev"])
            meta = pod["metadata"]
            cluster = dict(zip([*names, "dev"], clusters, strict=True))[context]
            container = pod["spec"]["containers"][0]["name"]
            cluster.append_log(meta["namespace"], meta["name"], SHOWCASE_LOG, container=container)
            await page.goto(object_url(url, context, "pods", meta["namespace"], meta["name"]))
            await expect(page.locator("#containers tbody tr")).to_have_count(1)
            await expect(page.locator("#events tbody tr")).not_to_have_count(0)
            await expect(page.locator("#obj-yaml")).to_contain_text("kind: Pod")
            await expect(page.locator("#log")).to_contain_text("listening on :8080")
            await expect(page.locator("#conn")).to_have_text("live")
            await page.screenshot(path=str(shots["object"]), animations="disabled")

            dark = await chromium.new_page(viewport=viewport, color_scheme="dark")
            dark.set_default_timeout(WAIT_MS)
            await dark.goto(url)
            await expect(dark.locator("#contexts .card .state")).to_have_text(["running"] * 4)
            await expect(rows(dark)).not_to_have_count(0)
            await dark.screenshot(path=str(shots["dark"]), animations="disabled")
        for shot in shots.values():
            assert shot.read_bytes().startswith(b"\x89PNG")


async def test_resource_picker_and_a_typo(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create("pods", make_pod("web-1"))
        c.add_crd("example.com", "widgets", "Widget", short_names=["wd"])
        c.create("widgets.example.com", {"metadata": {"name": "w1"}})
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with serving(make_app(path)) as url, browser() as chromium:
            page = await chromium.new_page()
            page.set_default_timeout(WAIT_MS)
            await page.goto(url)
            await expect(rows(page)).to_have_count(1)
            # the picker offers what the cluster serves (discovery), not a fixed list
            await expect(page.locator('#resources option[value="secrets"]')).to_have_count(1)
            # a typo: one error naming it and what the cluster serves close to it; the
            # cards stay, the table says it too (not "Waiting for objects…")
            await page.fill("#resource", "podz")
            await page.press("#resource", "Enter")
            await page.locator("#resource").blur()
            hint = page.locator("#banners .banner", has_text="did you mean")
            await expect(hint).to_contain_text("'podz'")
            await expect(hint).to_contain_text("'pods'")
            await expect(hint).to_contain_text("context 'prod'")
            await expect(page.locator("#banners .banner")).to_have_count(1)
            await expect(page.locator("#empty")).to_contain_text("doesn't have a resource type")
            await expect(page.locator('.card[data-context="prod"] .state')).to_have_text("running")
            await expect(page.locator("#conn")).to_have_text("live")
            await expect(page.locator(".card-error:visible")).to_have_count(0)
            # a custom resource's short name resolves through the cluster's discovery
            await page.fill("#resource", "wd")
            await page.locator("#resource").blur()
            await expect(rows(page)).to_have_count(1)
            await expect(page.locator("#banners .banner")).to_have_count(0)
            await page.fill("#resource", "pods")
            await page.locator("#resource").blur()
            await expect(page.locator("#banners .banner")).to_have_count(0)
            await expect(rows(page)).to_have_count(1)


def aged(pod: dict[str, Any], created: str, restarts: int = 0) -> dict[str, Any]:
    pod["metadata"]["creationTimestamp"] = created
    pod["status"]["containerStatuses"][0]["restartCount"] = restarts
    return pod


async def headers(page: Page) -> list[str]:
    return [t.strip() for t in await page.locator("#rows thead th").all_inner_texts()]


async def column(page: Page, name: str) -> list[str]:
    return await page.locator(f"#rows tbody tr:visible td.col-{name}").all_inner_texts()


async def test_server_columns_per_kind_union_and_sorting(tmp_path: Path) -> None:
    size = {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}
    color = {"name": "Color", "type": "string", "jsonPath": ".spec.color"}
    async with FakeCluster() as a, FakeCluster() as b:
        for name, created, restarts in (
            ("web-1", "2020-01-01T00:00:00Z", 10),
            ("web-2", "2024-01-01T00:00:00Z", 2),
            ("web-9", "2023-01-01T00:00:00Z", 9),
            ("web-10", "2022-01-01T00:00:00Z", 0),
        ):
            a.create("pods", aged(make_pod(name), created, restarts))
        b.create("pods", make_pod("db-1"))
        a.add_crd("example.com", "widgets", "Widget", printer_columns=[size])
        evil = {"name": XSS, "type": "string", "jsonPath": ".spec.color", "description": XSS}
        b.add_crd("example.com", "widgets", "Widget", printer_columns=[color, size, evil])
        a.create("widgets.example.com", {"metadata": {"name": "w1"}, "spec": {"size": 3}})
        b.create("widgets.example.com", {"metadata": {"name": "w2"}, "spec": {"color": "red"}})
        path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
        async with serving(make_app(path)) as url, browser() as chromium:
            page = await chromium.new_page(viewport={"width": 1300, "height": 900})
            page.set_default_timeout(WAIT_MS)
            watch = PageWatch(page)
            await page.goto(url)
            await expect(rows(page)).to_have_count(5)
            assert await headers(page) == [
                "Context", "Namespace", "Name", "Ready", "Status", "Restarts", "Age",
            ]  # fmt: skip

            # strings naturally, both ways; a live row lands in its place
            name = page.locator("#rows thead th.col-name")
            await name.locator("button").click()
            await expect(name).to_have_attribute("aria-sort", "ascending")
            await expect(page.locator("#rows thead th.col-age")).to_have_attribute(
                "aria-sort", "none"
            )
            assert await column(page, "name") == ["db-1", "web-1", "web-2", "web-9", "web-10"]
            await name.locator("button").click()
            await expect(name).to_have_attribute("aria-sort", "descending")
            a.create("pods", aged(make_pod("web-3"), "2021-01-01T00:00:00Z", 3))
            await expect(rows(page)).to_have_count(6)
            assert await column(page, "name") == [
                "web-10", "web-9", "web-3", "web-2", "web-1", "db-1",
            ]  # fmt: skip
            assert "sort=-Name" in page.url

            # numbers numerically; a modified row moves
            await page.locator("#rows thead th.col-restarts button").click()
            assert await column(page, "name") == [
                "db-1", "web-10", "web-2", "web-3", "web-9", "web-1",
            ]  # fmt: skip
            pod = a.get("pods", "default", "web-10")
            assert pod is not None
            pod["status"]["containerStatuses"][0]["restartCount"] = 100
            a.update("pods", pod)
            await expect(rows(page).last).to_contain_text("web-10")
            # ages by time: the youngest first
            await page.locator("#rows thead th.col-age button").click()
            assert await column(page, "name") == [
                "db-1", "web-2", "web-9", "web-10", "web-3", "web-1",
            ]  # fmt: skip

            # a Deployment has its own columns, not a pod's
            await page.fill("#resource", "deployments.apps")
            await page.press("#resource", "Enter")
            await page.locator("#resource").blur()
            await expect(page.locator("#rows thead th.col-up-to-date")).to_have_count(1)
            assert await headers(page) == [
                "Context", "Namespace", "Name", "Ready", "Up-to-date", "Available", "Age",
            ]  # fmt: skip

            # a kind whose columns differ per context: the union, by name
            await page.fill("#resource", "widgets.v1.example.com")
            await page.locator("#resource").blur()
            await expect(rows(page)).to_have_count(2)
            await expect(page.locator("#rows thead th.col-color")).to_have_count(1)
            assert await headers(page) == ["Context", "Namespace", "Name", "Color", "Size", XSS]
            assert await page.locator("img").count() == 0  # a column's name is text too
            assert await rows(page, "dev").locator("td.col-color").inner_text() == "red"
            assert await rows(page, "prod").locator("td.col-color").inner_text() == ""
            assert await rows(page, "prod").locator("td.col-size").inner_text() == "3"
            watch.check()


async def test_context_filter_colours_and_compact_cards(tmp_path: Path) -> None:
    async with FakeCluster() as a, FakeCluster() as b:
        a.create("pods", make_pod("web-1"))
        b.create("pods", make_pod("db-1"))
        names = [f"ctx-{i}" for i in range(8)]  # more than 6: the cards collapse
        contexts: dict[str, Any] = {n: (a if i % 2 else b) for i, n in enumerate(names)}
        path = write_kubeconfig(tmp_path / "config", contexts)
        async with serving(make_app(path)) as url, browser() as chromium:
            page = await chromium.new_page(viewport={"width": 1300, "height": 900})
            page.set_default_timeout(WAIT_MS)
            watch = PageWatch(page)
            await page.goto(url)
            await expect(rows(page)).to_have_count(8)
            await expect(page.locator("#contexts .card")).to_have_count(8)

            # compact beyond 6 contexts, with a toggle
            toggle = page.locator("#contexts-toggle")
            await expect(page.locator("#contexts")).to_have_class("cards compact")
            await expect(toggle).to_have_attribute("aria-expanded", "false")
            await expect(page.locator(".card .card-where").first).to_be_hidden()
            await toggle.click()
            await expect(page.locator("#contexts")).to_have_class("cards")
            await expect(toggle).to_have_attribute("aria-expanded", "true")
            await expect(page.locator(".card .card-where").first).to_be_visible()

            # one colour per context, the palette's in sorted-name order, everywhere the same
            colour = "el => getComputedStyle(el).backgroundColor"
            cards = {}
            for name in names:
                dot = page.locator(f'.card[data-context="{name}"] .dot')
                cards[name] = await dot.evaluate(colour)
                row = rows(page, name).locator(".dot")
                assert await row.evaluate(colour) == cards[name]
                chip = page.locator(f'#ctx-filter .dot[data-ctx="{name}"]')
                assert await chip.evaluate(colour) == cards[name]
            assert len(set(cards.values())) == 8
            assert cards["ctx-0"] == "rgb(230, 25, 75)" and cards["ctx-1"] == "rgb(60, 180, 75)"

            # show only some contexts
            for name in names[2:]:
                await page.locator(f'#ctx-filter input[data-context="{name}"]').uncheck()
            await expect(page.locator("#rows tbody tr:visible")).to_have_count(2)
            await expect(page.locator("#count")).to_have_text("2 of 8 pods")
            assert "hide=ctx-7" in page.url
            a.create("pods", make_pod("web-2"))  # live rows of a hidden context stay hidden
            await expect(page.locator("#count")).to_have_text("3 of 12 pods")
            await expect(rows(page)).to_have_count(3)  # the rows not shown are not drawn
            await page.click("#ctx-all")
            await expect(page.locator("#rows tbody tr:visible")).to_have_count(12)
            # the choice survives a reload
            await page.locator('#ctx-filter input[data-context="ctx-0"]').uncheck()
            await page.reload()
            await expect(page.locator("#count")).to_have_text("11 of 12 pods")
            await expect(page.locator("#rows tbody tr:visible")).to_have_count(11)
            await expect(
                page.locator('#ctx-filter input[data-context="ctx-0"]')
            ).not_to_be_checked()
            watch.check()


async def test_keyboard_shortcuts(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        for name in ("web-1", "web-2", "web-3"):
            c.create("pods", make_pod(name))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with serving(make_app(path)) as url, browser() as chromium:
            page = await chromium.new_page()
            page.set_default_timeout(WAIT_MS)
            watch = PageWatch(page)
            await page.goto(url)
            await expect(rows(page)).to_have_count(3)
            current = page.locator("#rows tbody tr.current")
            # "/" focuses the filter; typing j and k there types them
            await page.keyboard.press("/")
            await expect(page.locator("#filter")).to_be_focused()
            await page.keyboard.type("jk")
            await expect(page.locator("#filter")).to_have_value("jk")
            await expect(current).to_have_count(0)
            await page.fill("#filter", "")
            await page.locator("#filter").blur()
            # j/k move the highlighted row
            await page.keyboard.press("j")
            await expect(current).to_contain_text("web-1")
            await expect(current).to_have_attribute("aria-current", "true")
            await page.keyboard.press("j")
            await page.keyboard.press("j")
            await page.keyboard.press("j")  # stays on the last row
            await expect(current).to_contain_text("web-3")
            await page.keyboard.press("k")
            await expect(current).to_contain_text("web-2")
            # Enter opens it
            await page.keyboard.press("Enter")
            await page.wait_for_url("**/object?**name=web-2**")
            await expect(page.locator("#obj-title")).to_have_text("default/web-2")
            watch.check()


async def test_cards_say_when_listed_and_when_the_last_event_came(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create("pods", make_pod("web-1"))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with serving(make_app(path)) as url, browser() as chromium:
            page = await chromium.new_page()
            page.set_default_timeout(WAIT_MS)
            await page.goto(url)
            await expect(rows(page)).to_have_count(1)
            listed = page.locator('.card[data-context="prod"] .listed')
            last = page.locator('.card[data-context="prod"] .last-event')
            await expect(listed).to_have_text(re.compile(r"^listed \d+s ago$"))
            await expect(listed).to_have_attribute("title", re.compile("full LIST"))
            await expect(last).to_have_text("no pods event since the page opened")
            await expect(last).to_have_attribute("title", re.compile("live change"))
            c.create("pods", make_pod("web-2"))
            await expect(rows(page)).to_have_count(2)
            await expect(last).to_have_text(re.compile(r"^last pods event \d+s ago$"))


async def test_pickers_offer_every_contexts_resources_and_namespaces(tmp_path: Path) -> None:
    async with FakeCluster() as a, FakeCluster() as b:
        a.create("pods", make_pod("web-1"))
        for ns in ("default", "empty-a"):
            a.create("namespaces", {"metadata": {"name": ns}})
        b.create("namespaces", {"metadata": {"name": "empty-b"}})
        b.add_crd("example.com", "widgets", "Widget")  # only the second context serves it
        path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
        async with serving(make_app(path)) as url, browser() as chromium:
            page = await chromium.new_page()
            page.set_default_timeout(WAIT_MS)
            await page.goto(url)
            await expect(rows(page)).to_have_count(1)
            await expect(
                page.locator('#resources option[value="widgets.example.com"]')
            ).to_have_count(1)
            widgets = page.locator('#resources option[value="widgets.example.com"]')
            await expect(widgets).to_have_attribute("label", "Widget · dev")
            # namespaces of the clusters, not only those of the rows shown
            for ns in ("default", "empty-a", "empty-b"):
                await expect(page.locator(f'#namespaces option[value="{ns}"]')).to_have_count(1)
            empty_b = page.locator('#namespaces option[value="empty-b"]')
            await expect(empty_b).to_have_attribute("label", "empty-b · dev")
