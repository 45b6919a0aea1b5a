"""Logging in and out of the per-user dashboard, and the gate in front of everything else.

``GET /login``
    A page with one form: the bearer token, posted once.
``POST /login``
    Same-origin only (:func:`~._sessions.cross_site`). The token is checked by a
    TokenReview in every context at once (:func:`~._viewer.authenticate_all`; at most
    ``MAX_LOGINS`` logins at once, an invalid token's answer kept 10 s); if at least
    one context accepts it, a session is opened (:mod:`._sessions`) and the answer is a
    303 to the dashboard with the session cookie. Otherwise the login page again, 401,
    saying that no context accepted the token (never the token itself).
``POST /logout``
    Same-origin only: the session ends server-side (its open streams with it), the
    cookie is cleared, 303 to the login page.
``GET /api/session``
    Who is logged in: ``{"user", "contexts": {context: user name}, "refused": {context:
    message}, "expires"}`` (a Unix time); ``{"user": null}`` in a dashboard of one identity
    (then the page shows no session).

Every other path but ``/static/`` needs a live session (:class:`SessionGate`): a page
without one is sent to the login page (303), an API call answered 401.
"""

from __future__ import annotations

import html
import logging
import urllib.parse

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ._responses import Problem, json_response
from ._sessions import (
    SESSION_KEY,
    clear_cookie,
    cross_site,
    read_cookie,
    session_cookie,
)
from ._state import Dashboard, dashboard_of
from ._viewer import authenticate_all, session_of

__all__ = ["SessionGate", "api_session", "login", "login_page", "logout"]

log = logging.getLogger(__name__)

MAX_FORM = 256 * 1024  # bytes of a login form read at most (a token is at most 64 KiB)
OPEN_PATHS = ("/login", "/logout")
MAX_LOGINS = 16  # logins being checked at once, at most (more: 503 at once)

_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Log in · {title}</title>
  <link rel="icon" href="data:,">
  <link rel="stylesheet" href="static/style.css">
</head>
<body>
  <header class="top"><span class="brand">kubemux</span>
    <span class="subtitle">{title}</span></header>
  <main class="login">
    <h1>Log in</h1>
    <p class="muted">Paste a bearer token for your clusters (a ServiceAccount token, an OIDC ID
      token). It is checked by each context's API server (a TokenReview), kept on this
      server only, and never sent back to the browser: the browser keeps a session cookie.
      You see what the token may list.</p>
    {error}
    <form method="post" action="login" class="login-form" autocomplete="off">
      <label for="token">Bearer token</label>
      <textarea id="token" name="token" rows="6" spellcheck="false" required></textarea>
      <button id="login" type="submit">Log in</button>
    </form>
  </main>
</body>
</html>
"""


def _page(dashboard: Dashboard, error: str | None = None, status: int = 200) -> Response:
    shown = f'<p id="login-error" class="login-error" role="alert">{html.escape(error or "")}</p>'
    body = _PAGE.format(title=html.escape(dashboard.title), error=shown if error else "")
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _refused(request: Request) -> str | None:
    headers = {k.lower(): v for k, v in request.headers.items()}
    return cross_site(headers, request.headers.get("host", ""))


async def login_page(request: Request) -> Response:
    return _page(dashboard_of(request))


async def _form_token(request: Request) -> str | None:
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Problem(415, "the login form is posted as application/x-www-form-urlencoded")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise Problem(413, f"the login form is larger than {MAX_FORM} bytes")
    try:
        fields = urllib.parse.parse_qs(
            body.decode("ascii"), max_num_fields=8, strict_parsing=False, errors="strict"
        )
    except (UnicodeDecodeError, ValueError):
        return None
    values = fields.get("token") or []
    return values[0].strip() if len(values) == 1 else None


async def login(request: Request) -> Response:
    dashboard = dashboard_of(request)
    why = _refused(request)
    if why is not None:
        log.info("refused a login: %s", why)
        raise Problem(403, why)
    token = await _form_token(request)
    if not token:
        return _page(dashboard, "Paste a token first.", 400)
    registry = dashboard.registry
    sessions = dashboard.sessions
    if sessions.logins >= MAX_LOGINS:  # each login is a TokenReview per context
        return _page(dashboard, "Too many logins at once; try again.", 503)
    sessions.logins += 1
    try:
        users, refused, retry = await authenticate_all(
            registry, token, dashboard.authorizers, dashboard.authorizer_settings
        )
    finally:
        sessions.logins -= 1
    if not users:
        if retry and len(retry) == len(refused):
            return _page(dashboard, "No context could check the token now; try again.", 503)
        return _page(dashboard, "No context accepted this token (401 Unauthorized).", 401)
    previous = sessions.get(read_cookie(request.headers.get("cookie", "")))
    if previous is not None:  # logging in again replaces the browser's session
        sessions.drop(previous)
    added = sessions.add(token, users, refused, retry)
    if added is None:
        return _page(dashboard, "Too many sessions are open; try again later.", 503)
    session_id, session = added
    log.info("%r logged in", session)
    response = RedirectResponse("./", status_code=303)
    max_age = sessions.seconds_left(session)
    response.headers["set-cookie"] = session_cookie(session_id, max_age, secure=_secure(request))
    response.headers["cache-control"] = "no-store"
    return response


async def logout(request: Request) -> Response:
    dashboard = dashboard_of(request)
    why = _refused(request)
    if why is not None:
        log.info("refused a logout: %s", why)
        raise Problem(403, why)
    session = dashboard.sessions.get(read_cookie(request.headers.get("cookie", "")))
    if session is not None:
        log.info("%r logged out", session)
        dashboard.sessions.drop(session)
    response = RedirectResponse("login", status_code=303)
    response.headers["set-cookie"] = clear_cookie(secure=_secure(request))
    response.headers["cache-control"] = "no-store"
    return response


async def api_session(request: Request) -> Response:
    if not dashboard_of(request).user_tokens:  # one identity: the kubeconfig's
        return json_response({"user": None})
    session = session_of(request)
    return json_response(
        {
            "user": session.name,
            "contexts": {c: u.name for c, u in session.users.items()},
            "refused": dict(session.refused),
            "expires": round(session.expires_at),
        }
    )


class SessionGate:
    """Lets through only requests of a live session (but the login paths and ``/static/``)."""

    def __init__(self, app: ASGIApp, dashboard: Dashboard) -> None:
        self.app = app
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        if path in OPEN_PATHS or path.startswith("/static/"):
            await self.app(scope, receive, send)
            return
        cookie = b""
        for key, value in scope["headers"]:
            if key == b"cookie":
                cookie = value
        session = self.dashboard.sessions.get(read_cookie(cookie.decode("latin-1")))
        if session is None:
            if path.startswith("/api/") or path == "/metrics":
                answer: Response = Problem(401, "log in first").response()
            else:
                answer = RedirectResponse(f"{root}/login", 303)
            await answer(scope, receive, send)
            return
        await self.app({**scope, SESSION_KEY: session}, receive, send)
