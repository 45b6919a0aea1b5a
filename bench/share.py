"""Shared watches through Redis, measured with real processes (issue 13).

One run: a redis-server on a free port (persistence off), FakeClusters in this process, and
replica processes (tests/share_replica.py), each with its own share session and informer.

    python bench/share.py [--kills 20] [--objects 50000] [--parts hydrate]
    python bench/share.py --quick            # the placement rows, 12 clusters x 3 replicas
    python bench/share.py --parts placement --placement 12x3,12x5,100x3,100x5

``--parts hydrate`` runs only the hydration and memory rows (about a minute).

Prints one table: watches per resource for N = 1, 3, 10 replicas, LISTs on failover,
failover time (SIGKILL to the new leader watching) p99, follower lag at 1,000 events/s p99,
hydrating a follower with 50k objects, Redis and follower memory per object.

The placement rows (issue 22, ``--parts placement``): M clusters (FakeClusters in processes
of their own, 25 per process, one pod of each changing every ``--churn`` seconds, each
cluster on its own phase; ``--burst``: all of a process's clusters at the same instant) and N
registry replicas (this file run with ``--replica``: a ``WatcherRegistry`` autowatching pods
in every context with ``share=Redis(...)``, reporting each context's share role), plus one
follower-only replica (``share_lead=False``) measuring each change's lag from the cluster's
write to its subscriber, and a registry watching every cluster itself (no share: the peer,
what sharing adds to). Per (M, N): the leaders per replica once every slot has one, after
a SIGKILL of the busiest (once every slot has a leader again, plus one lease period and a
grace period of one lease period), after a replica joins (the newcomer first; waited for
until it leads its share, at most ``--join-wait`` seconds), the LISTs the clusters received
after the start, the follower's lag p99 (steady for ``--steady`` seconds; from the kill to
the join, the failover's gap included; from the join to the end, and from the newcomer's
first role, when its handovers begin, to the end), and the
failover time p99 (SIGKILL to a survivor leading, per slot the killed replica led).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import signal
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import orjson

from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from share_support import REDIS_SERVER, RedisServer, Replica

HERE = Path(__file__).resolve()
TOKEN = "bench-placement-token"


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * 0.99))] if s else float("nan")


def lag_row(lags: list[float]) -> str:
    """p99 and, to tell a shifted distribution from a few slow events, the median."""
    median = sorted(lags)[len(lags) // 2] if lags else float("nan")
    return f"{p99(lags) * 1000:.1f} ms (p50 {median * 1000:.0f})"


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


async def classic_rows(
    args: argparse.Namespace, redis: RedisServer, tmp: Path, rows: list[tuple[str, str, str]]
) -> None:
    """Rows of issue 13: watches per resource, failover, follower lag (one FakeCluster here)."""
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


async def run(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    redis = RedisServer()
    redis.start()
    tmp = Path(tempfile.mkdtemp(prefix="kubemux-share-bench-"))
    try:
        if args.parts & {"watches", "failover", "lag"}:
            await classic_rows(args, redis, tmp, rows)
        if "placement" in args.parts:
            rows.extend(await placement_rows(args, redis, tmp))

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


# ---------------------------------------------------------------------- placement (issue 22)
CLUSTERS_PER_PROCESS = 25


async def serve_clusters(n: int, pods: int, churn: float, burst: bool) -> None:
    """``--serve-clusters``: n FakeClusters (token auth) in this process; prints their URLs,
    changes one pod of each every ``churn`` seconds (label ``t``: the wall-clock time of the
    write), answers ``lists`` on stdin with the LISTs they received, exits when stdin closes."""
    async with AsyncExitStack() as stack:
        clusters = []
        for i in range(n):
            c = await stack.enter_async_context(
                FakeCluster(tokens={TOKEN}, name=f"fake-{i}", bookmark_period=5.0)
            )
            c.create_many("pods", [make_pod(f"pod-{k}", size=500) for k in range(pods)])
            clusters.append(c)
        sys.stdout.buffer.write(orjson.dumps({"servers": [c.server for c in clusters]}) + b"\n")
        sys.stdout.buffer.flush()

        async def change() -> None:
            tick = 0
            while True:
                if burst:
                    await anyio.sleep(churn)
                for c in clusters:
                    if not burst:  # each cluster on its own phase, as clusters are
                        await anyio.sleep(churn / len(clusters))
                    pod = c.get("pods", "default", f"pod-{tick % pods}")
                    if pod is not None:
                        pod["metadata"].setdefault("labels", {})["t"] = f"{time.time():.6f}"
                        c.update("pods", pod)
                tick += 1

        async with anyio.create_task_group() as tg:
            if churn > 0:
                tg.start_soon(change)
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader()
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
            while line := (await reader.readline()).strip():
                if line == b"lists":
                    out = {"op": "lists", "lists": sum(lists(c) for c in clusters)}
                    sys.stdout.buffer.write(orjson.dumps(out) + b"\n")
                    sys.stdout.buffer.flush()
            tg.cancel_scope.cancel()


async def replica(args: argparse.Namespace) -> None:
    """``--replica REDIS KUBECONFIG``: a registry replica autowatching pods in every context.

    Reports ``{"op": "roles", "roles": {context: role}, "t": ...}`` whenever a synced
    informer's share role changes (the registry's own ``status()``: the reporting hook of
    this bench, nothing added to kubemux), ``{"op": "started"}`` once every context has
    synced, and with ``--lags`` answers ``dump`` with the lag of every change seen (wall
    clock of its write in the cluster to this subscriber)."""
    from kubemux import SubscriberOverflow, WatcherRegistry
    from kubemux._settings import Backoff, WatchSettings
    from kubemux.share import Redis

    def emit(**fields: Any) -> None:
        sys.stdout.buffer.write(orjson.dumps(fields) + b"\n")
        sys.stdout.buffer.flush()

    redis_url, kubeconfig = args.replica
    registry = WatcherRegistry.from_kubeconfig(
        kubeconfig,
        follow=False,
        autowatch=["pods"],
        settings=WatchSettings(backoff=Backoff(initial_delay=0.1, max_delay=1.0)),
        start_backoff=Backoff(initial_delay=0.1, max_delay=1.0),
        share=None
        if args.no_share  # the peer: each change straight from its cluster's watch
        else Redis(
            redis_url,
            prefix=args.prefix,
            lease_ttl=args.lease_ttl,
            acquire_period=args.acquire_period,
        ),
        share_lead=not args.no_lead,
    )
    lags: list[tuple[float, float]] = []  # (when seen, lag)
    async with registry, anyio.create_task_group() as tg:

        async def report() -> None:
            # On each status change (a role change is one), not on a timer: status() of 100
            # contexts costs ~18 ms, and polling it 20 times a second was a third of each
            # replica's CPU, the bench's own load in the lag it measured.
            last: dict[str, str | None] | None = None
            said_started = False
            while True:
                version = registry.status_version
                roles: dict[str, str | None] = {}
                for name, ctx in registry.status().contexts.items():
                    for inf in ctx.informers:
                        if inf.has_synced:
                            roles[name] = inf.share_role
                if roles != last:
                    emit(op="roles", roles=roles, t=time.time())
                    last = roles
                if not said_started and len(roles) == len(registry.contexts):
                    emit(op="started")
                    said_started = True
                with anyio.move_on_after(1.0):  # a backstop, should a change not signal
                    await registry.wait_status_change(version)

        async def measure() -> None:
            while True:  # the start's ADDEDs may overflow a loaded process: subscribe again
                try:
                    async with registry.subscribe(
                        resource="pods", snapshot=False, buffer_size=100_000
                    ) as changes:
                        async for change in changes:
                            if change.type != "MODIFIED":
                                continue
                            obj = change.object or {}
                            stamp = (obj.get("metadata", {}).get("labels") or {}).get("t")
                            if stamp is not None:
                                now = time.time()
                                lags.append((now, now - float(stamp)))
                except SubscriberOverflow:
                    emit(op="overflow", t=time.time())

        tg.start_soon(report)
        if args.lags:
            tg.start_soon(measure)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).strip():
            if line == b"dump":
                emit(op="dump", lags=lags)
        tg.cancel_scope.cancel()


def roles_of(r: Replica) -> dict[str, str | None]:
    found = [e["roles"] for e in r.events if e["op"] == "roles"]
    return found[-1] if found else {}


def led(r: Replica) -> set[str]:
    return {ctx for ctx, role in roles_of(r).items() if role == "leader"}


def first_led_after(r: Replica, ctx: str, t0: float) -> float | None:
    for e in r.events:
        if e["op"] == "roles" and e["t"] >= t0 and e["roles"].get(ctx) == "leader":
            return float(e["t"])
    return None


def counts(reps: list[Replica]) -> str:
    return ", ".join(str(len(led(r))) for r in reps)


class ClusterProcess(Replica):
    """A process of FakeClusters (this file with ``--serve-clusters``)."""

    def servers(self) -> list[str]:
        return next(e["servers"] for e in self.events if "servers" in e)

    async def lists(self) -> int:
        assert self.proc is not None and self.proc.stdin is not None
        n = sum(1 for e in self.events if e.get("op") == "lists")
        await self.proc.stdin.send(b"lists\n")
        await self.wait(lambda: sum(1 for e in self.events if e.get("op") == "lists") > n, 30)
        return int([e for e in self.events if e.get("op") == "lists"][-1]["lists"])


async def placement_case(
    args: argparse.Namespace, redis: RedisServer, tmp: Path, m: int, n: int
) -> list[tuple[str, str, str]]:
    ttl = args.lease_ttl
    grace = ttl  # the grace period of the design in docs/sharing.md ("Placement")
    tag = f"{m} clusters x {n} replicas"
    reps: list[Replica] = []
    procs: list[ClusterProcess] = []
    async with anyio.create_task_group() as tg:
        try:
            for i in range(math.ceil(m / CLUSTERS_PER_PROCESS)):
                k = min(CLUSTERS_PER_PROCESS, m - i * CLUSTERS_PER_PROCESS)
                proc = ClusterProcess(
                    f"clusters-{i}",
                    ["--serve-clusters", str(k), "--churn", str(args.churn)]
                    + (["--burst"] if args.burst else []),
                    script=HERE,
                )
                await proc.start(tg)
                procs.append(proc)
            servers: list[str] = []
            for proc in procs:
                await proc.wait(lambda proc=proc: any("servers" in e for e in proc.events), 60)
                servers += proc.servers()
            contexts = {
                f"c-{i:03d}": FakeContext(cluster=s, token=TOKEN) for i, s in enumerate(servers)
            }
            kc = str(write_kubeconfig(tmp / f"placement-{m}x{n}", contexts))
            prefix = f"bench-{m}x{n}-{time.time_ns()}"  # nothing left by an earlier case
            common = [
                "--prefix", prefix, "--lease-ttl", str(ttl),
                "--acquire-period", str(args.acquire_period),
            ]  # fmt: skip

            def make(name: str, *extra: str) -> Replica:
                r = Replica(name, ["--replica", redis.url, kc, *common, *extra], script=HERE)
                reps.append(r)
                return r

            def all_led(group: list[Replica]) -> bool:
                return len({c for r in group for c in led(r)}) == m

            def led_once(group: list[Replica]) -> bool:
                """Every slot led by exactly one replica (no handover half reported)."""
                seen = [c for r in group for c in led(r)]
                return len(seen) == m and len(set(seen)) == m

            async def settle(group: list[Replica]) -> str:
                """Empty once every slot has a leader in group, else what was seen."""
                limit = args.settle_timeout
                with anyio.move_on_after(limit):
                    await group[0].wait(lambda: all_led(group), limit + 1)
                    return ""
                covered = len({c for r in group for c in led(r)})
                return f" (only {covered} of {m} slots led after {limit:.0f} s)"

            # 1. N replicas started together
            leading = [make(f"r{i}") for i in range(n)]
            for r in leading:
                await r.start(tg)
            follower = make("follower", "--no-lead", "--lags")
            await follower.start(tg)
            direct = make("direct", "--no-share", "--lags")  # the peer, in the same run
            await direct.start(tg)
            await started([*leading, follower, direct], 300)
            unled = await settle(leading)
            t_led = time.time()
            first_leaders = counts(leading) + unled
            bound = (lambda c: max(c) - min(c) <= 1) if (m, n) == (12, 3) else (
                lambda c: max(c) <= 1.25 * m / n
            )  # fmt: skip
            with anyio.move_on_after(args.join_wait):  # handovers spread the first-come leaders
                await follower.wait(
                    lambda: led_once(leading) and bound([len(led(r)) for r in leading]),
                    args.join_wait + 1,
                )
            settled = time.time() - t_led
            after_start = counts(leading)
            lists_at_start = sum([await p.lists() for p in procs])
            t_steady = time.time()
            await anyio.sleep(args.steady)  # the follower's lag before anything happens

            # 2. SIGKILL the busiest
            victim = max(leading, key=lambda r: len(led(r)))
            its_slots = led(victim)
            survivors = [r for r in leading if r is not victim]
            t_kill = time.time()
            victim.signal(signal.SIGKILL)
            unsettled = await settle(survivors)
            failovers = []
            for ctx in its_slots:
                times = [t for r in survivors if (t := first_led_after(r, ctx, t_kill))]
                if times:
                    failovers.append(min(times) - t_kill)
            await anyio.sleep(ttl + grace)  # the survivors' rebalancing time (design)
            after_kill = counts(survivors) + unsettled

            # 3. a replica joins
            newcomer = make("newcomer")
            t_join = time.time()
            await newcomer.start(tg)
            await started([newcomer], 300)
            group = [newcomer, *survivors]
            share = m // len(group)
            with anyio.move_on_after(max(0.0, args.join_wait - (time.time() - t_join))):
                await newcomer.wait(lambda: len(led(newcomer)) >= share, args.join_wait + 1)
            waited = time.time() - t_join
            unsettled = await settle(group)
            with anyio.move_on_after(ttl + grace):  # the old leaders report their handovers
                await newcomer.wait(lambda: led_once(group), ttl + grace + 1)
            after_join = counts(group) + unsettled
            lists_after = sum([await p.lists() for p in procs]) - lists_at_start
            seen = (await follower.dump(60))["lags"]
            peer_seen = (await direct.dump(60))["lags"]
            peer = [lag for t, lag in peer_seen if t_steady <= t < t_kill]
            peer_joining = [lag for t, lag in peer_seen if t >= t_join]
            # the handovers begin at the newcomer's first role; before it, the row above
            # also holds its process start (imports, 100 connections, hydration)
            firsts = [e["t"] for e in newcomer.events if e["op"] == "roles" and e["roles"]]
            t_first = min(firsts) if firsts else t_join
            handing = [lag for t, lag in seen if t >= t_first]
            peer_handing = [lag for t, lag in peer_seen if t >= t_first]
            steady = [lag for t, lag in seen if t_steady <= t < t_kill]
            failing = [lag for t, lag in seen if t_kill <= t < t_join]
            joining = [lag for t, lag in seen if t >= t_join]
            target = "max - min <= 1" if (m, n) == (12, 3) else f"max <= {1.25 * m / n:.1f}"
            # the survivors' bound: N - 1 replicas
            kill_target = (
                "max - min <= 1" if (m, n) == (12, 3) else f"max <= {1.25 * m / (n - 1):.1f}"
            )
            rows = [
                (f"leaders per replica, {tag}: first come", first_leaders, "(before handovers)"),
                (f"  after start (+{settled:.0f} s of handovers)", after_start, target),
                (
                    f"  after SIGKILL of the busiest (+{ttl + grace:.0f} s)",
                    after_kill,
                    f"balanced ({kill_target}) within lease + grace",
                ),
                (
                    f"  after a join (newcomer first, {waited:.0f} s)",
                    after_join,
                    f"newcomer leads {share} within 30 s",
                ),
                ("  LISTs after the start (kill, join)", str(lists_after), "0"),
                (
                    f"  follower lag p99: steady ({len(steady)} events)",
                    lag_row(steady),
                    "<= 100 ms",
                ),
                (
                    f"  peer: a registry watching each cluster itself ({len(peer)})",
                    lag_row(peer),
                    "(what sharing adds to)",
                ),
                (
                    f"  follower lag p99: SIGKILL to the join ({len(failing)})",
                    lag_row(failing),
                    "(the failover's gap included)",
                ),
                (
                    f"  follower lag p99: the join, from its start ({len(joining)})",
                    lag_row(joining),
                    f"(peer: {lag_row(peer_joining)})",
                ),
                (
                    f"  follower lag p99: the handovers, +{t_first - t_join:.1f} s on ({len(handing)})",
                    lag_row(handing),
                    f"<= 100 ms (peer: {lag_row(peer_handing)})",
                ),
                (
                    f"  failover time p99 ({len(failovers)} of {len(its_slots)} slots)",
                    f"{p99(failovers):.2f} s",
                    "<= 5 s",
                ),
            ]
            return rows
        finally:
            for r in reps:
                await r.close()
            for p in procs:
                await p.close()
            tg.cancel_scope.cancel()


async def placement_rows(
    args: argparse.Namespace, redis: RedisServer, tmp: Path
) -> list[tuple[str, str, str]]:
    rows = []
    for case in args.placement.split(","):
        m, n = (int(x) for x in case.split("x"))
        case_rows = await placement_case(args, redis, tmp, m, n)
        for name, value, target in case_rows:  # as each case ends: a long run shows progress
            print(f"{name}: {value} (target: {target})", file=sys.stderr, flush=True)
        rows += case_rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--objects", type=int, default=50_000)
    parser.add_argument("--lag-seconds", type=float, default=10.0)
    parser.add_argument(
        "--parts",
        type=lambda v: set(v.split(",")),
        default={"watches", "failover", "lag", "hydrate", "placement"},
        help="comma-separated subset of: watches,failover,lag,hydrate,placement",
    )
    parser.add_argument(
        "--quick", action="store_true", help="only the placement rows, 12x3, 10 s join wait"
    )
    parser.add_argument(
        "--placement", default="12x3,12x5,100x3,100x5", help="clusters x replicas cases"
    )
    parser.add_argument("--join-wait", type=float, default=30.0)
    parser.add_argument(
        "--settle-timeout", type=float, default=120.0, help="seconds for every slot to be led"
    )
    parser.add_argument("--steady", type=float, default=10.0, help="seconds before the kill")
    parser.add_argument("--churn", type=float, default=1.0, help="seconds between changes")
    parser.add_argument(
        "--burst",
        action="store_true",
        help="every cluster of a process changes at the same instant (a stress: by default "
        "each has its own phase in the period)",
    )
    parser.add_argument("--lease-ttl", type=float, default=3.0)
    parser.add_argument("--acquire-period", type=float, default=0.5)
    # the processes this bench starts
    parser.add_argument("--serve-clusters", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--replica", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default="kubemux", help=argparse.SUPPRESS)
    parser.add_argument("--no-lead", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-share", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lags", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_clusters:
        anyio.run(serve_clusters, args.serve_clusters, 20, args.churn, args.burst)
        return
    if args.replica:
        anyio.run(replica, args)
        return
    if args.quick:
        args.parts = {"placement"}
        args.placement = "12x3"
        args.join_wait = 10.0
        args.steady = 3.0
    if REDIS_SERVER is None:
        sys.exit("bench/share.py needs redis-server (apt-get install -y redis-server)")
    rows = anyio.run(run, args)
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'measured':<26}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:<26}  {target}")


if __name__ == "__main__":
    main()
