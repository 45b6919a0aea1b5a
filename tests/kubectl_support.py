"""The real kubectl in tests: which binary, one bounded run, one long-running process.

Each run gets ``--kubeconfig`` and a discovery cache beside that kubeconfig (``--cache-dir``,
named by ``cache``), so tests never share kubectl's cache with each other or with the user.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from support import TIMEOUT

__all__ = [
    "kubectl_argv",
    "kubectl_binary",
    "kubectl_process",
    "kubectl_version",
    "kubectl_versions",
    "run_kubectl",
]


def kubectl_binary() -> str | None:
    """kubectl 1.32 where it sits beside the one on PATH, else the one on PATH, or None."""
    found = shutil.which("kubectl")
    if not found:
        return None
    pinned = os.path.join(os.path.dirname(os.path.realpath(found)), "kubectl.1.32")
    return pinned if os.access(pinned, os.X_OK) else found


def kubectl_version(version: str) -> str | None:
    """kubectl ``version`` (``1.27``) where it sits beside the one on PATH, or None."""
    found = shutil.which("kubectl")
    if not found:
        return None
    path = os.path.join(os.path.dirname(os.path.realpath(found)), f"kubectl.{version}")
    return path if os.access(path, os.X_OK) else None


def kubectl_versions(*versions: str) -> list[Any]:
    """pytest params of those kubectl versions, each skipped where it is not installed."""
    return [
        pytest.param(
            v, marks=pytest.mark.skipif(kubectl_version(v) is None, reason=f"no kubectl {v}")
        )
        for v in versions
    ]


def kubectl_argv(kubectl: str, kubeconfig: Path, *args: str, cache: str = "cache") -> list[str]:
    """``kubectl --kubeconfig KUBECONFIG --cache-dir <beside it>/CACHE ARGS``."""
    cache_dir = str(kubeconfig.parent / cache)
    return [kubectl, "--kubeconfig", str(kubeconfig), "--cache-dir", cache_dir, *args]


async def run_kubectl(
    kubectl: str,
    kubeconfig: Path,
    *args: str,
    cache: str = "cache",
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    run_timeout: float = TIMEOUT,
) -> tuple[int, str, str]:
    """``kubectl ARGS`` with ``stdin``, bounded in time: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *kubectl_argv(kubectl, kubeconfig, *args, cache=cache),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    try:
        with anyio.fail_after(run_timeout):
            out, err = await proc.communicate(stdin)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@contextlib.asynccontextmanager
async def kubectl_process(
    kubectl: str, kubeconfig: Path, *args: str, cache: str = "cache"
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``kubectl ARGS`` running (stdout piped, stderr dropped) until the block ends, then
    killed if it is still running."""
    proc = await asyncio.create_subprocess_exec(
        *kubectl_argv(kubectl, kubeconfig, *args, cache=cache),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
