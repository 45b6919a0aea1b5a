"""Rewrite a kubeconfig and wait until a registry has reconciled it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from .kubeconfig_writer import write_kubeconfig

if TYPE_CHECKING:
    from ..._registry.registry import WatcherRegistry

__all__ = ["rewrite_kubeconfig"]


async def rewrite_kubeconfig(
    registry: WatcherRegistry,
    path: str | Path,
    contexts: Mapping[str, Any],
    *,
    present: Iterable[str] | None = None,
    absent: Iterable[str] = (),
    writer: Callable[[Path, Mapping[str, Any]], object] | None = None,
    sync_timeout: float = 10.0,
) -> None:
    """Write ``contexts`` to ``path`` and wait until ``registry`` has reconciled them.

    Waits for kubeconfig syncs until every name in ``present`` (default: every key of
    ``contexts``) is known and none of ``absent`` is; a sync that read the file half
    written is simply followed by another.

    Args:
        registry: An open registry following ``path``.
        path: The kubeconfig file.
        contexts: As for :func:`write_kubeconfig`.
        present: Contexts that must be known afterwards.
        absent: Contexts that must be gone afterwards.
        writer: Writes the file (default :func:`write_kubeconfig`); a test of in-place
            rewrites passes its own.
        sync_timeout: Seconds before :class:`TimeoutError`.
    """
    wanted = list(contexts) if present is None else list(present)
    gone = list(absent)
    after = registry.kubeconfig_syncs
    (writer or write_kubeconfig)(Path(path), contexts)
    with anyio.fail_after(sync_timeout):
        while True:
            after = await registry.wait_kubeconfig_sync(after)
            known = registry.contexts
            if all(n in known for n in wanted) and not any(n in known for n in gone):
                return
