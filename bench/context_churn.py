"""Context churn: do contexts that come and go through the kubeconfig leave anything behind?

Phase 1 (plain): 1,000 contexts are added and removed through kubeconfig rewrites, in rounds.
Each round writes the file with a batch of new contexts (spread over a few FakeClusters, many
contexts per cluster), waits until the registry (following the file with watchfiles) has
reconciled it, watches pods in every new context, then rewrites the file without them and
waits again. One context (``anchor``, never watched) stays in the file throughout. A warm-up
round runs first; the baselines (asyncio tasks; the heap under tracemalloc, after
gc.collect()) are taken after it.

Phase 2 (inline credentials): kind-style contexts whose credentials sit in the kubeconfig
(``certificate-authority-data``, ``client-certificate-data``, ``client-key-data``; a distinct
client certificate per context, as for short-lived clusters), churned the same way against a
TLS FakeCluster. kubernetes-asyncio turns each ``*-data`` field into a temporary file; this
phase counts the ones left behind.

Every wait is bounded; the script exits with status 1 if any row fails.

Usage: python bench/context_churn.py [--contexts 1000] [--batch 100] [--clusters 3]
                                     [--inline 100]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gc
import os
import sys
import tempfile
import time
import tracemalloc
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from _common import table
from kubernetes_asyncio.config import kube_config

from kubemux import WatcherRegistry
from kubemux.testing import (
    FakeCluster,
    FakeContext,
    kubeconfig_dict,
    make_pod,
    rewrite_kubeconfig,
    write_kubeconfig,
)

WAIT = 60.0  # upper bound on any single wait
MB = 1_000_000

# ---------------------------------------------------------------- aiohttp session tracking
_sessions: weakref.WeakSet[aiohttp.ClientSession] = weakref.WeakSet()
_sessions_created = 0
_orig_init = aiohttp.ClientSession.__init__


def _tracking_init(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
    global _sessions_created
    _orig_init(self, *args, **kwargs)
    _sessions.add(self)
    _sessions_created += 1


aiohttp.ClientSession.__init__ = _tracking_init  # type: ignore[method-assign]


def sessions_alive() -> tuple[int, int]:
    """(alive, open) aiohttp ClientSessions, after a full collection."""
    gc.collect()
    alive = list(_sessions)
    return len(alive), sum(1 for s in alive if not s.closed)


# ---------------------------------------------------------------- results
@dataclass
class Rows:
    rows: list[list[str]] = field(default_factory=list)
    failed: int = 0

    def check(self, what: str, value: str, target: str, ok: bool) -> None:
        self.rows.append([what, value, target, "PASS" if ok else "FAIL"])
        self.failed += not ok

    def info(self, what: str, value: str) -> None:
        self.rows.append([what, value, "", ""])


def mb(n: float) -> str:
    return f"{n / MB:+.3f} MB"


def heap() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def top_sites(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, n: int) -> None:
    """Print where the retained heap was allocated (for --top)."""
    print(f"largest retained allocation sites (top {n}):")
    for stat in after.compare_to(before, "traceback")[:n]:
        print(f"  {stat.size_diff:+,} B in {stat.count_diff:+,} blocks")
        for line in stat.traceback.format(limit=4):
            print(f"    {line}")


def other_tasks() -> set[asyncio.Task[Any]]:
    me = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not me and not t.done()}


async def tasks_settled(baseline: int) -> int:
    """Live tasks, once the ones that are already finishing have had a chance to finish."""
    for _ in range(50):
        if len(other_tasks()) <= baseline:
            break
        await asyncio.sleep(0)
    return len(other_tasks())


# ---------------------------------------------------------------- kubeconfig rounds
Specs = Mapping[str, FakeCluster | FakeContext]
Writer = Callable[[Path, Specs], None]


def write_plain(path: Path, contexts: Specs) -> None:
    write_kubeconfig(path, contexts)


async def churn_round(
    registry: WatcherRegistry,
    path: Path,
    base: Specs,
    batch: Specs,
    writer: Writer,
    clusters: list[FakeCluster],
) -> int:
    """Add ``batch``, watch pods in each, remove it; returns the live entries at the peak."""
    await rewrite_kubeconfig(
        registry, path, {**base, **batch}, writer=writer, present=batch, sync_timeout=WAIT
    )
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            for name in batch:
                tg.start_soon(registry.watch, name, "pods")
        want = len(batch)
        await clusters[0].wait_for(lambda: sum(c.open_watches for c in clusters) >= want, WAIT)
    peak = len(registry.live_contexts)
    await rewrite_kubeconfig(registry, path, base, writer=writer, absent=batch, sync_timeout=WAIT)
    return peak


async def wait_quiet(clusters: list[FakeCluster]) -> None:
    def quiet() -> bool:
        return all(c.open_connections == 0 and c.open_watches == 0 for c in clusters)

    await clusters[0].wait_for(quiet, WAIT)
    for c in clusters:
        c.clear_requests()  # the fake records every request: not ours to count


@contextlib.asynccontextmanager
async def running_clusters(n: int, *, tls: bool = False) -> AsyncIterator[list[FakeCluster]]:
    async with contextlib.AsyncExitStack() as stack:
        clusters = []
        for i in range(n):
            c = await stack.enter_async_context(FakeCluster(tls=tls, name=f"churn-{i}"))
            c.create_many("pods", [make_pod(f"web-{k}") for k in range(5)])
            clusters.append(c)
        yield clusters


# ---------------------------------------------------------------- phase 1
async def phase_plain(contexts: int, batch: int, n_clusters: int, top: int) -> Rows:
    out = Rows()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kubemux-churn-") as tmp:
        path = Path(tmp) / "config"
        async with running_clusters(n_clusters) as clusters:
            base: dict[str, FakeCluster | FakeContext] = {"anchor": clusters[0]}
            write_plain(path, base)

            def make_batch(start: int, size: int) -> dict[str, FakeCluster | FakeContext]:
                return {f"ctx-{k}": clusters[k % len(clusters)] for k in range(start, start + size)}

            async with WatcherRegistry.from_kubeconfig(str(path), debounce_delay=0.05) as registry:
                # warm-up: one-off imports, interned strings, thread pool, first sessions
                await churn_round(
                    registry, path, base, make_batch(-batch, batch), write_plain, clusters
                )
                await wait_quiet(clusters)
                task_base = await tasks_settled(0)
                created_base = _sessions_created
                tracemalloc.start(8 if top else 1)
                heap_base = heap()
                snap_base = tracemalloc.take_snapshot() if top else None
                syncs_base = registry.kubeconfig_syncs

                peak = 0
                rounds = 0
                for start in range(0, contexts, batch):
                    size = min(batch, contexts - start)
                    peak = max(
                        peak,
                        await churn_round(
                            registry,
                            path,
                            base,
                            make_batch(start, size),
                            write_plain,
                            clusters,
                        ),
                    )
                    rounds += 1

                await wait_quiet(clusters)
                tasks_after = await tasks_settled(task_base)
                heap_after = heap()
                if snap_base is not None:
                    top_sites(snap_base, tracemalloc.take_snapshot(), top)
                tracemalloc.stop()
                sizes = registry._structure_sizes()
                alive, still_open = sessions_alive()
                connections = sum(c.open_connections for c in clusters)
                watches = sum(c.open_watches for c in clusters)

                out.info(
                    "contexts added, watched, removed",
                    f"{contexts:,} in {rounds} rounds over {n_clusters} clusters",
                )
                out.info("kubeconfig syncs reconciled", f"{registry.kubeconfig_syncs - syncs_base}")
                out.info("live entries at the peak of a round", f"{peak}")
                out.check(
                    "registry.live_contexts",
                    str(len(registry.live_contexts)),
                    "0",
                    not registry.live_contexts,
                )
                for key, value in sizes.items():
                    out.check(f"_structure_sizes()[{key!r}]", str(value), "0", value == 0)
                out.check(
                    "registry.contexts (what the file says now)",
                    str(len(registry.contexts)),
                    "1",
                    list(registry.contexts) == ["anchor"],
                )
                out.check(
                    "asyncio tasks",
                    f"{tasks_after} (baseline {task_base})",
                    f"{task_base}",
                    tasks_after <= task_base,
                )
                out.check("FakeCluster open connections", str(connections), "0", connections == 0)
                out.check("FakeCluster open watches", str(watches), "0", watches == 0)
                out.info("aiohttp ClientSessions created", f"{_sessions_created - created_base:,}")
                out.check(
                    "aiohttp ClientSessions alive (open)",
                    f"{alive} ({still_open})",
                    "0 (0)",
                    alive == 0 and still_open == 0,
                )
                delta = heap_after - heap_base
                out.check(
                    "heap delta vs warm-up (tracemalloc)",
                    f"{mb(delta)} ({delta / contexts:+,.0f} B/context)",
                    "< 1 MB",
                    delta < MB,
                )
    out.info("time", f"{time.perf_counter() - started:.1f} s")
    return out


# ---------------------------------------------------------------- phase 2
@dataclass
class InlineCredentials:
    """kind-style contexts: CA, client certificate and key inline, one client cert each."""

    cluster: FakeCluster
    ca_data: str
    issuer: Any
    certs: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def for_cluster(cls, cluster: FakeCluster) -> InlineCredentials:
        import trustme

        assert cluster.ca_file is not None
        ca_data = base64.b64encode(Path(cluster.ca_file).read_bytes()).decode()
        return cls(cluster, ca_data, trustme.CA())

    def user_data(self, name: str) -> tuple[str, str]:
        if name not in self.certs:
            leaf = self.issuer.issue_cert(f"{name}.users.kubemux.test")
            cert = b"".join(p.bytes() for p in leaf.cert_chain_pems)
            key = leaf.private_key_pem.bytes()
            self.certs[name] = (base64.b64encode(cert).decode(), base64.b64encode(key).decode())
        return self.certs[name]

    def write(self, path: Path, contexts: Specs) -> None:
        data = kubeconfig_dict(contexts)
        for entry in data["clusters"]:
            cluster = entry["cluster"]
            cluster.pop("certificate-authority", None)
            cluster["certificate-authority-data"] = self.ca_data
        for entry in data["users"]:
            cert, key = self.user_data(entry["name"])
            entry["user"] = {"client-certificate-data": cert, "client-key-data": key}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config.")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yaml.dump(data, handle, Dumper=yaml.CSafeDumper, sort_keys=False)
        os.replace(tmp, path)


def temp_files() -> dict[str, str]:
    return dict(kube_config._temp_files)


def on_disk(paths: Iterable[str]) -> tuple[list[str], list[str]]:
    """The paths that exist, and those of them that hold a private key."""
    existing = [p for p in paths if os.path.exists(p)]
    return existing, [p for p in existing if b"PRIVATE KEY" in Path(p).read_bytes()]


async def phase_inline(contexts: int, batch: int) -> Rows:
    out = Rows()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kubemux-churn-") as tmp:
        path = Path(tmp) / "config"
        async with running_clusters(1, tls=True) as clusters:
            creds = InlineCredentials.for_cluster(clusters[0])
            base: dict[str, FakeCluster | FakeContext] = {"anchor": clusters[0]}
            creds.write(path, base)

            def make_batch(start: int, size: int) -> dict[str, FakeCluster | FakeContext]:
                return {f"kind-{k}": clusters[0] for k in range(start, start + size)}

            for start in range(-1, contexts):  # certificates are issued outside the timing
                creds.user_data(f"kind-{start}-user")
            files_before = temp_files()
            async with WatcherRegistry.from_kubeconfig(str(path), debounce_delay=0.05) as registry:
                await churn_round(registry, path, base, make_batch(-1, 1), creds.write, clusters)
                await wait_quiet(clusters)
                tracemalloc.start()
                heap_base = heap()
                for start in range(0, contexts, batch):
                    size = min(batch, contexts - start)
                    await churn_round(
                        registry, path, base, make_batch(start, size), creds.write, clusters
                    )
                await wait_quiet(clusters)
                heap_after = heap()
                tracemalloc.stop()
                entries = len(registry.live_contexts)
                alive, still_open = sessions_alive()
            new_files = {k: v for k, v in temp_files().items() if k not in files_before}
            left, key_files = on_disk(new_files.values())
            out.info("kind-style contexts added, watched, removed", f"{contexts:,}")
            out.check("registry.live_contexts", str(entries), "0", entries == 0)
            out.check(
                "aiohttp ClientSessions alive (open)",
                f"{alive} ({still_open})",
                "0 (0)",
                alive == 0 and still_open == 0,
            )
            out.check(
                "kubernetes-asyncio temp files left on disk",
                f"{len(left):,} ({len(key_files):,} hold a private key)",
                "0",
                not left,
            )
            out.check(
                "kube_config._temp_files entries added",
                f"{len(new_files):,} (keys: {sum(map(len, new_files)) / 1e3:,.0f} KB of base64)",
                "0",
                not new_files,
            )
            delta = heap_after - heap_base
            out.check(
                "heap delta vs warm-up (tracemalloc)",
                f"{mb(delta)} ({delta / contexts:+,.0f} B/context)",
                "< 1 MB",
                delta < MB,
            )
            # Our own mess: remove the files this run left behind (kubernetes-asyncio would
            # only do it at interpreter exit).
            for content, name in new_files.items():
                kube_config._temp_files.pop(content, None)
                with contextlib.suppress(OSError):
                    os.remove(name)
    out.info("time", f"{time.perf_counter() - started:.1f} s")
    return out


# ---------------------------------------------------------------- main
async def run(args: argparse.Namespace) -> int:
    header = ["measure", "value", "target", "result"]
    failed = 0
    with anyio.fail_after(args.time_limit):
        plain = await phase_plain(args.contexts, args.batch, args.clusters, args.top)
    print(
        table(
            f"context churn: {args.contexts:,} contexts through kubeconfig rewrites "
            f"(batches of {args.batch}, {args.clusters} FakeClusters, watchfiles following)",
            header,
            plain.rows,
        )
    )
    failed += plain.failed
    if args.inline:
        with anyio.fail_after(args.time_limit):
            inline = await phase_inline(args.inline, min(args.batch, args.inline))
        print()
        print(
            table(
                f"inline credentials: {args.inline:,} kind-style contexts (CA, client cert and "
                "key as *-data) against a TLS FakeCluster",
                header,
                inline.rows,
            )
        )
        failed += inline.failed
    print(f"\n{'all rows pass' if not failed else f'{failed} row(s) FAIL'}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--contexts", type=int, default=1000, help="contexts to churn")
    parser.add_argument("--batch", type=int, default=100, help="contexts per round")
    parser.add_argument("--clusters", type=int, default=3, help="FakeClusters they point at")
    parser.add_argument(
        "--inline", type=int, default=100, help="kind-style contexts to churn (0: skip)"
    )
    parser.add_argument("--top", type=int, default=0, help="print the top retained sites")
    parser.add_argument("--time-limit", type=float, default=300.0, help="seconds per phase")
    args = parser.parse_args(argv)
    sys.exit(anyio.run(run, args))


if __name__ == "__main__":
    main()
