"""FakeCluster authentication: static tokens, signed tokens that expire, client certificates.

Three ways in, as a kube-apiserver has them:

* static bearer tokens (``FakeCluster(tokens=...)``), a mutable set;
* signed tokens (``FakeCluster(signing_key=...)``), ``kmx1.<issued>.<expires>.<user>.<mac>``
  with an HMAC-SHA256 over the rest: anything holding the key (a test, a bench, the exec
  plugin in ``tests/plugins``) can mint them out of process, and the server checks expiry on
  every request. With ``newest_only=True`` a token is refused once a newer one for the same
  user has been accepted, as a server that keeps only the last issued credential does;
* client certificates on TLS, signed by the cluster's CA (:meth:`FakeCluster.issue_client_cert`),
  the user being the certificate's common name; checked for expiry on every request.

:meth:`AuthState.revoke` refuses every token and certificate issued to a user until then.
"""

from __future__ import annotations

import hashlib
import hmac
import ssl
import time
from typing import Any

__all__ = ["AuthState", "sign_token"]

_PREFIX = "kmx1"


def sign_token(key: str, user: str, ttl: float, *, now: float | None = None) -> str:
    """Mint a token the cluster with ``signing_key=key`` accepts for ``ttl`` seconds."""
    issued = time.time() if now is None else now
    body = f"{_PREFIX}.{int(issued * 1e6)}.{int((issued + ttl) * 1e6)}.{user}"
    mac = hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest()
    return f"{body}.{mac}"


class AuthState:
    """Who may call the fake; mutated by tests while the server runs."""

    def __init__(
        self,
        tokens: set[str] | None,
        *,
        signing_key: str | None = None,
        newest_only: bool = False,
    ) -> None:
        self.required = tokens is not None or signing_key is not None
        self.tokens: set[str] = tokens if tokens is not None else set()
        self.signing_key = signing_key
        self.newest_only = newest_only
        self.clock = time.time  # wall clock: signed tokens cross process boundaries
        self.newest: dict[str, float] = {}  # user -> newest issue time accepted
        self.revoked_before: dict[str, float] = {}  # user -> nothing issued before is valid
        self.cert_issued: dict[int, float] = {}  # serial number -> issue time
        self.rejected = 0  # requests answered 401

    def revoke(self, user: str) -> None:
        """Refuse every token and client certificate issued to ``user`` so far."""
        self.revoked_before[user] = self.clock()
        self.newest.pop(user, None)

    def authenticate(self, token: str | None, peercert: dict[str, Any] | None) -> str | None:
        """The user a request authenticates as, or None (401)."""
        user = self._from_token(token) if token is not None else None
        if user is None and peercert:
            user = self._from_cert(peercert)
        if user is None:
            self.rejected += 1
        return user

    def _from_token(self, token: str) -> str | None:
        if token in self.tokens:
            return "static"
        if self.signing_key is None or not token.startswith(_PREFIX + "."):
            return None
        body, _, mac = token.rpartition(".")
        good = hmac.new(self.signing_key.encode(), body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, good):
            return None
        try:
            _, issued_us, expires_us, user = body.split(".", 3)
            issued, expires = int(issued_us) / 1e6, int(expires_us) / 1e6
        except ValueError:
            return None
        now = self.clock()
        if expires <= now or issued < self.revoked_before.get(user, float("-inf")):
            return None
        if self.newest_only:
            newest = self.newest.get(user, float("-inf"))
            if issued < newest:
                return None
            self.newest[user] = issued
        return user

    def _from_cert(self, peercert: dict[str, Any]) -> str | None:
        common_name = None
        for rdn in peercert.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    common_name = value
        if not common_name:
            return None
        try:
            not_after = ssl.cert_time_to_seconds(peercert["notAfter"])
        except (KeyError, ValueError):
            return None
        if not_after <= self.clock():
            return None
        try:
            serial = int(str(peercert.get("serialNumber", "")), 16)
        except ValueError:
            return None
        issued = self.cert_issued.get(serial)
        if issued is None or issued < self.revoked_before.get(common_name, float("-inf")):
            return None
        return str(common_name)
