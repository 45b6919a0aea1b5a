"""Credentials that expire: exec plugins, token files, OIDC, in-cluster service accounts.

One :class:`CredentialProvider` per kubeconfig user entry, shared through a
:class:`CredentialPool` by every context that uses that entry, so two contexts never run
the same plugin at once nor race over its files. A provider hands out the current
:class:`Credential`; it refreshes it single-flight when it is due (before its expiry, with a
skew) and after the server answered 401 with it, and never restarts anything: the client
asks it for the credential on every request (:mod:`kubemux._client`).

Static credentials (an inline ``token``, client certificate files) need no provider:
kubernetes-asyncio applies them, and a change of them restarts the context.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import hashlib
import json
import logging
import math
import os
import signal
import ssl
import subprocess
import tempfile
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc

from ._errors import CredentialError, KubeconfigError
from ._redact import redact_text, terminal_safe

if TYPE_CHECKING:
    from ._kubeconfig import ContextConfig

__all__ = [
    "Credential",
    "CredentialPool",
    "CredentialProvider",
    "CredentialStatus",
    "credential_insensitive",
    "in_cluster_config",
]

log = logging.getLogger(__name__)

EXEC_TIMEOUT: Final = 60.0  # seconds an exec plugin may run
TOKEN_FILE_PERIOD: Final = 60.0  # client-go re-reads a token file once a minute
MAX_SKEW: Final = 60.0  # refresh at most this long before expiry ...
SKEW_FRACTION: Final = 0.1  # ... and at most this share of the credential's lifetime early
_STDERR_LIMIT: Final = 4096  # bytes of a plugin's stderr kept for the error message
_STDOUT_LIMIT: Final = 1 << 20
_REJECT_BACKOFF: Final = (1.0, 60.0)  # a fresh credential the server rejects: wait, doubling
_EXEC_API_VERSIONS: Final = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
)
IN_CLUSTER_ROOT: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
IN_CLUSTER_NAME: Final = "in-cluster"
# auth-provider config keys that are credential material (refreshed in place), not identity
_AUTH_PROVIDER_MATERIAL: Final = frozenset(
    {"id-token", "refresh-token", "access-token", "expiry", "expires-in", "expires-on"}
)
_REMOVED_PROVIDERS: Final = {
    "gcp": "gke-gcloud-auth-plugin (an exec plugin)",
    "azure": "kubelogin (an exec plugin)",
}


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
        if credential is not None and not self._due(credential):
            return credential
        async with self._lock:
            credential = self._credential
            if credential is not None and not self._due(credential):
                return credential
            return await self._refresh()

    async def unauthorized(self, used: Credential) -> Credential | None:
        """The server answered 401 to ``used``: a new credential to retry with, or None.

        Single-flight: when another caller already replaced ``used``, its replacement is
        returned without a new refresh. None when a refresh cannot help (the source gave
        the same credential again, or a fresh one was rejected moments ago: back off).
        """
        async with self._lock:
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
        if self._last_error is not None or self._reject_delay:
            self._last_error = None
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


# ---------------------------------------------------------------------- exec plugins
class ExecProvider(CredentialProvider):
    """``user.exec``: a client-go credential plugin (``client.authentication.k8s.io``).

    Runs without stdin and never interactively (there is no terminal), with
    ``KUBERNETES_EXEC_INFO`` set as client-go sets it, for at most ``timeout`` seconds; the
    process is killed when the call is cancelled. Its stderr (the last 4 KiB) goes into
    the error message.
    """

    kind = "exec"

    def __init__(
        self,
        spec: Mapping[str, Any],
        *,
        cluster: Mapping[str, Any] | None,
        timeout: float = EXEC_TIMEOUT,
        where: str = "",
    ) -> None:
        command = spec.get("command")
        if not isinstance(command, str) or not command:
            raise KubeconfigError(f"{where}: exec needs a command")
        super().__init__(f"exec plugin {os.path.basename(command)}")
        self.command = command
        args = spec.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise KubeconfigError(f"{where}: exec args must be a list of strings")
        self.args: list[str] = args
        self.api_version = spec.get("apiVersion")
        if self.api_version not in _EXEC_API_VERSIONS:
            raise KubeconfigError(
                f"{where}: exec apiVersion {self.api_version!r} is not supported "
                f"(use one of {', '.join(_EXEC_API_VERSIONS)})"
            )
        mode = spec.get("interactiveMode") or "IfAvailable"
        if mode not in ("Never", "IfAvailable", "Always"):
            raise KubeconfigError(f"{where}: exec interactiveMode {mode!r} is not valid")
        if mode == "Always":
            raise KubeconfigError(
                f"{where}: exec plugin {os.path.basename(command)} needs interactiveMode "
                "Always, but kubemux has no terminal to offer it"
            )
        self.env: dict[str, str] = {}
        for item in spec.get("env") or ():
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise KubeconfigError(f"{where}: exec env entries need a name and a value")
            self.env[item["name"]] = str(item.get("value", ""))
        self.timeout = timeout
        info: dict[str, Any] = {"interactive": False}
        if spec.get("provideClusterInfo") and cluster is not None:
            info["cluster"] = _exec_cluster_info(cluster)
        self.exec_info = json.dumps(
            {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": info},
            separators=(",", ":"),
        )
        hint = spec.get("installHint")
        self.install_hint = terminal_safe(hint.strip()[:500]) if isinstance(hint, str) else ""
        self.runs = 0

    async def _fetch(self) -> Credential:
        env = dict(os.environ)
        env.update(self.env)
        env["KUBERNETES_EXEC_INFO"] = self.exec_info
        self.runs += 1
        started = time.time()
        try:
            out, err, code = await _run_plugin([self.command, *self.args], env, self.timeout)
        except TimeoutError:
            raise CredentialError(
                f"{self.source} did not answer within {self.timeout:g} s (killed)"
            ) from None
        except OSError as exc:
            hint = f"; {self.install_hint}" if self.install_hint else ""
            raise CredentialError(f"{self.source} could not be started: {exc}{hint}") from exc
        if code != 0:
            raise CredentialError(f"{self.source} failed with exit code {code}{_stderr_tail(err)}")
        return self._parse(out, err, started)

    def _parse(self, out: bytes, err: bytes, started: float) -> Credential:
        try:
            doc = json.loads(out)
        except ValueError:
            raise CredentialError(
                f"{self.source} printed something that is not JSON{_stderr_tail(err)}"
            ) from None
        if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
            raise CredentialError(f"{self.source} did not print an ExecCredential")
        if doc.get("apiVersion") != self.api_version:
            raise CredentialError(
                f"{self.source} answered with apiVersion {doc.get('apiVersion')!r}, "
                f"not the {self.api_version!r} it was asked for"
            )
        status = doc.get("status")
        if not isinstance(status, dict):
            raise CredentialError(f"{self.source}: its ExecCredential has no status")
        token = status.get("token")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if token is not None and not isinstance(token, str):
            raise CredentialError(f"{self.source}: status.token is not a string")
        if bool(cert) != bool(key) or not all(isinstance(v, str | None) for v in (cert, key)):
            raise CredentialError(
                f"{self.source}: clientCertificateData and clientKeyData come together"
            )
        if not token and not cert:
            raise CredentialError(f"{self.source} returned neither a token nor a certificate")
        expires_at = None
        stamp = status.get("expirationTimestamp")
        if stamp:
            expires_at = _parse_time(stamp)
            if expires_at is None:
                raise CredentialError(
                    f"{self.source}: expirationTimestamp {terminal_safe(str(stamp)[:40])!r} "
                    "is not an RFC 3339 time"
                )
        return Credential(
            token=token or None,
            cert_pem=cert.encode() if cert else None,
            key_pem=key.encode() if key else None,
            expires_at=expires_at,
            obtained_at=started,
        )


async def _run_plugin(
    argv: list[str],
    env: dict[str, str],
    timeout: float,  # noqa: ASYNC109 - a subprocess time limit, enforced inside
) -> tuple[bytes, bytes, int]:
    """Run a plugin with no stdin; its stdout, the tail of its stderr, its exit code.

    The process is killed on timeout (TimeoutError) and on cancellation.
    """
    # its own process group, so that a wrapper's children (sh -c ..., a shim) die with it
    process = await anyio.open_process(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    out = bytearray()
    err = bytearray()

    async def drain(stream: anyio.abc.ByteReceiveStream | None, buf: bytearray, cap: int) -> None:
        if stream is None:
            return
        async for chunk in stream:
            buf += chunk
            if len(buf) > cap:
                del buf[: len(buf) - cap]  # keep the tail

    try:
        with anyio.fail_after(timeout):
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, process.stdout, out, _STDOUT_LIMIT)
                tg.start_soon(drain, process.stderr, err, _STDERR_LIMIT)
            code = await process.wait()
    except BaseException:
        _kill_group(process)
        with anyio.move_on_after(2.0, shield=True):
            await process.wait()
        raise
    finally:
        with anyio.move_on_after(2.0, shield=True):
            await process.aclose()
    return bytes(out), bytes(err), code


def _kill_group(process: anyio.abc.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            process.kill()


def _stderr_tail(err: bytes) -> str:
    text = err.decode("utf-8", "replace").strip()
    if not text:
        return ""
    return ": " + terminal_safe(redact_text(text[-_STDERR_LIMIT:]), newlines=False)


def _exec_cluster_info(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """The ``spec.cluster`` client-go passes with ``provideClusterInfo: true``."""
    info: dict[str, Any] = {"server": cluster.get("server", "")}
    for key, out in (
        ("tls-server-name", "tls-server-name"),
        ("insecure-skip-tls-verify", "insecure-skip-tls-verify"),
        ("proxy-url", "proxy-url"),
        ("disable-compression", "disable-compression"),
    ):
        if cluster.get(key):
            info[out] = cluster[key]
    ca = cluster.get("certificate-authority-data")
    if not ca and cluster.get("certificate-authority"):
        with contextlib.suppress(OSError), open(cluster["certificate-authority"], "rb") as f:
            ca = base64.b64encode(f.read()).decode()
    if ca:
        info["certificate-authority-data"] = ca
    info["config"] = None  # client-go always sends it: the exec extension, or null
    for ext in cluster.get("extensions") or ():
        if isinstance(ext, Mapping) and ext.get("name") == "client.authentication.k8s.io/exec":
            info["config"] = ext.get("extension")
    return info


def _parse_time(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return when.timestamp()


# ---------------------------------------------------------------------- OIDC (legacy)
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


# ---------------------------------------------------------------------- the pool
def credential_insensitive(user_entry: Mapping[str, Any]) -> dict[str, Any]:
    """``user_entry`` without what a refresh rewrites in place, for fingerprints.

    The id-token, refresh-token (and the access-token and expiry of removed providers) of
    an ``auth-provider`` entry change when kubemux or kubectl refresh them; a fingerprint
    computed over this view does not, so such a write-back does not restart the context.
    Everything else (an inline ``token``, certificate data, exec settings) is kept.
    """
    out = dict(user_entry)
    provider = out.get("auth-provider")
    if isinstance(provider, Mapping):
        provider = dict(provider)
        config = provider.get("config")
        if isinstance(config, Mapping):
            provider["config"] = {
                k: v for k, v in config.items() if k not in _AUTH_PROVIDER_MATERIAL
            }
        out["auth-provider"] = provider
    return out


def _user_entry(config: ContextConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = config.client_config()
    users = doc.get("users") or []
    clusters = doc.get("clusters") or []
    user = users[0].get("user") if users and isinstance(users[0], dict) else None
    cluster = clusters[0].get("cluster") if clusters and isinstance(clusters[0], dict) else None
    return (user if isinstance(user, dict) else {}), (cluster if isinstance(cluster, dict) else {})


class CredentialPool:
    """One provider per kubeconfig user entry, shared by the contexts that use it.

    Keyed by the entry's source file, its name and its content (less refreshed material,
    see :func:`credential_insensitive`), so an edited entry gets a new provider while the
    old one serves the generations still using it. A provider lives while a client uses it.
    Hold one pool per registry and pass it to :func:`kubemux._client.open_client`.

    Args:
        exec_timeout: Seconds an exec plugin may run before it is killed.
        token_file_period: Seconds between re-reads of a ``tokenFile``.
    """

    def __init__(
        self, *, exec_timeout: float = EXEC_TIMEOUT, token_file_period: float = TOKEN_FILE_PERIOD
    ) -> None:
        self.exec_timeout = exec_timeout
        self.token_file_period = token_file_period
        self._providers: dict[str, CredentialProvider] = {}
        self._keys: dict[int, str] = {}

    def __repr__(self) -> str:
        return f"<CredentialPool providers={len(self._providers)}>"

    def __len__(self) -> int:
        return len(self._providers)

    def acquire(self, config: ContextConfig) -> CredentialProvider | None:
        """The provider for ``config``'s user (None: static credentials), one more user.

        Raises:
            KubeconfigError: the user entry asks for something kubemux cannot do.
        """
        user, cluster = _user_entry(config)
        where = f"context {config.name!r} (from {config.source}), user {config.user_name!r}"
        kind = _dynamic_kind(user, where, config.source)
        if kind is None:
            return None
        # with provideClusterInfo the plugin's answer depends on the cluster too
        per_cluster = kind == "exec" and bool(user["exec"].get("provideClusterInfo"))
        canonical = json.dumps(
            [
                config.source,
                config.user_name,
                credential_insensitive(user),
                cluster if per_cluster else None,
            ],
            sort_keys=True,
            default=str,
        )
        key = hashlib.sha256(canonical.encode()).hexdigest()
        provider = self._providers.get(key)
        if provider is None:
            provider = self._build(kind, user, cluster, config, where)
            self._providers[key] = provider
            self._keys[id(provider)] = key
        provider.users += 1
        return provider

    def release(self, provider: CredentialProvider) -> None:
        """One user fewer; the provider is dropped when none is left."""
        provider.users -= 1
        if provider.users <= 0:
            key = self._keys.pop(id(provider), None)
            if key is not None and self._providers.get(key) is provider:
                del self._providers[key]

    def status(self) -> list[CredentialStatus]:
        """The status of every live provider."""
        return [p.status() for p in self._providers.values()]

    def _build(
        self,
        kind: str,
        user: Mapping[str, Any],
        cluster: Mapping[str, Any],
        config: ContextConfig,
        where: str,
    ) -> CredentialProvider:
        if kind == "exec":
            return ExecProvider(
                user["exec"], cluster=cluster, timeout=self.exec_timeout, where=where
            )
        if kind == "token-file":
            return TokenFileProvider(str(user["tokenFile"]), period=self.token_file_period)
        provider_config = user["auth-provider"].get("config") or {}
        path = getattr(config, "user_source", None) or config.source
        return OidcProvider(
            provider_config,
            path=path if os.path.isabs(path) else None,
            user_name=config.user_name,
        )


def _dynamic_kind(user: Mapping[str, Any], where: str, source: str) -> str | None:
    if user.get("token"):
        return None  # an inline token wins over everything, as in client-go
    provider = user.get("auth-provider")
    if isinstance(provider, Mapping):
        name = provider.get("name")
        if name in _REMOVED_PROVIDERS:
            raise KubeconfigError(
                f"{where}: auth-provider {name!r} was removed from client-go; use "
                f"{_REMOVED_PROVIDERS[str(name)]} instead",
                path=source,
            )
        if name != "oidc":
            raise KubeconfigError(f"{where}: unknown auth-provider {name!r}", path=source)
        if not isinstance(provider.get("config") or {}, Mapping):
            raise KubeconfigError(f"{where}: auth-provider config is not a mapping", path=source)
        return "oidc"
    if isinstance(user.get("exec"), Mapping):
        return "exec"
    if user.get("tokenFile"):
        return "token-file"
    return None


# ---------------------------------------------------------------------- in-cluster
def in_cluster_config(
    root: str = IN_CLUSTER_ROOT, environ: Mapping[str, str] | None = None
) -> ContextConfig | None:
    """The ``in-cluster`` context of a pod's service account, or None outside a pod.

    Needs ``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT`` and a ``token`` file
    in ``root``; uses ``root/ca.crt`` and ``root/namespace`` when present. The token is a
    ``tokenFile`` (re-read as it rotates), so rotation never restarts the context.
    """
    from ._kubeconfig import ContextConfig

    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    token = os.path.join(root, "token")
    if not host or not port or not os.path.isfile(token):
        return None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    cluster: dict[str, Any] = {"server": f"https://{host}:{port}"}
    ca = os.path.join(root, "ca.crt")
    if os.path.isfile(ca):
        cluster["certificate-authority"] = ca
    context: dict[str, Any] = {"cluster": IN_CLUSTER_NAME, "user": IN_CLUSTER_NAME}
    with contextlib.suppress(OSError, UnicodeDecodeError):
        with open(os.path.join(root, "namespace"), encoding="utf-8") as f:
            namespace = f.read().strip()
        if namespace:
            context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": IN_CLUSTER_NAME, "cluster": cluster}],
        "users": [{"name": IN_CLUSTER_NAME, "user": {"tokenFile": token}}],
        "contexts": [{"name": IN_CLUSTER_NAME, "context": context}],
        "current-context": IN_CLUSTER_NAME,
    }
    return ContextConfig.from_dict(IN_CLUSTER_NAME, doc)
