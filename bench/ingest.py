"""Ingest benchmark: how fast does a watch stream of pods become a readable cache?

One FakeCluster runs in its own process and serves N pod ADDED events of about 2 KB each
(a watch from an old resourceVersion replays them as fast as the socket takes them). Each
client runs in a fresh process, with the garbage collector at its defaults, and keeps what it
receives in a cache that grows to N objects. Every client's clock starts when the response
has begun (headers received): the server needs a while to queue N events for a watch, and
that is not the client's cost. The stream is framed as kube-apiserver frames it: Go's
net/http buffers 2 KiB before it sends a chunk, so a client sees about one HTTP chunk per
2 KB event (a second table shows (d) and (e) on 256 KiB chunks, cheaper to read than any
real cluster's stream). (d) and (e) run --repeat times, interleaved; medians are shown.

  (a) kubernetes-asyncio Watch, OpenAPI model objects (on fewer events: it is slow)
  (b) kubernetes-asyncio, raw response lines + json.loads into a dict keyed by uid
  (c) aiohttp + orjson.loads per line into a dict keyed by uid (the naive loop)
  (d) the kubemux informer into its Store, ready to read
  (e) reading the bytes alone, splitting nothing (the ceiling)

Also: memory per cached pod (RSS delta / N) against the size of its JSON, and the longest
event-loop stall while the informer applies a relist of 50k objects.

Usage: python bench/ingest.py [--events 100000] [--model-events 3000] [--relist 50000]
                              [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import EventCount, open_watch_of, server, table


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# ---------------------------------------------------------------- the peers (child side)
async def peer_bytes(url: str, rv: str, n: int) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as s:
        params = {"watch": "true", "resourceVersion": rv}
        async with s.get(f"{url}/api/v1/pods", params=params) as resp:
            t0 = time.perf_counter()
            lines = total = 0
            while lines < n:
                chunk = await resp.content.readany()
                if not chunk:
                    break
                lines += chunk.count(b"\n")
                total += len(chunk)
            dt_ = time.perf_counter() - t0
    return {"events": lines, "seconds": dt_, "bytes_per_event": total / max(lines, 1)}


async def peer_naive(url: str, rv: str, n: int) -> dict[str, Any]:
    import aiohttp
    import orjson

    cache: dict[str, Any] = {}
    async with aiohttp.ClientSession(read_bufsize=2**21) as s:
        params = {"watch": "true", "resourceVersion": rv}
        async with s.get(f"{url}/api/v1/pods", params=params) as resp:
            base = rss()
            t0 = time.perf_counter()
            count = 0
            async for line in resp.content:
                event = orjson.loads(line)
                obj = event["object"]
                cache[obj["metadata"]["uid"]] = obj
                count += 1
                if count >= n:
                    break
            dt_ = time.perf_counter() - t0
    gc.collect()
    return {"events": count, "seconds": dt_, "rss_per_object": (rss() - base) / count}


def _api_client(url: str) -> Any:
    from kubernetes_asyncio import client

    cfg = client.Configuration()
    cfg.host = url
    return client.ApiClient(configuration=cfg)


async def peer_k8s_raw(url: str, rv: str, n: int) -> dict[str, Any]:
    from kubernetes_asyncio import client

    cache: dict[str, Any] = {}
    async with _api_client(url) as api:
        v1 = client.CoreV1Api(api)
        resp = await v1.list_pod_for_all_namespaces(
            watch=True, resource_version=rv, _preload_content=False
        )
        t0 = time.perf_counter()
        count = 0
        while count < n:
            line = await resp.content.readline()
            if not line:
                break
            obj = json.loads(line)["object"]
            cache[obj["metadata"]["uid"]] = obj
            count += 1
        dt_ = time.perf_counter() - t0
        resp.release()
    return {"events": count, "seconds": dt_}


async def peer_k8s_models(url: str, rv: str, n: int) -> dict[str, Any]:
    from kubernetes_asyncio import client, watch

    cache: dict[str, Any] = {}
    started: list[float] = []
    async with _api_client(url) as api:
        v1 = client.CoreV1Api(api)

        async def list_pods(**kwargs: Any) -> Any:
            resp = await v1.list_pod_for_all_namespaces(**kwargs)
            started.append(time.perf_counter())  # the response has begun, as for the others
            return resp

        list_pods.__doc__ = v1.list_pod_for_all_namespaces.__doc__  # Watch reads the model type
        w = watch.Watch()
        count = 0
        async for event in w.stream(list_pods, resource_version=rv):
            cache[event["object"].metadata.uid] = event["object"]
            count += 1
            if count >= n:
                break
        dt_ = time.perf_counter() - started[0]
        w.stop()
    return {"events": count, "seconds": dt_}


def _context(url: str) -> Any:
    from kubemux import ContextConfig
    from kubemux.testing import kubeconfig_dict

    return ContextConfig.from_dict("bench", kubeconfig_dict({"bench": url}))


def _pods_informer(client: Any, store: Any, events: EventCount | None = None) -> Any:
    from kubemux import WatchSettings, parse_resource
    from kubemux._informer.informer import Informer, InformerKey

    pods = parse_resource("pods")
    args = events.informer_args(store) if events is not None else {"store": store}
    return Informer(client, pods, InformerKey("pods"), settings=WatchSettings(), **args)


async def _informer_pass(client: Any, store: Any, rv: str, n: int) -> float:
    """One WATCH from ``rv`` into ``store`` until ``n`` changes; seconds from the response."""
    import contextlib

    import anyio

    events = EventCount(n)
    informer = _pods_informer(client, store, events)
    informer._rv = rv
    target, name = open_watch_of(informer)
    open_watch, started = getattr(target, name), []

    @contextlib.asynccontextmanager
    async def timed_watch(params: Any) -> Any:
        async with open_watch(params) as blocks:
            started.append(time.perf_counter())  # the response has begun, as for the others
            yield blocks

    setattr(target, name, timed_watch)
    async with anyio.create_task_group() as tg:
        tg.start_soon(informer._watch_once)
        await events.done.wait()
        seconds = time.perf_counter() - started[0]
        tg.cancel_scope.cancel()
    return seconds


async def peer_kubemux(url: str, rv: str, n: int) -> dict[str, Any]:
    from kubemux import Store, parse_resource
    from kubemux._http.client import open_client

    store = Store(parse_resource("pods"))
    async with open_client(_context(url)) as client:
        base = rss()
        dt_ = await _informer_pass(client, store, rv, n)
    gc.collect()
    one = store.get("ns-1", "web-0000001")
    assert one is not None and one["metadata"]["name"] == "web-0000001"
    t1 = time.perf_counter()
    reads = 0
    for ns, name in store.keys()[:20000]:
        store.get(ns, name)
        reads += 1
    read_us = (time.perf_counter() - t1) / reads * 1e6
    stored = sum(len(e.raw) for e in store.writer.entries()) / len(store)
    return {
        "events": len(store),
        "seconds": dt_,
        "rss_per_object": (rss() - base) / len(store),
        "read_us": read_us,
        "stored_bytes": stored,
    }


async def peer_kubemux_full(url: str, rv: str, n: int) -> dict[str, Any]:
    """(d) again over a full cache: the same events replace cached objects, memory recycles."""
    from kubemux import Store, parse_resource
    from kubemux._http.client import open_client

    store = Store(parse_resource("pods"))
    async with open_client(_context(url)) as client:
        await _informer_pass(client, store, rv, n)  # fill the cache (not measured)
        dt_ = await _informer_pass(client, store, rv, n)
    assert len(store) == n
    return {"events": n, "seconds": dt_}


async def peer_relist(url: str, rv: str, n: int) -> dict[str, Any]:
    import anyio

    from kubemux import Store, parse_resource
    from kubemux._http.client import open_client

    pods = parse_resource("pods")
    store = Store(pods)
    worst = 0.0
    stop = anyio.Event()

    async def ticker() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not stop.is_set():
            await anyio.lowlevel.checkpoint()
            now = time.perf_counter()
            worst = max(worst, now - last)
            last = now

    async with open_client(_context(url)) as client:
        informer = _pods_informer(client, store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            t0 = time.perf_counter()
            await informer.initial_sync()  # the first full LIST
            first = time.perf_counter() - t0
            worst_first, worst = worst, 0.0
            t0 = time.perf_counter()
            lister = getattr(informer, "lister", None)  # (a tree from before issue 30: none)
            relist = lister.list if lister is not None else informer._list
            await relist()  # a RELIST over a full store
            second = time.perf_counter() - t0
            stop.set()
    return {
        "events": len(store),
        "seconds": first,
        "relist_seconds": second,
        "stall_ms": worst_first * 1000,
        "relist_stall_ms": worst * 1000,
    }


PEERS = {
    "bytes": peer_bytes,
    "naive": peer_naive,
    "k8s-raw": peer_k8s_raw,
    "k8s-models": peer_k8s_models,
    "kubemux": peer_kubemux,
    "kubemux-full": peer_kubemux_full,
    "relist": peer_relist,
}


def child(args: argparse.Namespace) -> None:
    import anyio

    result = anyio.run(PEERS[args.peer], args.server, args.rv, args.n)
    print(json.dumps(result))


def rate_of(result: dict[str, Any]) -> float:
    return float(result["events"] / result["seconds"])


def repeated(url: str, rv: str, n: int, repeat: int) -> dict[str, list[dict[str, Any]]]:
    """(e) and (d), ``repeat`` runs each, interleaved so that drift hits both alike."""
    runs: dict[str, list[dict[str, Any]]] = {"bytes": [], "kubemux": []}
    for _ in range(repeat):
        for peer, results in runs.items():
            results.append(run_peer(peer, url, rv, n))
            print(f"  measured {peer}", file=sys.stderr)
    return runs


def median_run(results: list[dict[str, Any]]) -> dict[str, Any]:
    return sorted(results, key=rate_of)[len(results) // 2]


def spread(runs: dict[str, list[dict[str, Any]]]) -> str:
    ratios = [rate_of(d) / rate_of(e) for d, e in zip(runs["kubemux"], runs["bytes"], strict=True)]
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def run_peer(peer: str, url: str, rv: str, n: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--peer", peer, "--server", url, "--rv", rv, "--n", str(n)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--model-events", type=int, default=3_000)
    p.add_argument("--relist", type=int, default=50_000)
    p.add_argument("--size", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3, help="runs of (d) and (e); medians shown")
    p.add_argument("--peer", help=argparse.SUPPRESS)
    p.add_argument("--server", help=argparse.SUPPRESS)
    p.add_argument("--rv", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.peer:
        child(args)
        return

    n = args.events
    print(
        f"ingest: {n:,} pod ADDED events of ~{args.size} B over one watch; "
        f"{dt.date.today()}, Python {sys.version.split()[0]}, {os.cpu_count()} cores\n"
    )
    results: dict[str, dict[str, Any]] = {}
    with server(n, args.size) as (url, before, _after):
        for peer, count in [("naive", n), ("k8s-raw", n), ("k8s-models", args.model_events)]:
            results[peer] = run_peer(peer, url, before, count)
            print(f"  measured {peer}", file=sys.stderr)
        runs = repeated(url, before, n, args.repeat)
        full = [run_peer("kubemux-full", url, before, n) for _ in range(args.repeat)]
        print("  measured kubemux-full", file=sys.stderr)
    results.update({peer: median_run(r) for peer, r in runs.items()})
    results["kubemux-full"] = median_run(full)
    rate = {k: v["events"] / v["seconds"] for k, v in results.items()}
    labels = {
        "k8s-models": "(a) kubernetes-asyncio Watch, models",
        "k8s-raw": "(b) kubernetes-asyncio raw lines + json.loads",
        "naive": "(c) aiohttp + orjson per line, dict by uid",
        "kubemux": "(d) kubemux informer into Store",
        "kubemux-full": "(d) again, over the full cache (*)",
        "bytes": "(e) reading the bytes alone",
    }
    rows = [
        [
            labels[k],
            f"{results[k]['events']:,}",
            f"{rate[k]:,.0f}",
            f"{rate[k] / rate['naive']:.2f}x",
            f"{rate[k] / rate['k8s-models']:.1f}x",
            f"{rate[k] / rate['bytes']:.2f}",
        ]
        for k in ("k8s-models", "k8s-raw", "naive", "kubemux", "kubemux-full", "bytes")
    ]
    print(
        table(
            "Ingest rate (events/s, higher is better)",
            ["client", "events", "events/s", "vs (c)", "vs (a)", "of (e)"],
            rows,
        )
    )
    print(
        f"\n(d) and (e) are medians of {args.repeat} interleaved runs; (d)/(e) run by run: "
        f"{spread(runs)}.\nThe stream is framed as kube-apiserver frames it (Go net/http "
        "buffers 2 KiB before chunking:\nabout one HTTP chunk per 2 KB event).\n"
        "(*) the same events once the cache holds every object: each replaces one, so memory "
        "is\nrecycled instead of grown (a live cluster's steady state); median of "
        f"{args.repeat} runs."
    )
    with server(n, args.size, chunk_buffer=256 * 1024) as (url, before, _after):
        big = repeated(url, before, n, args.repeat)
    big_rate = {k: rate_of(median_run(v)) for k, v in big.items()}
    print()
    print(
        table(
            "The same stream in 256 KiB HTTP chunks (cheaper to read than any real cluster's)",
            ["client", "events/s", "of (e)", "(d)/(e) per run"],
            [
                [
                    labels["kubemux"],
                    f"{big_rate['kubemux']:,.0f}",
                    f"{big_rate['kubemux'] / big_rate['bytes']:.2f}",
                    spread(big),
                ],
                [labels["bytes"], f"{big_rate['bytes']:,.0f}", "1.00", ""],
            ],
        )
    )
    km = results["kubemux"]
    json_size = results["bytes"]["bytes_per_event"] - len('{"type":"ADDED","object":}\n')
    print()
    print(
        table(
            "Memory per cached pod (RSS delta / objects, after gc)",
            ["cache", "bytes/object", "vs JSON size"],
            [
                ["JSON as received (per object)", f"{json_size:,.0f}", "1.00x"],
                [
                    "(c) dict of dicts",
                    f"{results['naive']['rss_per_object']:,.0f}",
                    f"{results['naive']['rss_per_object'] / json_size:.2f}x",
                ],
                [
                    "(d) kubemux Store (managedFields dropped)",
                    f"{km['rss_per_object']:,.0f}",
                    f"{km['rss_per_object'] / json_size:.2f}x",
                ],
            ],
        )
    )
    print(
        f"\nkubemux keeps {km['stored_bytes']:,.0f} B of JSON per pod after dropping "
        f"managedFields; a read (store.get, one orjson decode) costs {km['read_us']:.1f} us."
    )
    with server(args.relist, args.size) as (url, before, _after):
        rl = run_peer("relist", url, before, args.relist)
    print()
    print(
        table(
            f"Relist of {rl['events']:,} pods (pages of 500) while the event loop must stay live",
            ["phase", "seconds", "longest loop stall"],
            [
                [
                    "first LIST into an empty store",
                    f"{rl['seconds']:.2f}",
                    f"{rl['stall_ms']:.1f} ms",
                ],
                [
                    "RELIST over the full store",
                    f"{rl['relist_seconds']:.2f}",
                    f"{rl['relist_stall_ms']:.1f} ms",
                ],
            ],
        )
    )


if __name__ == "__main__":
    main()
