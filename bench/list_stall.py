"""The longest event-loop stall while an informer LISTs one large unpaginated page.

A FakeCluster in its own process serves N pods of about 2 KB; a client process LISTs them
with ``page_size=0`` (one page: N=50,000 is ~100 MiB) while a ticker task measures the
longest gap between two of its turns. Run it against two source trees to compare:

  PYTHONPATH=<tree>/src python bench/list_stall.py [--pods 50000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import server


async def peer(url: str, n: int) -> dict[str, Any]:
    import anyio

    from kubemux import ContextConfig, Store, WatchSettings, parse_resource
    from kubemux._http.client import open_client
    from kubemux._informer.informer import Informer, InformerKey
    from kubemux.testing import kubeconfig_dict

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

    settings = WatchSettings(page_size=0, streaming_list=False, request_timeout=300)
    config = ContextConfig.from_dict("bench", kubeconfig_dict({"bench": url}))
    async with open_client(config) as client:
        informer = Informer(client, pods, InformerKey("pods"), settings=settings, store=store)
        await client.list(pods, None, {"limit": "1"}, settings)  # imports, TLS: not measured
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            t0 = time.perf_counter()
            await informer.initial_sync()
            seconds = time.perf_counter() - t0
            stop.set()
    assert len(store) == n, len(store)
    return {"seconds": seconds, "stall_ms": worst * 1000}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pods", type=int, default=50_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--peer", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.peer:
        import anyio

        print(json.dumps(anyio.run(peer, args.peer, args.pods)))
        return
    with server(args.pods, 2000) as (url, _before, _after):
        for _ in range(args.repeat):
            out = subprocess.run(
                [sys.executable, __file__, "--peer", url, "--pods", str(args.pods)],
                check=True,
                capture_output=True,
                text=True,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"LIST of {args.pods} pods in one page: {r['seconds']:.2f} s, "
                f"longest loop stall {r['stall_ms']:.1f} ms"
            )


if __name__ == "__main__":
    main()
