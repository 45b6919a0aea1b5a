"""Legacy ``auth-provider: oidc``: id-token refresh and write-back, as kubectl does it.

The refresh runs with the kubeconfig file's lock held (:mod:`kubemux._auth.writeback`): a
refresh token is single use at most identity providers, so it is spent only when its
successor can be saved, and never when another process already spent it.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import ssl
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

import anyio
import anyio.abc

from .._errors import CredentialError, KubeconfigError
from .._kubeconfig.schema import HEADER_UNSAFE, URL_UNSAFE, type_name
from .._redact import redact_text, terminal_safe
from .provider import SKEW_FRACTION, Credential, CredentialProvider, note_interrupted
from .writeback import (
    LOCK_TIMEOUT,
    KubeconfigLockError,
    kubeconfig_lock,
    lock_name,
    read_locked,
    write_locked,
)

__all__ = ["MAX_ANSWER_BYTES", "TOKEN_TIMEOUT", "OidcProvider"]

log = logging.getLogger(__name__)

TOKEN_TIMEOUT: Final = 10.0
"""Seconds one identity-provider request may take (the token request runs with the
kubeconfig locked: kubectl cannot change the file meanwhile)."""
MAX_ANSWER_BYTES: Final = 1 << 20
"""The largest identity-provider answer read (a token answer is a few KB)."""


class OidcProvider(CredentialProvider):
    """``auth-provider: oidc``: refresh the id-token when it expires, as kubectl does.

    The new id-token and refresh-token are written back to the kubeconfig file the entry
    came from (the rest of the file kept) *before* the new id-token is used. The refresh runs
    with client-go's ``<file>.lock`` held: the file is read under it, the refresh token it
    holds *now* is spent (or, when someone else refreshed meanwhile, their id-token used),
    and the successor written before the lock is let go; a refresh is never attempted when
    that cannot be done. An answer that would not load as a kubeconfig value is an error and
    nothing is written.
    """

    kind = "oidc"

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        path: str | None,
        user_name: str,
        lock_timeout: float = LOCK_TIMEOUT,
    ) -> None:
        for key, value in config.items():
            if value is not None and not isinstance(value, str):
                raise KubeconfigError(
                    f"user {user_name!r}: auth-provider oidc: {terminal_safe(str(key)[:60])} "
                    f"must be a string, not {type(value).__name__}",
                    path=path,
                )
        issuer = config.get("idp-issuer-url")
        super().__init__(f"OIDC provider {redact_text(str(issuer or '(no issuer)'))}")
        self.config = dict(config)
        self.path = path
        self.user_name = user_name
        self.lock_timeout = lock_timeout
        self._endpoint: str | None = None  # the token endpoint, from discovery
        # (refresh token the file holds, the newer one we hold): a save that failed
        self._unsaved: tuple[Any, str] | None = None
        ca_data = config.get("idp-certificate-authority-data")
        ca_file = config.get("idp-certificate-authority")
        try:
            if ca_data:
                pem = base64.b64decode(ca_data, validate=True).decode("ascii")
                self._ssl = ssl.create_default_context(cadata=pem)
            elif ca_file:
                self._ssl = ssl.create_default_context(cafile=ca_file)
            else:
                self._ssl = ssl.create_default_context()
        except (ValueError, OSError, ssl.SSLError, UnicodeDecodeError) as exc:
            raise KubeconfigError(
                f"user {user_name!r}: OIDC idp-certificate-authority is unusable: {exc}",
                path=path,
            ) from exc
        id_token = config.get("id-token")
        if isinstance(id_token, str) and id_token:
            self._credential = Credential(
                token=id_token, expires_at=_jwt_expiry(id_token), obtained_at=time.time()
            )

    def _due(self, credential: Credential) -> bool:
        # kubectl refreshes once the id-token has expired (with a few seconds of skew)
        if credential.expires_at is None:
            return False
        skew = min(5.0, SKEW_FRACTION * max(0.0, credential.expires_at - credential.obtained_at))
        return time.time() >= credential.expires_at - skew

    async def _fetch(self) -> Credential:
        """Refresh with the kubeconfig's lock held, so the successor is always saved.

        Under client-go's ``<file>.lock``: read the file; if someone else refreshed meanwhile
        (a new id-token that is still good) use theirs; else spend the refresh token the file
        holds *now* at the identity provider, check the answer, write it back, and only then
        let go of the lock. The request and the write are shielded from cancellation, so a
        spent refresh token is never left without its successor saved.
        """
        if self.path is None:
            raise self._not_spent("there is no kubeconfig file to save its successor in")
        client_id, issuer = self.config.get("client-id"), self.config.get("idp-issuer-url")
        if not client_id or not issuer:
            raise CredentialError(
                f"{self.source}: the id-token expired and there is no idp-issuer-url or "
                "client-id to refresh it with (log in again)"
            )
        endpoint = await self._token_endpoint(str(issuer))  # nothing is spent here
        path = self.path

        def waited() -> None:
            note_interrupted(
                f"{self.source}: waiting for {lock_name(path)} (held by another writer)"
            )

        try:
            async with kubeconfig_lock(path, timeout=self.lock_timeout, on_wait=waited):
                return await self._refresh_locked(path, endpoint)
        except KubeconfigLockError as exc:
            raise self._not_spent(str(exc)) from exc

    async def _refresh_locked(self, path: str, endpoint: str) -> Credential:
        try:
            locked = await anyio.to_thread.run_sync(read_locked, path, self.user_name, "oidc")
        except KubeconfigError as exc:
            raise self._not_spent(str(exc)) from exc
        if locked is None or locked.config.get("idp-issuer-url") != self.config.get(
            "idp-issuer-url"
        ):
            raise self._not_spent(
                f"{path} no longer has user {self.user_name!r} with this provider"
            )
        on_disk = locked.config
        token = on_disk.get("id-token")
        current = self._credential
        if isinstance(token, str) and token and (current is None or token != current.token):
            candidate = Credential(
                token=token, expires_at=_jwt_expiry(token), obtained_at=time.time()
            )
            if not self._due(candidate):  # refreshed by someone else (kubectl, a replica)
                self._unsaved = None
                return candidate
        refresh = in_file = on_disk.get("refresh-token")
        if self._unsaved is not None and refresh == self._unsaved[0]:
            refresh = self._unsaved[1]  # ours is newer: its save failed last time
        if not isinstance(refresh, str) or not refresh:
            raise CredentialError(
                f"{self.source}: the id-token expired and {path} has no refresh-token "
                "for it (log in again)"
            )
        form = {"grant_type": "refresh_token", "refresh_token": refresh}
        form["client_id"] = str(self.config["client-id"])
        if self.config.get("client-secret"):
            form["client_secret"] = str(self.config["client-secret"])
        # from here the refresh token is spent: finish (bounded), whatever is cancelled
        with anyio.CancelScope(shield=True):
            answer = await self._post(endpoint, form)
            id_token, new_refresh = self._check_answer(answer)
            updates = {"id-token": id_token, "refresh-token": new_refresh or refresh}
            try:
                await anyio.to_thread.run_sync(write_locked, locked, updates)
            except KubeconfigError as exc:  # the answer would not load: nothing written
                raise CredentialError(f"{self.source}: {exc}") from exc
            except OSError as exc:
                # spent, and the successor could not be saved: keep it here, save it at the
                # next refresh; meanwhile the file's refresh token no longer works
                self._unsaved = (in_file, updates["refresh-token"])
                log.warning(
                    "%s: new tokens could not be saved to %s (%s); kept in memory",
                    self.source,
                    path,
                    exc.strerror or type(exc).__name__,
                )
            else:
                self._unsaved = None
        self.config.update(updates)
        return Credential(token=id_token, expires_at=_jwt_expiry(id_token), obtained_at=time.time())

    def _not_spent(self, why: str) -> CredentialError:
        return CredentialError(
            f"{self.source}: the id-token expired, and its refresh-token is not spent "
            f"because its successor could not be saved: {why}"
        )

    async def _token_endpoint(self, issuer: str) -> str:
        if self._endpoint is not None:
            return self._endpoint
        url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        discovery = await self._request("GET", url, None, "reading its discovery document")
        endpoint = discovery.get("token_endpoint") if isinstance(discovery, dict) else None
        if not isinstance(endpoint, str) or URL_UNSAFE.search(endpoint):
            raise CredentialError(f"{self.source}: its discovery has no usable token_endpoint")
        if urllib.parse.urlsplit(endpoint).scheme not in ("https", "http"):
            raise CredentialError(f"{self.source}: its token_endpoint is not an http(s) URL")
        self._endpoint = endpoint
        return endpoint

    async def _post(self, endpoint: str, form: Mapping[str, str]) -> Any:
        try:
            return await self._request("POST", endpoint, form, "the refresh")
        except CredentialError:
            self._endpoint = None  # look it up again next time
            raise

    async def _request(
        self, method: str, url: str, form: Mapping[str, str] | None, what: str
    ) -> Any:
        """One request to the identity provider: its JSON answer (bounded in size and time).

        Raises:
            CredentialError: No answer, a refusal, or an answer that is not small JSON.
        """
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=TOKEN_TIMEOUT)
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session,
                session.request(method, url, data=form, headers=headers, ssl=self._ssl) as resp,
            ):
                encoding = resp.headers.get("Content-Encoding", "identity").lower()
                if encoding not in ("", "identity"):
                    raise CredentialError(
                        f"{self.source}: {what}: the answer is compressed although it was "
                        "asked not to be"
                    )
                raw = await _read_capped(resp, MAX_ANSWER_BYTES)
                status = resp.status
        except CredentialError:
            raise
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            reason = redact_text(str(exc)) or type(exc).__name__
            if isinstance(exc, TimeoutError):
                reason = f"no answer within {TOKEN_TIMEOUT:g} s"
            raise CredentialError(f"{self.source}: {what} failed: {reason}") from exc
        if raw is None:
            raise CredentialError(
                f"{self.source}: {what}: the answer is larger than {MAX_ANSWER_BYTES} bytes"
            )
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = None
        if status != 200:
            error = body.get("error") if isinstance(body, dict) else None
            shown = f" {terminal_safe(error[:100])}" if isinstance(error, str) and error else ""
            verb = "refused the refresh" if method == "POST" else f"answered {what} with"
            raise CredentialError(f"{self.source} {verb}: HTTP {status}{shown}")
        if body is None:
            raise CredentialError(f"{self.source}: {what}: the answer is not JSON")
        return body

    def _check_answer(self, body: Any) -> tuple[str, str | None]:
        """The id-token and refresh-token of a token answer, checked as kubeconfig values.

        Both are written into the kubeconfig as ``auth-provider.config`` strings and the
        id-token is sent as a bearer token: a value kubectl would refuse (not a string, a
        line break or a control character) is an error naming the field, never showing it.
        A missing or empty ``refresh_token`` keeps the current one, as golang.org/x/oauth2.
        """
        if not isinstance(body, dict):
            raise CredentialError(f"{self.source}: the refresh answer is not a JSON object")
        problems = []
        id_token = body.get("id_token")
        if id_token is None:
            problems.append("has no id_token")
        else:
            problems.append(_token_problem("id_token", id_token, required=True))
        refresh = body.get("refresh_token")
        if refresh is not None:
            problems.append(_token_problem("refresh_token", refresh, required=False))
        found = [p for p in problems if p]
        if found:
            raise CredentialError(
                f"{self.source}: the refresh answer {' and '.join(found)}; nothing was saved"
            )
        assert isinstance(id_token, str)
        return id_token, (refresh or None) if isinstance(refresh, str) else None


async def _read_capped(resp: Any, cap: int) -> bytes | None:
    """The body, or None when it is longer than ``cap`` bytes (reading stops there)."""
    length = resp.content_length
    if length is not None and length > cap:
        return None
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(64 * 1024):
        buf += chunk
        if len(buf) > cap:
            return None
    return bytes(buf)


def _token_problem(field: str, value: Any, *, required: bool) -> str:
    """Why ``value`` cannot be a kubeconfig token string ('' when it can)."""
    if not isinstance(value, str):
        return f"has a {field} that is {type_name(value)}, not a string"
    if not value:
        return f"has an empty {field}" if required else ""
    if HEADER_UNSAFE.search(value):
        return f"has a {field} with a line break or a control character"
    if not value.isascii():
        return f"has a {field} with non-ASCII characters"
    return ""


def _jwt_expiry(token: Any) -> float | None:
    """The ``exp`` claim of a JWT (unverified: only to know when to refresh)."""
    if not isinstance(token, str):
        return None
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        exp = payload.get("exp") if isinstance(payload, dict) else None
    except (ValueError, TypeError):
        return None
    return float(exp) if isinstance(exp, int | float) and math.isfinite(exp) else None
