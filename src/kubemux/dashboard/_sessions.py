"""The per-user dashboard's sessions (``user_tokens=True``): who is logged in, by a cookie.

A browser presents a bearer token once (``POST /login``, :mod:`._login`). The token is kept
here, in the server's memory only, in a :class:`Session`; the browser gets a cookie holding
a random session id (256 bits, ``secrets.token_urlsafe``) and nothing else, and the id is
kept only as its SHA-256, so neither a cookie jar nor this table gives a token back. The
cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page
sends it), ``Path=/``, and ``Secure`` with the ``__Host-`` prefix when the dashboard is
served over TLS (bound to the dashboard's origin).

Sessions are bounded: at most ``max_sessions`` at once (one more login: 503), at most
``max_per_user`` per user name (the oldest goes), ``STREAMS_PER_SESSION`` streams each (of
the dashboard's ``max_streams``), and each ends at the first of its
``ttl`` and its token's own expiry (a JWT's ``exp``: a ServiceAccount token's). Logging
out ends the session server-side, with the streams it has open.

Cross-site requests (:func:`cross_site`): a state-changing request (the login and logout
forms) is accepted only from the dashboard's own origin. ``Sec-Fetch-Site`` decides when
the browser sends it, as Go's ``net/http.CrossOriginProtection`` does: a browser sends
``Origin: null`` on some same-origin form posts (Chromium on this dashboard's, whose pages
say ``Referrer-Policy: no-referrer``), so ``Origin`` alone would refuse real logins. Without
it, ``Origin`` must name this host; a request with neither comes from no browser (curl, a
script) and is accepted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.cookies
import secrets
import time
from collections.abc import Callable, Mapping

import anyio

from .._authz.caches import token_expiry
from .._authz.user import User
from ._responses import Problem

__all__ = [
    "COOKIE",
    "SECURE_COOKIE",
    "SESSION_KEY",
    "STREAMS_PER_SESSION",
    "Session",
    "Sessions",
    "clear_cookie",
    "cross_site",
    "read_cookie",
    "session_cookie",
]

STREAMS_PER_SESSION = 20  # a session's event and log streams at once (one user, many tabs)
SESSION_KEY = "kubemux.session"  # where the gate puts a request's Session in its ASGI scope
COOKIE = "kubemux_session"
SECURE_COOKIE = "__Host-kubemux_session"  # over TLS: Secure, Path=/, no Domain, by the browser


def _key(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).digest()


@dataclasses.dataclass(eq=False, slots=True)
class Session:
    """One logged-in browser: its token (never shown), who it is in each context.

    Attributes:
        users: context -> the user the token authenticated as there.
        refused: context -> why that context did not take the token (its 401, or that it
            could not be asked: then it is asked again on the next use).
        retry: the contexts of ``refused`` that could not be asked (unreachable, not
            synced): not a verdict on the token.
        expires: When the session ends (monotonic clock).
        expires_at: The same as a wall-clock time (for the page).
    """

    token: str = dataclasses.field(repr=False)
    users: dict[str, User]
    refused: dict[str, str]
    retry: set[str]
    created: float
    expires: float
    expires_at: float
    key: bytes = dataclasses.field(repr=False)
    scopes: set[anyio.CancelScope] = dataclasses.field(default_factory=set, repr=False)
    ended: bool = False
    streams: int = 0  # event and log streams open (at most STREAMS_PER_SESSION)

    @property
    def name(self) -> str:
        """Who is logged in, as the page shows it: the user names, each once."""
        names = list(dict.fromkeys(u.name for u in self.users.values()))
        return ", ".join(names) if names else "(no context accepted the token)"

    def __repr__(self) -> str:  # no token, no id
        return f"<Session {self.name!r} contexts={len(self.users)} refused={len(self.refused)}>"

    def admit_stream(self) -> None:
        """Count one more stream of this session.

        Raises:
            Problem: 503, the session has ``STREAMS_PER_SESSION`` open.
        """
        if self.streams >= STREAMS_PER_SESSION:
            raise Problem(
                503,
                f"too many streams for one session (at most {STREAMS_PER_SESSION})",
                retry_after=5,
            )
        self.streams += 1

    def end(self) -> None:
        """End the session's open streams; the session itself is gone from its table."""
        self.ended = True
        for scope in list(self.scopes):
            scope.cancel("logged out")


class Sessions:
    """The sessions of one dashboard, bounded (see the module docstring)."""

    def __init__(
        self,
        *,
        max_sessions: int = 1000,
        max_per_user: int = 10,
        ttl: float = 8 * 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_sessions < 1 or max_per_user < 1 or ttl <= 0:
            raise ValueError("max_sessions, max_per_user and the session ttl must be positive")
        self.max_sessions = max_sessions
        self.max_per_user = max_per_user
        self.ttl = ttl
        self._clock = clock
        self._items: dict[bytes, Session] = {}
        self.logins = 0  # logins being checked now (see ._login.MAX_LOGINS)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"<Sessions {len(self._items)}/{self.max_sessions}>"

    def _sweep(self) -> None:
        now = self._clock()
        for key in [k for k, s in self._items.items() if s.expires <= now]:
            self._items.pop(key).end()

    def add(
        self, token: str, users: Mapping[str, User], refused: Mapping[str, str], retry: set[str]
    ) -> tuple[str, Session] | None:
        """A new session for ``token``: ``(its id, the session)``, or None when
        ``max_sessions`` are open. The id goes in the cookie and nowhere else."""
        self._sweep()
        name = next(iter(users.values())).name if users else ""
        mine = [
            s
            for s in self._items.values()
            if name and any(u.name == name for u in s.users.values())
        ]
        while len(mine) >= self.max_per_user:
            oldest = mine.pop(0)
            self.drop(oldest)
        if len(self._items) >= self.max_sessions:
            return None
        now, wall = self._clock(), time.time()
        lifetime = self.ttl
        exp = token_expiry(token)
        if exp is not None:
            lifetime = min(lifetime, exp - wall)
        session_id = secrets.token_urlsafe(32)
        session = Session(
            token=token,
            users=dict(users),
            refused=dict(refused),
            retry=set(retry),
            created=now,
            expires=now + lifetime,
            expires_at=wall + lifetime,
            key=_key(session_id),
        )
        self._items[session.key] = session
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of that id, or None (unknown, ended or expired)."""
        if not session_id or len(session_id) > 256:
            return None
        session = self._items.get(_key(session_id))
        if session is None:
            return None
        if session.expires <= self._clock():
            self.drop(session)
            return None
        return session

    def drop(self, session: Session) -> None:
        """End ``session`` (logout, expiry, its token refused everywhere). Idempotent."""
        if self._items.get(session.key) is session:
            del self._items[session.key]
        session.end()

    def clear(self) -> None:
        for session in list(self._items.values()):
            self.drop(session)

    def seconds_left(self, session: Session) -> float:
        return max(0.0, session.expires - self._clock())


# ---------------------------------------------------------------------- cookies
def session_cookie(session_id: str, max_age: float, *, secure: bool) -> str:
    """The ``Set-Cookie`` value carrying ``session_id`` (see the module docstring)."""
    name = SECURE_COOKIE if secure else COOKIE
    parts = [
        f"{name}={session_id}",
        "Path=/",
        f"Max-Age={max(1, int(max_age))}",
        "HttpOnly",
        "SameSite=Strict",
    ]
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def clear_cookie(*, secure: bool) -> str:
    """The ``Set-Cookie`` value that makes the browser forget the session cookie."""
    name = SECURE_COOKIE if secure else COOKIE
    tail = "; Secure" if secure else ""
    return f"{name}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict{tail}"


def read_cookie(header: str) -> str | None:
    """The session id from a ``Cookie`` header (either name), or None."""
    if not header or len(header) > 16 * 1024:
        return None
    jar = http.cookies.SimpleCookie()
    try:
        jar.load(header)
    except http.cookies.CookieError:
        return None
    for name in (SECURE_COOKIE, COOKIE):
        morsel = jar.get(name)
        if morsel is not None and morsel.value:
            return morsel.value
    return None


# ---------------------------------------------------------------------- CSRF
def _origin_host(origin: str) -> str | None:
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme not in ("http", "https") or not rest or "/" in rest:
        return None
    return rest.lower()


def cross_site(headers: Mapping[str, str], host: str) -> str | None:
    """Why a state-changing request is refused as cross-site, or None to accept it.

    ``headers``: the request's (lower-case names); ``host``: its ``Host`` header. Go's
    ``net/http.CrossOriginProtection``: ``Sec-Fetch-Site`` decides when a browser sends it
    (every current one does; no page can forge it), so a reverse proxy that rewrites
    ``Host`` does not break logins; else ``Origin`` must name this host (``null``, an
    opaque origin, is refused); a request with neither comes from no browser.
    """
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None:
        if fetch_site in ("same-origin", "none"):
            return None
        return f"a {fetch_site[:40]} request (Sec-Fetch-Site) is not accepted here"
    origin = headers.get("origin")
    if origin is None:
        return None
    if origin == "null":
        return "a request from an opaque origin (Origin: null) is not accepted here"
    if _origin_host(origin) != host.lower():
        return "a request from another origin is not accepted here"
    return None
