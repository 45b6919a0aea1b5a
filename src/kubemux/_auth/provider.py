"""Credentials and their providers: the single-flight refresh, status, token files.

See :mod:`kubemux._auth.pool` for the pool that shares providers between contexts.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Final

import anyio
import anyio.abc

from .._errors import CredentialError

__all__ = [
    "MAX_SKEW",
    "SKEW_FRACTION",
    "TOKEN_FILE_PERIOD",
    "Credential",
    "CredentialProvider",
    "CredentialStatus",
    "TokenFileProvider",
    "note_interrupted",
    "recording_interruptions",
]

log = logging.getLogger(__name__)

TOKEN_FILE_PERIOD: Final = 60.0  # client-go re-reads a token file once a minute
MAX_SKEW: Final = 60.0  # refresh at most this long before expiry ...
SKEW_FRACTION: Final = 0.1  # ... and at most this share of the credential's lifetime early
_REJECT_BACKOFF: Final = (1.0, 60.0)  # a fresh credential the server rejects: wait, doubling
_EARLY_RETRY_DELAY: Final = 5.0  # a failed refresh ahead of expiry is retried after this


_interrupted: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "kubemux_interrupted", default=None
)


@contextlib.contextmanager
def recording_interruptions() -> Iterator[list[str]]:
    """Collect what credential work was doing when a cancellation cut it short.

    A caller that cancels a start on a time limit (the context's ``start_timeout``) wraps
    the start in this and names, in its own error, what the credential was waiting for
    (``exec plugin aws: waiting for the end of its output after 30 s, 0 bytes read; its
    process group was killed``): cancellation itself carries no message out.
    """
    notes: list[str] = []
    token = _interrupted.set(notes)
    try:
        yield notes
    finally:
        _interrupted.reset(token)


def note_interrupted(text: str) -> None:
    """Record, for :func:`recording_interruptions`, what a cancelled wait was for."""
    notes = _interrupted.get()
    if notes is not None:
        notes.append(text)


def _usable(credential: Credential) -> bool:
    """Not expired yet (a credential without an expiry counts as usable)."""
    return credential.expires_at is None or time.time() < credential.expires_at


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CredentialStatus:
    """What a provider can tell about its credential, never the credential itself.

    Attributes:
        kind: ``"exec"``, ``"token-file"`` or ``"oidc"``.
        source: What provides it, for messages: ``exec plugin aws``, ``token file ...``.
        expires_at: Unix time the current credential expires, when known.
        last_refresh: Unix time of the last successful refresh, or None.
        refreshes: Successful refreshes so far (the first fetch counts).
        last_error: Why the last refresh failed, or why the server rejects a fresh
            credential; cleared when a request succeeds again.
    """

    kind: str
    source: str
    expires_at: float | None
    last_refresh: float | None
    refreshes: int
    last_error: str | None


@dataclasses.dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Credential:
    """One credential as a request uses it (identity: two fetches are never the same)."""

    token: str | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    expires_at: float | None = None  # unix time
    obtained_at: float = 0.0  # unix time

    def __repr__(self) -> str:  # never the material
        return f"<Credential token={self.token is not None} cert={self.cert_pem is not None}>"

    def same_material(self, other: Credential) -> bool:
        return (self.token, self.cert_pem, self.key_pem) == (
            other.token,
            other.cert_pem,
            other.key_pem,
        )


class CredentialProvider:
    """Hands out one user entry's current credential; refreshes single-flight.

    Subclasses implement :meth:`_fetch` (get a new credential) and may override
    :meth:`_due` (is the current one too old?).
    """

    kind = "?"

    def __init__(self, source: str) -> None:
        self.source = source
        self._credential: Credential | None = None
        self._lock = anyio.Lock()
        self._refreshes = 0
        self._last_refresh: float | None = None
        self._last_error: str | None = None
        self._reject_delay = 0.0
        self._retry_after = 0.0  # monotonic: no 401-driven refresh before this
        self._early_retry_at = 0.0  # monotonic: no refresh-ahead attempt before this
        self.users = 0  # clients holding it (the pool's reference count)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.source!r} refreshes={self._refreshes}>"

    # ------------------------------------------------------------------ for the client
    async def current(self) -> Credential:
        """The credential to send now, refreshed first when it is due.

        Raises:
            CredentialError: it had to be refreshed and that failed.

        Cancellation abandons the refresh (a plugin process is killed); another caller
        starts it again.
        """
        credential = self._credential
        if credential is not None and not self._wants_refresh(credential):
            return credential
        async with self._locked():
            credential = self._credential
            if credential is not None and not self._wants_refresh(credential):
                return credential
            try:
                return await self._refresh()
            except CredentialError:
                if credential is None or not _usable(credential):
                    raise
                # refreshing ahead failed, but the old credential still works: use it, and
                # try again a little later rather than on every request
                self._early_retry_at = time.monotonic() + _EARLY_RETRY_DELAY
                return credential

    @contextlib.asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        """The single-flight lock; a cancelled wait for it says whose work it waited for."""
        try:
            await self._lock.acquire()
        except anyio.get_cancelled_exc_class():
            note_interrupted(f"waiting for {self.source}, which another request had started")
            raise
        try:
            yield
        finally:
            self._lock.release()

    def _wants_refresh(self, credential: Credential) -> bool:
        if not self._due(credential):
            return False
        return not _usable(credential) or time.monotonic() >= self._early_retry_at

    async def unauthorized(self, used: Credential) -> Credential | None:
        """The server answered 401 to ``used``: a new credential to retry with, or None.

        Single-flight: when another caller already replaced ``used``, its replacement is
        returned without a new refresh. None when a refresh cannot help (the source gave
        the same credential again, or a fresh one was rejected moments ago: back off).
        """
        async with self._locked():
            credential = self._credential
            if credential is not None and credential is not used:
                return credential
            if time.monotonic() < self._retry_after:
                return None
            try:
                fresh = await self._refresh()
            except CredentialError:
                return None
            if fresh.same_material(used):
                self.rejected(fresh)
                return None
            return fresh

    def rejected(self, credential: Credential) -> None:
        """A credential just fetched was refused too: say so, and back off refreshes."""
        low, high = _REJECT_BACKOFF
        self._reject_delay = min(high, max(low, self._reject_delay * 2))
        self._retry_after = time.monotonic() + self._reject_delay
        what = "a certificate" if credential.token is None else "a token"
        self._last_error = f"{self.source} returned {what} the server rejects"
        log.warning("%s; next refresh in %.0f s", self._last_error, self._reject_delay)

    def accepted(self) -> None:
        """A request succeeded: clear a recorded error."""
        if self._reject_delay:
            self._last_error = None  # the 401 is over (a failing refresh stays visible)
            self._reject_delay = 0.0
            self._retry_after = 0.0

    def status(self) -> CredentialStatus:
        credential = self._credential
        return CredentialStatus(
            kind=self.kind,
            source=self.source,
            expires_at=credential.expires_at if credential is not None else None,
            last_refresh=self._last_refresh,
            refreshes=self._refreshes,
            last_error=self._last_error,
        )

    # ------------------------------------------------------------------ internals
    def _due(self, credential: Credential) -> bool:
        if credential.expires_at is None:
            return False
        lifetime = max(0.0, credential.expires_at - credential.obtained_at)
        skew = min(MAX_SKEW, SKEW_FRACTION * lifetime)
        return time.time() >= credential.expires_at - skew

    async def _refresh(self) -> Credential:
        try:
            credential = await self._fetch()
        except CredentialError as exc:
            self._last_error = str(exc)
            raise
        self._credential = credential
        self._last_error = None
        self._refreshes += 1
        self._last_refresh = time.time()
        log.debug("%s: credential refreshed (%d)", self.source, self._refreshes)
        return credential

    async def _fetch(self) -> Credential:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Forget the credential (the last client using it closed)."""
        self._credential = None


# ---------------------------------------------------------------------- token files
class TokenFileProvider(CredentialProvider):
    """``user.tokenFile``: re-read every ``period`` seconds and at once after a 401."""

    kind = "token-file"

    def __init__(self, path: str, *, period: float = TOKEN_FILE_PERIOD) -> None:
        super().__init__(f"token file {path}")
        self.path = path
        self.period = period

    def _due(self, credential: Credential) -> bool:
        return time.time() - credential.obtained_at >= self.period

    async def _fetch(self) -> Credential:
        try:
            data = await anyio.Path(self.path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialError(f"{self.source}: cannot read it: {exc}") from exc
        token = data.strip()
        if not token:
            raise CredentialError(f"{self.source} is empty")
        return Credential(token=token, obtained_at=time.time())
