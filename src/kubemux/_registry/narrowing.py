"""A cluster-wide informer whose LIST was forbidden, narrowed to namespaces."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .._cache.store import Store
from .._errors import Forbidden
from .._kubeconfig.load import ContextConfig

__all__ = ["Narrowed", "narrowed_scope"]


@dataclasses.dataclass(slots=True)
class Narrowed:
    """A cluster-wide informer whose LIST was forbidden, replaced by one per namespace."""

    scope: tuple[str, ...]
    reason: str
    store: Store | None = None  # the union view, once built (for ``store()``)


def narrowed_scope(
    config: ContextConfig, configured: Sequence[str] | None, error: Forbidden
) -> Narrowed:
    """Where a forbidden cluster-wide LIST falls back to, and the note that says so."""
    scope = tuple(dict.fromkeys(configured or [config.namespace or "default"]))
    origin = "configured for the context" if configured else "the context's namespace"
    reason = (
        f"listing across all namespaces is forbidden ({error.message or error.reason}); "
        f"watching {', '.join(scope)} ({origin})"
    )
    return Narrowed(scope, reason)
