"""FakeCluster's credentials side: tokens, signed tokens, client certificates, RBAC limits."""

from __future__ import annotations

import datetime
import os
import shutil
import ssl
import tempfile
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from .._access.authorizer import Webhook
from .._access.bootstrap import bootstrap_policy
from .._access.rbac import Access
from .._access.tokens import AuthState, sign_token
from .._apiserver.http import ApiServer
from .._state.state import RBAC_RESOURCES

__all__ = ["AuthControls", "make_tls"]


def make_tls(owner: object) -> tuple[ssl.SSLContext, str, Any]:
    """A server SSL context with a certificate from a fresh CA: (context, CA file, CA).

    The CA file's folder is removed when ``owner`` is garbage collected.
    """
    try:
        import trustme
    except ImportError as exc:  # pragma: no cover - trustme is a test dependency
        raise RuntimeError("FakeCluster(tls=True) needs the 'trustme' package") from exc
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    folder = tempfile.mkdtemp(prefix="kubemux-fake-ca-")
    weakref.finalize(owner, shutil.rmtree, folder, True)
    ca_file = os.path.join(folder, "ca.crt")
    ca.cert_pem.write_to_path(ca_file)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    leaf.configure_cert(context)
    return context, ca_file, ca


class AuthControls:
    """The authentication and authorization methods of :class:`FakeCluster`."""

    _api: ApiServer
    _auth: AuthState
    _ca: Any
    _ssl: ssl.SSLContext | None

    @property
    def tokens(self) -> set[str]:
        """The accepted bearer tokens; mutate it to rotate credentials at runtime.

        Ignored when the cluster was created with ``tokens=None`` (no authentication).
        """
        return self._api.tokens

    @property
    def signing_key(self) -> str | None:
        """The key signed tokens are checked with (``signing_key=``), or None."""
        return self._auth.signing_key

    def sign_token(self, user: str = "user", ttl: float = 3600.0) -> str:
        """A token this cluster accepts as ``user`` for ``ttl`` seconds (``signing_key=``).

        With ``newest_only=True`` it also stops being accepted once a token issued later for
        the same user has been used.

        Raises:
            RuntimeError: The cluster has no signing key.
        """
        if self._auth.signing_key is None:
            raise RuntimeError(f"{self!r} has no signing_key")
        return sign_token(self._auth.signing_key, user, ttl, now=self._auth.clock())

    def issue_client_cert(self, user: str, ttl: float = 86400.0) -> tuple[bytes, bytes]:
        """A client certificate for ``user`` (its common name) and its key, both PEM.

        Accepted on this cluster's TLS port while valid and not revoked (``tls=True``).

        Raises:
            RuntimeError: The cluster does not serve TLS.
        """
        if self._ca is None or self._ssl is None:
            raise RuntimeError(f"{self!r} does not serve TLS")
        if self._ssl.verify_mode != ssl.CERT_OPTIONAL:
            # from the first issued certificate on, new handshakes ask for client
            # certificates signed by this CA (others then fail the handshake)
            self._ca.configure_trust(self._ssl)
            self._ssl.verify_mode = ssl.CERT_OPTIONAL
        now = self._auth.clock()
        start = datetime.datetime.fromtimestamp(now - 60, datetime.UTC)
        end = datetime.datetime.fromtimestamp(now + ttl, datetime.UTC)
        leaf = self._ca.issue_cert(
            "client.kubemux.invalid", common_name=user, not_before=start, not_after=end
        )
        cert_pem: bytes = leaf.cert_chain_pems[0].bytes()
        from cryptography import x509

        serial = x509.load_pem_x509_certificate(cert_pem).serial_number
        self._auth.cert_issued[serial] = now
        return cert_pem, leaf.private_key_pem.bytes()

    def revoke(self, user: str) -> None:
        """Refuse every signed token and client certificate issued to ``user`` so far."""
        self._auth.revoke(user)
        self._api.notify()

    @property
    def unauthorized(self) -> int:
        """Requests answered 401 so far."""
        return self._auth.rejected

    def restrict(
        self,
        token: str,
        *,
        user: str,
        namespaces: Iterable[str] | None = None,
        resources: Iterable[str] | None = None,
    ) -> None:
        """Limit what ``token`` may read, like namespace-scoped RoleBindings.

        Requests outside the limits get the 403 ``Forbidden`` Status kube-apiserver writes
        (``pods is forbidden: User "x" cannot list resource "pods" in API group "" at the
        cluster scope``). Discovery stays open. With authentication on, the token is also
        added to :attr:`tokens`.

        Args:
            token: The bearer token.
            user: The user name the messages give.
            namespaces: Namespaces it may use; None: every namespace and the cluster scope.
                When given, cluster-wide requests and cluster-scoped resources are forbidden.
            resources: Resources it may use, by full kubectl name (``pods``,
                ``deployments.apps``); None: all.
        """
        self._api.access[token] = Access(
            user=user,
            namespaces=frozenset(namespaces) if namespaces is not None else None,
            resources=frozenset(resources) if resources is not None else None,
        )
        if self._api.auth_required:
            self._api.tokens.add(token)

    def unrestrict(self, token: str) -> None:
        """Lift the limits :meth:`restrict` put on ``token``."""
        self._api.access.pop(token, None)

    # ------------------------------------------------------------------ RBAC users
    def add_user(
        self,
        name: str,
        *,
        groups: Iterable[str] = (),
        uid: str = "",
        extra: Mapping[str, Iterable[str]] | None = None,
        ttl: float | None = None,
        token: str | None = None,
    ) -> str:
        """A bearer token that authenticates as ``name`` and is governed by RBAC.

        Its requests are authorized as kube-apiserver authorizes them (``system:masters``,
        then the cluster's Roles, ClusterRoles, RoleBindings and ClusterRoleBindings, then
        :attr:`webhook`), denials answered with the API server's 403. TokenReview says who it
        is: ``groups`` plus ``system:authenticated``, ``uid`` (random if not given),
        ``extra``. It looks like a ServiceAccount token (a JWT whose payload has ``sub`` and,
        with ``ttl``, ``exp``) and stops authenticating after ``ttl`` seconds (a 401).
        Accepted whatever ``tokens`` says. ``token``: this token instead of a new one (one
        person's OIDC token, which every cluster of a fleet accepts: give each cluster
        the token another one minted).
        """
        return self._api.identities.mint(
            name, groups=groups, uid=uid, extra=extra, ttl=ttl, token=token
        )

    def service_account_token(
        self,
        namespace: str,
        name: str,
        *,
        ttl: float | None = None,
        extra: Mapping[str, Iterable[str]] | None = None,
    ) -> str:
        """A token of ServiceAccount ``namespace/name`` (see :meth:`add_user`): the user
        ``system:serviceaccount:NS:NAME`` in ``system:serviceaccounts`` and
        ``system:serviceaccounts:NS``."""
        return self.add_user(
            f"system:serviceaccount:{namespace}:{name}",
            groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}"),
            extra=extra,
            ttl=ttl,
        )

    def revoke_token(self, token: str) -> bool:
        """Stop accepting a token of :meth:`add_user` (it then gets 401); True if it was one."""
        revoked = self._api.identities.revoke(token)
        self._api.notify()
        return revoked

    @property
    def webhook(self) -> Webhook | None:
        """An authorizer after RBAC, standing for a webhook or Node authorizer (EKS access
        entries, AKS Azure RBAC): ``webhook(caller, request) -> bool``, True allowing what
        RBAC did not. SubjectAccessReviews see it; a kubemux with local RBAC only does not.
        None (the default): none."""
        return self._api.webhook

    @webhook.setter
    def webhook(self, value: Webhook | None) -> None:
        self._api.webhook = value

    def bootstrap_rbac(self) -> None:
        """Create the RBAC objects a new cluster has (``FakeCluster(rbac=True)`` does it):
        ``cluster-admin``, ``system:basic-user``, ``system:discovery``,
        ``system:public-info-viewer`` and the aggregated ``admin``, ``edit``, ``view``."""
        roles, bindings = bootstrap_policy()
        store = self._api.store
        for role in roles:
            store.apply(RBAC_RESOURCES["clusterroles"], role)
        for binding in bindings:
            store.apply(RBAC_RESOURCES["clusterrolebindings"], binding)
