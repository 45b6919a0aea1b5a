"""Shared helpers for the benchmarks: a server subprocess and table printing; for the
informer benchmarks (hot_loop.py, table.py), a watch downloaded once, cut into blocks and
replayed from memory into the real informer."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def ready_process(command: list[str], what: str) -> Iterator[list[str]]:
    """Run ``command`` (a server); yields the words after READY on its first line. Closing
    its stdin stops it (killed after 10 s)."""
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if not line or line[0] != "READY":
            raise RuntimeError(f"{what} failed to start")
        yield line[1:]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def server(
    n: int, size: int = 2000, chunk_buffer: int = 2048, churn: float = 0.0
) -> Iterator[tuple[str, str, str]]:
    """Run bench/_server.py; yields (server URL, rv before the pods, rv after them). With
    ``churn``, the server changes a pod every ``churn`` seconds."""
    args = [str(n), str(size), str(chunk_buffer), str(churn)]
    with ready_process([sys.executable, str(HERE / "_server.py"), *args], "bench server") as words:
        yield words[0], words[1], words[2]


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    """A plain-text table."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = [title, "", "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), line]
    for r in rows:
        cells = [
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append("  ".join(cells))
    return "\n".join(out)


def rss() -> int:
    """This process's resident memory, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def download_watch(
    url: str, rv: str, n: int, headers: Mapping[str, str] | None = None, **params: str
) -> bytes:
    """The first ``n`` lines of a pod watch from ``rv``."""
    import aiohttp

    query = {"watch": "true", "resourceVersion": rv, **params}
    parts: list[bytes] = []
    lines = 0
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/api/v1/pods", params=query, headers=headers) as resp,
    ):
        while lines < n:
            chunk = await resp.content.readany()
            if not chunk:
                break
            parts.append(chunk)
            lines += chunk.count(b"\n")
    data = b"".join(parts)
    cut = 0
    for _ in range(n):
        cut = data.index(b"\n", cut) + 1
    return data[:cut]


def line_blocks(data: bytes, size: int, *, copy: bool) -> list[tuple[bytes, int, int]]:
    """``data`` in blocks of whole lines of about ``size`` bytes, as (buffer, start, end):
    with ``copy`` each block its own bytes (as a socket read gives them), else slices of
    ``data`` itself."""
    out = []
    start = 0
    while start < len(data):
        end = data.rfind(b"\n", start, start + size) + 1
        if end <= start:
            end = data.index(b"\n", start) + 1
        if copy:
            piece = data[start:end]
            out.append((piece, 0, len(piece)))
        else:
            out.append((data, start, end))
        start = end
    return out


class EventCount:
    """Counts the changes a store announces; ``done`` is set at the ``n``-th change. Hand
    :meth:`informer_args` to the ``Informer``."""

    def __init__(self, n: int) -> None:
        import anyio

        self.n = n
        self.count = 0
        self.done = anyio.Event()

    def __call__(self, *_: Any) -> None:
        self.count += 1
        if self.count >= self.n:
            self.done.set()

    def informer_args(self, store: Any) -> dict[str, Any]:
        """``store=`` (listened to) for an ``Informer``; ``on_change=`` too on a tree from
        before the store's change stream (issue 30), for A/B runs against one."""
        try:
            from kubemux import StoreListener
        except ImportError:
            return {"store": store, "on_change": self}

        count = self

        class Counting(StoreListener):  # counts inline: one call per change, as on_change
            def changed(self, change: Any) -> None:
                count.count += 1
                if count.count >= count.n:
                    count.done.set()

        store.writer.add_listener(Counting())
        return {"store": store}


def open_watch_of(informer: Any) -> tuple[Any, str]:
    """(object, attribute name) of an informer's watch request, to time or replay it: its
    lister's ``open_watch`` (its own ``_open_watch`` on a tree from before issue 30)."""
    lister = getattr(informer, "lister", None)
    return (lister, "open_watch") if lister is not None else (informer, "_open_watch")


async def replay_watch(
    informer: Any, blocks: Sequence[tuple[bytes, int, int]], rv: str, events: EventCount
) -> tuple[float, float]:
    """Feed ``blocks`` to the real ``informer._watch_once`` as its watch from ``rv`` (no
    socket), until ``events`` is done: (wall seconds, process CPU seconds)."""
    import anyio

    @contextlib.asynccontextmanager
    async def replay(params: Any) -> AsyncIterator[AsyncIterator[Any]]:
        async def gen() -> AsyncIterator[Any]:
            for block in blocks:
                yield block
            await anyio.sleep_forever()

        yield gen()

    setattr(*open_watch_of(informer), replay)
    informer._rv = rv
    async with anyio.create_task_group() as tg:
        cpu, wall = time.process_time(), time.perf_counter()
        tg.start_soon(informer._watch_once)
        await events.done.wait()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        tg.cancel_scope.cancel()
    return wall, cpu
