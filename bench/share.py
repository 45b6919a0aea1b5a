"""Shared watches through Redis, measured with real processes (issue 13).

One run: a redis-server on a free port (persistence off), FakeClusters in this process, and
replica processes (tests/share_replica.py), each with its own share session and informer.

    python bench/share.py [--kills 20] [--objects 50000] [--parts hydrate]

``--parts hydrate`` runs only the hydration and memory rows (about a minute).

Prints one table: watches per resource for N = 1, 3, 10 replicas, LISTs on failover,
failover time (SIGKILL to the new leader watching) p99, follower lag at 1,000 events/s p99,
hydrating a follower with 50k objects, Redis and follower memory per object.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

import anyio
import anyio.abc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from share_support import REDIS_SERVER, RedisServer, Replica


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * 0.99))] if s else float("nan")


def lists(cluster: FakeCluster) -> int:
    return sum(
        1
        for r in cluster.requests
        if r.path.endswith("/pods")
        and (not r.is_watch or r.query.get("sendInitialEvents") == "true")
    )


def used_memory(redis: RedisServer) -> int:
    info = redis.command("INFO", "memory").decode()
    for line in info.splitlines():
        if line.startswith("used_memory:"):
            return int(line.split(":")[1])
    raise RuntimeError("no used_memory in INFO")


async def started(reps: list[Replica], timeout: float = 120) -> None:  # noqa: ASYNC109
    for r in reps:
        await r.wait(lambda r=r: any(e["op"] == "started" for e in r.events), timeout)


async def run(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    redis = RedisServer()
    redis.start()
    tmp = Path(tempfile.mkdtemp(prefix="kubemux-share-bench-"))
    try:
        async with FakeCluster(bookmark_period=1.0) as cluster, anyio.create_task_group() as tg:
            cluster.create_many("pods", (make_pod(f"web-{i}", size=2000) for i in range(200)))
            kc = str(write_kubeconfig(tmp / "config", {"fake": cluster}))
            base = [redis.url, kc, "fake", "pods", "--lease-ttl", "3", "--acquire-period", "0.5"]

            # 1. watches per (context, resource) with N replicas
            watches = []
            for n in (1, 3, 10) if "watches" in args.parts else ():
                # a share key per N (the identity), so no dead leader's lease is in the way
                reps = [Replica(f"w{n}-{i}", [*base, "--identity", f"n{n}"]) for i in range(n)]
                for r in reps:
                    await r.start(tg)
                await started(reps)
                await reps[0].wait(lambda reps=reps: any(r.role() == "leader" for r in reps), 30)
                await anyio.sleep(1.0)  # let any extra watch show up
                watches.append(f"N={n}: {cluster.open_watches}")
                for r in reps:
                    await r.close()
                await cluster.wait_for(lambda: cluster.open_watches == 0, 10)
            if watches:
                rows.append(("apiserver watches per resource", " ".join(watches), "1"))

            # 2. failover: SIGKILL the leader, time until another replica leads (watching)
            reps = [Replica(f"f{i}", base) for i in range(3)]
            for r in reps:
                await r.start(tg)
            await started(reps)
            lists_before = lists(cluster)
            times: list[float] = []
            spawned = 3
            kills = args.kills if "failover" in args.parts else 0
            for k in range(kills):
                await reps[0].wait(lambda reps=reps: any(r.role() == "leader" for r in reps), 30)
                leader = next(r for r in reps if r.role() == "leader")
                others = [r for r in reps if r is not leader]
                t0 = time.time()
                leader.signal(signal.SIGKILL)
                await others[0].wait(
                    lambda others=others: any(r.role() == "leader" for r in others), 30
                )
                new = next(r for r in others if r.role() == "leader")
                await cluster.wait_for(lambda: cluster.open_watches >= 1, 10)
                times.append((new.role_at("leader") or t0) - t0)
                cluster.update("pods", make_pod(f"web-{k}", size=2000))  # traffic between kills
                await leader.close()
                replacement = Replica(f"f{spawned}", base)
                spawned += 1
                await replacement.start(tg)
                await started([replacement])
                reps = [*others, replacement]
            if kills:
                n_lists = lists(cluster) - lists_before
                rows.append(("LISTs on failover", f"{n_lists} in {kills}", "0"))
                rows.append((f"failover time p99 ({kills} kills)", f"{p99(times):.2f} s", "<= 5 s"))

            # 3. follower lag at 1,000 events/s
            for r in reps:
                await r.close()
            reps = [Replica("lag-leader", base)]
            await reps[0].start(tg)
            await started(reps)
            follower = Replica("lag-follower", [*base, "--lags", "--no-lead"])
            await follower.start(tg)
            await started([follower])
            t_end = time.monotonic() + (args.lag_seconds if "lag" in args.parts else 0)
            i = 0
            next_at = time.monotonic()
            while time.monotonic() < t_end:
                for _ in range(10):  # 10 events every 10 ms
                    pod = make_pod(f"web-{i % 200}", size=2000)
                    pod["metadata"]["labels"] = {"i": str(i)}
                    cluster.update("pods", pod)
                    i += 1
                next_at += 0.01
                await anyio.sleep(max(0.0, next_at - time.monotonic()))
            await anyio.sleep(1.0)
            lags = (await follower.dump())["lags"]
            if lags:
                rows.append(
                    (
                        f"follower lag at 1,000 events/s ({len(lags)} events)",
                        f"p50 {sorted(lags)[len(lags) // 2] * 1000:.1f}, p99 {p99(lags) * 1000:.1f} ms",
                        "p99 <= 100 ms",
                    )
                )
            for r in (*reps, follower):
                await r.close()

        # 4. hydrating 50k objects; memory per object
        if "hydrate" not in args.parts:
            return rows
        async with FakeCluster() as big, anyio.create_task_group() as tg:
            big.create_many("pods", (make_pod(f"p-{i}", size=2000) for i in range(args.objects)))
            kc = str(write_kubeconfig(tmp / "big", {"big": big}))
            base = [redis.url, kc, "big", "pods", "--lease-ttl", "3"]
            mem0 = used_memory(redis)
            leader = Replica("big-leader", base)
            await leader.start(tg)
            await started([leader], 300)
            dump = await leader.dump(60)
            json_bytes = dump["json_bytes"]
            n = len(dump["objects"])
            # the snapshot is written after the leader reports started: wait for it
            with anyio.fail_after(120):
                while used_memory(redis) - mem0 < json_bytes:  # noqa: ASYNC110
                    await anyio.sleep(0.2)
            follower = Replica("big-follower", [*base, "--no-lead"])
            await follower.start(tg)
            await started([follower], 120)
            hydrate = next(e for e in follower.events if e["op"] == "started")["elapsed"]
            redis_mem = used_memory(redis) - mem0
            fdump = await follower.dump(60)
            rows.append((f"hydrating a follower, {n} objects", f"{hydrate:.2f} s", "<= 2 s"))
            rows.append(
                ("Redis memory per object / its JSON", f"{redis_mem / json_bytes:.2f}x", "<= 1.5x")
            )
            rows.append(
                (
                    "follower store per object / its JSON",
                    f"{fdump['store_bytes'] / json_bytes:.2f}x",
                    "<= 1.1x",
                )
            )
            rows.append(
                (
                    "(leader's own informer store, for reference)",
                    f"{dump['store_bytes'] / json_bytes:.2f}x",
                    "",
                )
            )
            for r in (leader, follower):
                await r.close()
    finally:
        redis.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--objects", type=int, default=50_000)
    parser.add_argument("--lag-seconds", type=float, default=10.0)
    parser.add_argument(
        "--parts",
        type=lambda v: set(v.split(",")),
        default={"watches", "failover", "lag", "hydrate"},
        help="comma-separated subset of: watches,failover,lag,hydrate",
    )
    args = parser.parse_args()
    if REDIS_SERVER is None:
        sys.exit("bench/share.py needs redis-server (apt-get install -y redis-server)")
    rows = anyio.run(run, args)
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'measured':<26}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:<26}  {target}")


if __name__ == "__main__":
    main()
