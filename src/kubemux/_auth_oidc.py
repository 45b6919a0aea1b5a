"""Legacy ``auth-provider: oidc``: id-token refresh and write-back, as kubectl does it."""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import ssl
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.abc

from ._auth_provider import SKEW_FRACTION, Credential, CredentialProvider
from ._errors import CredentialError, KubeconfigError
from ._redact import redact_text, terminal_safe

__all__ = ["OidcProvider", "write_user_entry"]


class OidcProvider(CredentialProvider):
    """``auth-provider: oidc``: refresh the id-token when it expires, as kubectl does.

    The new id-token and refresh-token are written back to the kubeconfig file the entry
    came from (atomically, the rest of the file kept) *before* the new id-token is used, and
    a refresh is never attempted when that file cannot be written: a single-use refresh
    token is never spent without its successor being saved. Before spending it, the file is
    read again: if someone else (kubectl) refreshed in the meantime, their tokens are used.
    """

    kind = "oidc"

    def __init__(self, config: Mapping[str, Any], *, path: str | None, user_name: str) -> None:
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
        import aiohttp

        on_disk = self._reread()
        if on_disk is not None:
            self.config.update(on_disk)
            token = on_disk.get("id-token")
            current = self._credential
            if token and (current is None or token != current.token):
                candidate = Credential(
                    token=token, expires_at=_jwt_expiry(token), obtained_at=time.time()
                )
                if not self._due(candidate):
                    return candidate
        refresh, issuer = self.config.get("refresh-token"), self.config.get("idp-issuer-url")
        client_id = self.config.get("client-id")
        if not refresh or not issuer or not client_id:
            raise CredentialError(
                f"{self.source}: the id-token expired and there is no refresh-token, "
                "idp-issuer-url or client-id to refresh it (log in again)"
            )
        if self.path is None or on_disk is None or not os.access(self.path, os.W_OK):
            raise CredentialError(
                f"{self.source}: the id-token expired, and its refresh-token is not spent "
                f"because the new one could not be saved ({self.path or 'no file'} is not "
                f"writable or no longer has user {self.user_name!r} with this provider)"
            )
        form = {"grant_type": "refresh_token", "refresh_token": refresh, "client_id": client_id}
        if self.config.get("client-secret"):
            form["client_secret"] = self.config["client-secret"]
        timeout = aiohttp.ClientTimeout(total=30)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                url = str(issuer).rstrip("/") + "/.well-known/openid-configuration"
                async with session.get(url, ssl=self._ssl) as resp:
                    resp.raise_for_status()
                    discovery = await resp.json(content_type=None)
                endpoint = discovery.get("token_endpoint") if isinstance(discovery, dict) else None
                if not isinstance(endpoint, str):
                    raise CredentialError(f"{self.source}: its discovery has no token_endpoint")
                async with session.post(endpoint, data=form, ssl=self._ssl) as resp:
                    body = await resp.json(content_type=None)
                    if resp.status != 200:
                        error = body.get("error") if isinstance(body, dict) else None
                        raise CredentialError(
                            f"{self.source} refused the refresh: HTTP {resp.status}"
                            + (f" {terminal_safe(str(error)[:100])}" if error else "")
                        )
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise CredentialError(
                f"{self.source}: refresh failed: {redact_text(str(exc)) or type(exc).__name__}"
            ) from exc
        id_token = body.get("id_token") if isinstance(body, dict) else None
        if not isinstance(id_token, str) or not id_token:
            raise CredentialError(f"{self.source}: the refresh answer has no id_token")
        new_refresh = body.get("refresh_token") or refresh
        updates = {"id-token": id_token, "refresh-token": new_refresh}
        try:
            await anyio.to_thread.run_sync(self._write_back, updates)
        except (OSError, ValueError) as exc:
            raise CredentialError(
                f"{self.source}: got new tokens but could not save them to {self.path}: {exc}"
            ) from exc
        self.config.update(updates)
        return Credential(token=id_token, expires_at=_jwt_expiry(id_token), obtained_at=time.time())

    def _entry(self, doc: Any) -> dict[str, Any] | None:
        if not isinstance(doc, dict):
            return None
        for item in doc.get("users") or ():
            if isinstance(item, dict) and item.get("name") == self.user_name:
                user = item.get("user")
                provider = user.get("auth-provider") if isinstance(user, dict) else None
                if isinstance(provider, dict) and provider.get("name") == "oidc":
                    config = provider.setdefault("config", {})
                    return config if isinstance(config, dict) else None
        return None

    def _reread(self) -> dict[str, Any] | None:
        if self.path is None:
            return None
        import yaml

        try:
            with open(self.path, encoding="utf-8") as f:
                entry = self._entry(yaml.safe_load(f))
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            return None
        if entry is None or entry.get("idp-issuer-url") != self.config.get("idp-issuer-url"):
            return None
        return {k: entry[k] for k in ("id-token", "refresh-token") if entry.get(k)}

    def _write_back(self, updates: Mapping[str, str]) -> None:
        assert self.path is not None
        write_user_entry(self.path, self.user_name, updates)


def write_user_entry(path: str, user_name: str, updates: Mapping[str, str]) -> None:
    """Set ``auth-provider.config`` keys of one user in a kubeconfig file, atomically.

    The file is parsed and written again as kubectl does (comments are not kept; every
    other entry and key is), through a temporary file in the same folder, fsynced, and
    renamed over the original (a symlink is followed, its mode kept).

    Raises:
        OSError: the file cannot be read or written.
        ValueError: the file no longer has that user with an OIDC auth-provider.
    """
    import yaml

    real = os.path.realpath(path)
    with open(real, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    config = None
    if isinstance(doc, dict):
        for item in doc.get("users") or ():
            if isinstance(item, dict) and item.get("name") == user_name:
                provider = (item.get("user") or {}).get("auth-provider")
                if isinstance(provider, dict):
                    config = provider.setdefault("config", {})
    if not isinstance(config, dict):
        raise ValueError(f"user {user_name!r} has no auth-provider in {path}")  # noqa: TRY004
    config.update(updates)
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    folder = os.path.dirname(real)
    mode = os.stat(real).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=".kubemux-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
