"""The dashboard's streams and pickers with many contexts: what is sent once, what answers
without waiting."""

from __future__ import annotations

from pathlib import Path

from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from test_dashboard import event_stream, served


async def test_a_snapshot_defines_each_set_of_columns_once(tmp_path: Path) -> None:
    async with FakeCluster() as a, FakeCluster() as b:
        a.create("pods", make_pod("web-1"))
        b.create("pods", make_pod("db-1"))
        contexts = {f"ctx-{i}": (a if i % 2 else b) for i in range(6)}
        path = write_kubeconfig(tmp_path / "config", contexts)
        async with served(path) as url, event_stream(url) as stream:
            # the contexts sync after the stream began: each one's columns come live
            await stream.until(lambda: len(stream.rows) == 6 and len(stream.columns) == 6)
            columns = [data for event, data in stream.seen if event == "columns"]
            whole = [c for c in columns if "columns" in c]
            # one definition (both clusters serve the same pod columns), ids for the others
            assert len(whole) == 1 and len({c["id"] for c in columns}) == 1
            assert all(set(c) == {"context", "resource", "id"} for c in columns if c not in whole)
            assert stream.columns["ctx-5"][:3] == ["Name", "Ready", "Status"]
            # a second page joins the same live table: its snapshot defines them again
            async with event_stream(url) as again:
                await again.until(lambda: len(again.rows) == 6 and len(again.columns) == 6)
                defined = [d for e, d in again.seen if e == "columns" and "columns" in d]
                assert len(defined) == 1
                # and a context added later comes by id, which both pages know
                contexts["ctx-6"] = a
                write_kubeconfig(path, contexts)
                await again.until(lambda: len(again.rows) == 7)
                await stream.until(lambda: len(stream.rows) == 7)
                assert again.columns["ctx-6"] == stream.columns["ctx-6"] == stream.columns["ctx-0"]
