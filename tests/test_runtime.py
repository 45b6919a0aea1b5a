"""kubemux refuses any async library but asyncio, at once and with a clear message."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import trio

from kubemux._runtime import require_asyncio


async def test_asyncio_is_accepted() -> None:
    require_asyncio("WatcherRegistry")  # no error


def test_anyio_on_asyncio_is_accepted() -> None:
    async def main() -> str:
        require_asyncio("WatcherRegistry")
        return "ok"

    assert anyio.run(main, backend="asyncio") == "ok"


def test_trio_is_refused() -> None:
    async def main() -> None:
        require_asyncio("WatcherRegistry")

    with pytest.raises(RuntimeError) as info:
        trio.run(main)
    message = str(info.value)
    assert "kubemux runs on asyncio" in message
    assert "aiohttp" in message
    assert "WatcherRegistry was used under trio" in message


def test_anyio_on_trio_is_refused() -> None:
    async def main() -> None:
        require_asyncio("WatcherRegistry")

    with pytest.raises(RuntimeError, match="WatcherRegistry was used under trio"):
        anyio.run(main, backend="trio")


def test_outside_an_event_loop_is_refused() -> None:
    with pytest.raises(RuntimeError, match="outside any async event loop"):
        require_asyncio("WatcherRegistry")


def test_registry_under_trio_fails_at_once_with_a_clear_error(tmp_path: Path) -> None:
    """Entering a WatcherRegistry under trio is a programming error, raised at once (it
    used to be reported as a cluster failure with a retry delay)."""
    from kubemux import WatcherRegistry

    async def main() -> None:
        async with WatcherRegistry({}):
            pass  # pragma: no cover - never reached

    with pytest.raises(RuntimeError, match="kubemux runs on asyncio") as info:
        anyio.run(main, backend="trio")
    assert "retry" not in str(info.value)
