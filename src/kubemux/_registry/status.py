"""What :meth:`WatcherRegistry.status` shows: frozen values, never a secret.

States are :class:`enum.StrEnum` members, so they compare equal to their strings
(``status.state == "running"``) and serialise as them.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from .._auth.provider import CredentialStatus
from .._informer.informer import InformerStatus
from .._redact import redact_text, redact_url

__all__ = ["ContextState", "ContextStatus", "RegistryStatus", "StatusSignal"]


class StatusSignal:
    """A version number that grows whenever what ``status()`` shows may have changed state,
    and a wait for the next change (many waiters, one event: a change wakes them all).

    Bumped on state changes (contexts, informers, errors recorded or cleared, kubeconfig
    syncs), not on every object: counts and resourceVersions change all the time and a UI
    polls them.
    """

    __slots__ = ("_event", "version")

    def __init__(self) -> None:
        self.version = 0
        self._event = anyio.Event()

    def changed(self) -> None:
        """Something :meth:`status` shows changed state (synchronous, never raises)."""
        self.version += 1
        event, self._event = self._event, anyio.Event()
        event.set()

    async def wait_change(self, after: int) -> int:
        """Wait until :attr:`version` exceeds ``after``; returns the new value.
        Cancelling only stops the wait."""
        while self.version <= after:
            await self._event.wait()
        return self.version


class ContextState(enum.StrEnum):
    """The state of one context as a UI shows it."""

    IDLE = "idle"
    """Known from the kubeconfig, nothing running."""
    STARTING = "starting"
    """A generation is connecting, or an informer has not finished its first LIST."""
    RUNNING = "running"
    """Every informer is synced and watching."""
    BACKING_OFF = "backing off"
    """Something failed and will be tried again (see ``retry_in`` and ``last_error``)."""
    ERROR = "error"
    """The last start failed; the next ``watch()`` tries again."""
    STOPPING = "stopping"
    """The generation is being stopped."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ContextStatus:
    """A frozen snapshot of one context for a UI. Never holds a secret.

    ``server`` is shown with any ``user:password@`` replaced by ``***@``.
    """

    name: str
    state: ContextState
    generation: int | None
    server: str
    cluster_name: str
    user_name: str
    namespace: str | None
    source: str
    informers: tuple[InformerStatus, ...]
    last_error: str | None
    retry_in: float | None  # seconds until a failed start may be retried
    credential: CredentialStatus | None = None
    """A refreshing credential's kind, expiry and refreshes (never the credential)."""
    notes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """resource -> why its scope is narrower than asked (a forbidden cluster-wide LIST)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (plain str, int, float, bool, None, lists and dicts)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["state"] = str(self.state)
        out["notes"] = dict(self.notes)
        out["credential"] = (
            None
            if self.credential is None
            else {
                f.name: getattr(self.credential, f.name)
                for f in dataclasses.fields(self.credential)
            }
        )
        out["informers"] = [
            {f.name: _plain(getattr(i, f.name)) for f in dataclasses.fields(i)}
            for i in self.informers
        ]
        return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RegistryStatus:
    """A frozen snapshot of the whole registry."""

    contexts: Mapping[str, ContextStatus]
    current_context: str | None
    kubeconfig_errors: Mapping[str, str]  # file -> error (its last good contexts are kept)
    invalid_contexts: Mapping[str, str]  # context -> why it cannot be used
    kubeconfig_syncs: int
    subscribers: int = 0  # open subscriptions
    subscriber_overflows: int = 0  # subscriptions closed by SubscriberOverflow, ever
    # shared watches: this replica's part in placement (kubemux.share.PlacementStatus);
    # None when the registry shares nothing
    share: Any = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, the one form the CLI (``-o json``) and the dashboard serve.

        ``contexts`` is a list in kubeconfig order; each item is
        :meth:`ContextStatus.to_json`.
        """
        return {
            "contexts": [c.to_json() for c in self.contexts.values()],
            "current_context": self.current_context,
            "kubeconfig_errors": dict(self.kubeconfig_errors),
            "invalid_contexts": dict(self.invalid_contexts),
            "kubeconfig_syncs": self.kubeconfig_syncs,
            "subscribers": self.subscribers,
            "subscriber_overflows": self.subscriber_overflows,
            **({} if self.share is None else {"share": self.share.to_json()}),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, Mapping):
        return dict(value)  # errors_by_type: a copy, not the snapshot's own dict
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def build_context_status(
    *,
    name: str,
    server: str,
    cluster_name: str,
    user_name: str,
    namespace: str | None,
    source: str,
    state: ContextState,
    generation: int | None,
    informers: tuple[InformerStatus, ...],
    errors: Sequence[str],
    retry_in: float | None,
    notes: Mapping[str, str] | None = None,
    credential: CredentialStatus | None = None,
) -> ContextStatus:
    """A :class:`ContextStatus` with the state a UI should show and secrets redacted."""
    states = {i.state for i in informers}
    if state is ContextState.RUNNING:
        if "backing off" in states or "error" in states:
            state = ContextState.BACKING_OFF
        elif informers and not all(i.has_synced for i in informers):
            state = ContextState.STARTING
    return ContextStatus(
        name=name,
        state=state,
        generation=generation,
        server=redact_url(server),
        cluster_name=cluster_name,
        user_name=user_name,
        namespace=namespace,
        source=source,
        informers=informers,
        last_error=redact_text(errors[0]) if errors else None,
        retry_in=retry_in if retry_in is None or math.isfinite(retry_in) else None,
        notes={k: redact_text(v) for k, v in (notes or {}).items()},
        credential=credential,
    )
