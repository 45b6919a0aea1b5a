"""Shared helpers for the benchmarks: a server subprocess and table printing."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def server(
    n: int, size: int = 2000, chunk_buffer: int = 2048, churn: float = 0.0
) -> Iterator[tuple[str, str, str]]:
    """Run bench/_server.py; yields (server URL, rv before the pods, rv after them). With
    ``churn``, the server changes a pod every ``churn`` seconds."""
    args = [str(n), str(size), str(chunk_buffer), str(churn)]
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "_server.py"), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if not line or line[0] != "READY":
            raise RuntimeError("bench server failed to start")
        yield line[1], line[2], line[3]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


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
