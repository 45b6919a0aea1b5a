"""FakeCluster's users: bearer tokens that authenticate as a user with groups, governed by RBAC.

:meth:`FakeCluster.add_user` and :meth:`FakeCluster.service_account_token` mint them. A
token looks like a ServiceAccount token (a JWT, unsigned here: the fake looks it up) whose
payload says ``sub`` and, for one that expires, ``exp``; the groups are the authenticator's
(``system:authenticated`` added, and ``system:serviceaccounts``,
``system:serviceaccounts:NS`` for a ServiceAccount). The fake's other credentials
(``tokens=``, signed tokens, client certificates) stay cluster admins: ``system:masters``.

Impersonation (``Impersonate-User``, ``-Group``, ``-Uid``, ``-Extra-*``) turns a request's
caller into another user, as kube-apiserver's filter does after checking the ``impersonate``
verb; ``kubectl auth can-i --as`` works that way.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import unquote

import orjson

from .authorizer import Caller, Request

__all__ = ["EXPIRED", "Identities", "admin_caller", "impersonation"]

EXPIRED = Caller("")
"""What :meth:`Identities.lookup` gives for a token that has expired or was revoked."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def admin_caller(token: str | None, user: str | None) -> Caller:
    """The caller of an admin credential (``tokens=``, a signed token, a certificate)."""
    if user is None or user == "static":
        name = "token-" + hashlib.sha256((token or "").encode()).hexdigest()[:8]
    else:
        name = user
    return Caller(name, groups=("system:masters", "system:authenticated"))


class Identities:
    """Token -> (caller, expiry); mutated by tests while the server runs."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._tokens: dict[str, tuple[Caller, float | None]] = {}

    def __contains__(self, token: object) -> bool:
        return token in self._tokens

    def mint(
        self,
        name: str,
        *,
        groups: Iterable[str] = (),
        uid: str = "",
        extra: Mapping[str, Iterable[str]] | None = None,
        ttl: float | None = None,
        token: str | None = None,
    ) -> str:
        """A new token for ``name`` (``system:authenticated`` added to ``groups``), or
        ``token`` itself made to authenticate as ``name``."""
        all_groups = [*groups]
        if "system:authenticated" not in all_groups:
            all_groups.append("system:authenticated")
        caller = Caller(
            name,
            uid or secrets.token_hex(8),
            tuple(all_groups),
            {k: tuple(v) for k, v in (extra or {}).items()},
        )
        now = self.clock()
        expires = None if ttl is None else now + ttl
        payload: dict[str, Any] = {"iss": "kubemux-fake", "sub": name, "iat": int(now)}
        if expires is not None:
            payload["exp"] = int(expires)
        payload["jti"] = secrets.token_hex(8)
        header = _b64(orjson.dumps({"alg": "none", "typ": "JWT"}))
        if token is None:
            token = f"{header}.{_b64(orjson.dumps(payload))}.{_b64(secrets.token_bytes(24))}"
        self._tokens[token] = (caller, expires)
        return token

    def lookup(self, token: str) -> Caller | None:
        """The caller of ``token``; :data:`EXPIRED` if it expired; None if it is not one."""
        found = self._tokens.get(token)
        if found is None:
            return None
        caller, expires = found
        if expires is not None and expires <= self.clock():
            return EXPIRED
        return caller

    def revoke(self, token: str) -> bool:
        """Forget ``token`` (it then authenticates as nobody)."""
        return self._tokens.pop(token, None) is not None


Check = Callable[[Caller, Request], bool]


def impersonation(headers: Any, requester: Caller, allowed: Check) -> Caller | Request | None:
    """The caller a request acts as: None without ``Impersonate-*`` headers; the request
    the requester was not allowed (a 403) when a check fails."""
    user = headers.get("Impersonate-User")
    groups: list[str] = headers.getall("Impersonate-Group", [])  # a CIMultiDict
    uid = headers.get("Impersonate-Uid", "")
    extra: dict[str, list[str]] = {}
    for key in headers:
        if key.lower().startswith("impersonate-extra-"):
            name = unquote(key[len("impersonate-extra-") :]).lower()
            extra.setdefault(name, []).extend(headers.getall(key, []))
    if user is None:
        return None
    checks: list[Request] = []
    service_account = user.startswith("system:serviceaccount:") and user.count(":") == 3
    if service_account:
        _, _, namespace, sa = user.split(":")
        checks.append(
            Request(verb="impersonate", resource="serviceaccounts", name=sa, namespace=namespace)
        )
        if not groups:
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    else:
        checks.append(Request(verb="impersonate", resource="users", name=user))
    checks.extend(Request(verb="impersonate", resource="groups", name=g) for g in groups)
    if uid:
        checks.append(Request(verb="impersonate", resource="uids", name=uid))
    for key, values in extra.items():
        checks.extend(
            Request(
                verb="impersonate",
                resource="userextras",
                subresource=key,
                group="authentication.k8s.io",
                name=v,
            )
            for v in values
        )
    for check in checks:
        if not allowed(requester, check):
            return check
    if user != "system:anonymous" and not {"system:authenticated", "system:unauthenticated"} & set(
        groups
    ):
        groups = [*groups, "system:authenticated"]
    return Caller(user, uid, tuple(groups), {k: tuple(v) for k, v in extra.items()})
