"""The dashboard's table as a window over its rows, in a real browser: a table larger than the
window draws only part of its rows, and every row stays reachable by the filter, by scrolling
and by the keyboard; columns stay in sight; a change on screen shows."""

from __future__ import annotations

from pathlib import Path

from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from test_dashboard import served
from test_dashboard_browser import WAIT_MS, PageWatch, browser, expect, rows

PODS = 600  # six times the least the page draws


async def test_a_large_table_draws_a_window_and_every_row_is_reachable(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create_many(
            "pods", [make_pod(f"pod-{i:04d}", f"ns-{i % 3}", size=600) for i in range(PODS)]
        )
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with served(path) as url, browser() as chromium:
            page = await chromium.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(WAIT_MS)
            watch = PageWatch(page)
            await page.goto(url)
            await expect(page.locator("#count")).to_have_text(f"{PODS} pods")
            drawn = await rows(page).count()
            assert 100 <= drawn < PODS
            # the server's columns are in sight, not pushed out by kept widths
            box = await page.locator("#table-view .table-wrap").bounding_box()
            age = await page.locator("#rows thead th.col-age").bounding_box()
            assert box is not None and age is not None
            assert age["x"] + age["width"] <= box["x"] + box["width"] + 1

            # the last row (ns-2/pod-0599 sorts last), by the filter
            last = rows(page).filter(has_text="pod-0599")
            await page.fill("#filter", "pod-0599")
            await expect(page.locator("#count")).to_have_text(f"1 of {PODS} pods")
            await expect(last).to_have_count(1)
            await page.fill("#filter", "")
            await expect(last).to_have_count(0)  # out of the window again
            # ... and by scrolling to the bottom
            await page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
            await expect(last).to_be_visible()
            # the keyboard walks the model, not the drawn rows: j from nothing goes to the
            # first row, and on past the first window
            await page.evaluate("window.scrollTo(0, 0)")
            await page.locator("#filter").blur()
            await page.keyboard.press("j")
            current = page.locator("#rows tbody tr.current")
            await expect(current).to_contain_text("pod-0000")
            # past the first window (100 rows drawn): 110 more j's, dispatched in one call
            # (the page's own handler; 110 key presses took 3 s of round trips)
            await page.evaluate(
                """() => { for (let i = 0; i < 110; i++) document.body.dispatchEvent(
                    new KeyboardEvent("keydown", { key: "j", bubbles: true, cancelable: true })
                ); }"""
            )
            await expect(current).to_contain_text("pod-0330")  # ns-0: 0, 3, 6, ... 330
            await expect(current).to_be_in_viewport()

            # a change of a row on screen shows
            pod = c.get("pods", "ns-0", "pod-0330")
            assert pod is not None
            pod["status"]["containerStatuses"][0]["restartCount"] = 77
            c.update("pods", pod)
            await expect(current.locator("td.col-restarts")).to_have_text("77")
            watch.check()
