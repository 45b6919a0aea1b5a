"""Credentials that expire: exec plugins, token files, OIDC, in-cluster service accounts.

One :class:`CredentialProvider` per kubeconfig user entry, shared through a
:class:`CredentialPool` by every context that uses that entry, so two contexts never run
the same plugin at once nor race over its files. A provider hands out the current
:class:`Credential`; it refreshes it single-flight when it is due (before its expiry, with a
skew) and after the server answered 401 with it, and never restarts anything: the client
asks it for the credential on every request (:mod:`kubemux._http.client`).

Static credentials (an inline ``token``, client certificate files) need no provider:
kubernetes-asyncio applies them, and a change of them restarts the context.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any, Final

from .._errors import KubeconfigError
from .._kubeconfig.load import ContextConfig
from .._kubeconfig.merge import credential_insensitive
from .exec import EXEC_TIMEOUT, ExecProvider
from .oidc import OidcProvider
from .provider import (
    TOKEN_FILE_PERIOD,
    Credential,
    CredentialProvider,
    CredentialStatus,
    TokenFileProvider,
)
from .writeback import LOCK_TIMEOUT

__all__ = [
    "Credential",
    "CredentialPool",
    "CredentialProvider",
    "CredentialStatus",
    "credential_insensitive",
    "in_cluster_config",
]

IN_CLUSTER_ROOT: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
IN_CLUSTER_NAME: Final = "in-cluster"
# auth-provider config keys that are credential material (refreshed in place), not identity
_REMOVED_PROVIDERS: Final = {
    "gcp": "gke-gcloud-auth-plugin (an exec plugin)",
    "azure": "kubelogin (an exec plugin)",
}


# ---------------------------------------------------------------------- the pool
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
    Hold one pool per registry and pass it to :func:`kubemux._http.client.open_client`.

    Args:
        exec_timeout: Seconds an exec plugin may run before it is killed.
        token_file_period: Seconds between re-reads of a ``tokenFile``.
        kubeconfig_lock_timeout: Seconds an OIDC refresh waits for the kubeconfig's
            ``<file>.lock`` (kubectl's lock) before it gives up without spending anything.
    """

    def __init__(
        self,
        *,
        exec_timeout: float = EXEC_TIMEOUT,
        token_file_period: float = TOKEN_FILE_PERIOD,
        kubeconfig_lock_timeout: float = LOCK_TIMEOUT,
    ) -> None:
        self.exec_timeout = exec_timeout
        self.token_file_period = token_file_period
        self.kubeconfig_lock_timeout = kubeconfig_lock_timeout
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
        path = config.user_source or config.source
        return OidcProvider(
            provider_config,
            path=path if os.path.isabs(path) else None,
            user_name=config.user_name,
            lock_timeout=self.kubeconfig_lock_timeout,
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
    from .._kubeconfig.load import ContextConfig

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
