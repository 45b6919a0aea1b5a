"""Table view benchmark: memory per row and ingest rate, Table rows against full objects.

One FakeCluster runs in its own process with N pods of about 2 KB each. For each view, a
fresh client process first downloads a watch stream that replays the N pods as ADDED events
(plain objects for the Store, one-row Tables with ``includeObject=Metadata`` for the
table), then feeds those bytes from memory, in 64 KiB blocks of whole lines, to the real
informer code and times that alone: the fake server renders Tables in Python, far slower
than kube-apiserver, and must not be what is measured. Then it LISTs the N pods again
through the informer's paginated LIST (server included, 500 per page).

  store: Informer -> Store (objects, managedFields dropped), the registry's default view
  table: Informer (table format) -> TableStore (server cells + metadata, managedFields dropped)

The same bytes are then served again over HTTP by a replay server in its own process, cut
into 2 KiB chunks as Go's net/http cuts a watch stream, and read by the real client
(socket, chunk decoding, line splitting): the end-to-end rate a real cluster would allow,
where the table's smaller lines count.

Memory is the RSS growth per cached object after a LIST, and the bytes kept per entry.

Usage: python bench/table.py [--events 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import (
    EventCount,
    download_watch,
    line_blocks,
    ready_process,
    replay_watch,
    rss,
    server,
    table,
)

BLOCK = 64 * 1024


def _context(url: str) -> Any:
    from kubemux import ContextConfig
    from kubemux.testing import kubeconfig_dict

    return ContextConfig.from_dict("bench", kubeconfig_dict({"bench": url}))


async def peer(kind: str, url: str, rv: str, n: int) -> dict[str, Any]:
    import anyio

    from kubemux import Store, WatchSettings, parse_resource
    from kubemux._cache.table import TABLE_ACCEPT, TableStore
    from kubemux._http.client import open_client
    from kubemux._informer.informer import Informer, InformerKey

    pods = parse_resource("pods")
    settings = WatchSettings(streaming_list=False)
    table_view = kind == "table"
    store_cls: Any = TableStore if table_view else Store
    key = InformerKey("pods", view="table" if table_view else "objects")
    async with open_client(_context(url)) as client:
        # memory first, in a fresh process: the paginated LIST (server included, timed too)
        listed = store_cls(pods)
        gc.collect()
        base = rss()
        t1 = time.perf_counter()
        await Informer(client, pods, key, settings=settings, store=listed).lister.list()
        list_seconds = time.perf_counter() - t1
        gc.collect()
        per_object = (rss() - base) / len(listed)
        stored = sum(len(e.raw) for e in listed.writer.entries()) / len(listed)

        # then the ingest of a watch replay, from memory
        accept = TABLE_ACCEPT if table_view else "application/json"
        extra = {"includeObject": "Metadata"} if table_view else {}
        data = await download_watch(url, rv, n, {"Accept": accept}, **extra)
        blocks = line_blocks(data, BLOCK, copy=False)
        line_bytes = len(data) / n
        events = EventCount(n)
        informer = Informer(
            client,
            pods,
            key,
            settings=settings,
            **events.informer_args(store_cls(pods)),
        )
        seconds, _ = await replay_watch(informer, blocks, rv, events)
        blocks.clear()

    # end to end: the same stream from a replay server, through the real client
    with replay_server(data) as replay_url:
        del data
        async with open_client(_context(replay_url)) as replay_client:
            events = EventCount(n)
            informer = Informer(
                replay_client,
                pods,
                key,
                settings=settings,
                **events.informer_args(store_cls(pods)),
            )
            informer._rv = rv
            started: list[float] = []
            open_watch = informer.lister.open_watch

            @contextlib.asynccontextmanager
            async def timed(params: Any) -> AsyncIterator[AsyncIterator[Any]]:
                async with open_watch(params) as stream:
                    started.append(time.perf_counter())  # from the response's start
                    yield stream

            informer.lister.open_watch = timed
            async with anyio.create_task_group() as tg:
                tg.start_soon(informer._watch_once)
                await events.done.wait()
                socket_seconds = time.perf_counter() - started[0]
                tg.cancel_scope.cancel()
    return {
        "events": events.count,
        "seconds": seconds,
        "rss_per_object": per_object,
        "stored_bytes": stored,
        "line_bytes": line_bytes,
        "list_seconds": list_seconds,
        "socket_seconds": socket_seconds,
    }


@contextlib.contextmanager
def replay_server(data: bytes) -> Any:
    """Serve ``data`` as the body of every GET, in 2 KiB HTTP chunks, from another process."""
    import tempfile

    with tempfile.NamedTemporaryFile(prefix="kubemux-replay-") as f:
        f.write(data)
        f.flush()
        with ready_process(
            [sys.executable, __file__, "--replay", f.name], "replay server"
        ) as words:
            yield words[0]


async def replay_main(data: bytes) -> None:
    import anyio
    from aiohttp import web

    chunk = 2048
    framed = b"".join(
        b"%x\r\n" % len(data[i : i + chunk]) + data[i : i + chunk] + b"\r\n"
        for i in range(0, len(data), chunk)
    )

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        request.writer.chunked = False  # type: ignore[attr-defined]  # framed already
        step = 256 * 1024
        for i in range(0, len(framed), step):
            await response.write(framed[i : i + step])
        await anyio.sleep(3600)  # the stream stays open, as a watch does
        return response

    server = web.Server(handle)
    runner = web.ServerRunner(server)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print("READY", f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    try:
        await anyio.wrap_file(sys.stdin).read()
    finally:
        await runner.cleanup()


def run_peer(kind: str, url: str, rv: str, n: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--peer", kind, "--server", url, "--rv", rv, "--n", str(n)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--peer")
    p.add_argument("--server")
    p.add_argument("--rv")
    p.add_argument("--n", type=int)
    p.add_argument("--replay")
    args = p.parse_args()
    if args.replay:
        import anyio

        anyio.run(replay_main, Path(args.replay).read_bytes())
        return
    if args.peer:
        import anyio

        print(json.dumps(anyio.run(peer, args.peer, args.server, args.rv, args.n)))
        return
    n = args.events
    runs: dict[str, list[dict[str, Any]]] = {"store": [], "table": []}
    with server(n) as (url, before, _):
        for _ in range(args.repeat):
            for kind, results in runs.items():
                results.append(run_peer(kind, url, before, n))
                print(f"  measured {kind}", file=sys.stderr)
    rows = []
    median: dict[str, dict[str, Any]] = {}
    for kind, results in runs.items():
        m = sorted(results, key=lambda r: r["events"] / r["seconds"])[len(results) // 2]
        median[kind] = m
        rates = sorted(r["events"] / r["seconds"] for r in results)
        rows.append(
            [
                kind,
                f"{m['events'] / m['seconds']:,.0f}",
                f"{rates[0]:,.0f}-{rates[-1]:,.0f}",
                f"{m['events'] / m['socket_seconds']:,.0f}",
                f"{m['line_bytes']:,.0f}",
                f"{m['stored_bytes']:,.0f}",
                f"{m['rss_per_object']:,.0f}",
                f"{m['list_seconds']:.2f}",
            ]
        )
    print(
        table(
            f"Table view vs full objects: {n:,} pods of ~2 KB, median of {args.repeat} runs",
            [
                "view",
                "events/s (memory)",
                "range",
                "events/s (socket)",
                "bytes/line",
                "bytes kept/obj",
                "RSS/obj",
                "LIST s (server incl.)",
            ],
            rows,
        )
    )
    s, t = median["store"], median["table"]
    print()
    print(
        f"table/store: memory {t['rss_per_object'] / s['rss_per_object']:.2f}x, "
        f"kept bytes {t['stored_bytes'] / s['stored_bytes']:.2f}x, "
        f"ingest rate {t['events'] / t['seconds'] / (s['events'] / s['seconds']):.2f}x "
        f"from memory, {s['socket_seconds'] / t['socket_seconds']:.2f}x over a socket"
    )


if __name__ == "__main__":
    main()
