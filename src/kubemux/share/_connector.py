"""The registry side of shared watches: a connector that runs every slot through a share
session (``WatcherRegistry(..., share=kubemux.share.Redis(url))``).

:class:`ShareConnector` wraps the HTTP connector. Per generation it asks the API server once
who the context's credentials are (a ``SelfSubjectReview``), and per slot it builds the
share key (server, CA, that identity, resource, scope, selectors, store transform) and a
:class:`SharedSource` that runs :meth:`ShareSession.run_slot` with a real informer as
``lead``. Context names and credentials never enter the key, so replicas whose kubeconfigs
name a context differently, or hold a rotated token for the same user, share one watch.

Where no version of the review API answers (Kubernetes before 1.26, or the API turned off),
the identity is a salted digest (HMAC-SHA256 under the engine's ``identity_salt``) of what
actually authenticates the requests: the ``Authorization`` header sent and the client
certificate presented. Never a kubeconfig entry, a token-file path or an exec command line:
those name where a credential comes from, not whose it is (every pod's ``in-cluster``
context reads the same path). A context that sends neither is not shared (role ``local``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import orjson

from .._auth.provider import CredentialStatus
from .._cache.store import Store, Transform, drop_managed_fields
from .._errors import ApiError, KubeconfigError
from .._http.client import ContextClient
from .._informer.informer import Informer, InformerKey, InformerState, InformerStatus
from .._kubeconfig.load import ContextConfig
from .._registry.connector import Connection, Connector, HttpConnection, HttpConnector, SlotSource
from .._resources import Resource
from .._settings import WatchSettings
from .._wire.codec import Entry
from ._base import PlacementStatus, ShareEngine, ShareSession, informer_lead, share_key

__all__ = ["ShareConnection", "ShareConnector", "SharedSource"]

log = logging.getLogger(__name__)

_REVIEW_VERSIONS = ("v1", "v1beta1", "v1alpha1")  # GA in 1.28, beta in 1.27, alpha in 1.26


class ShareConnector:
    """Connects a generation over HTTP and shares its slots through a share session.

    It holds the HTTP connector and delegates to it (composition, not a subclass). Its
    :meth:`open` opens the engine's session for the registry's lifetime; connecting outside
    it fails.

    Raises:
        ValueError: ``http`` is not the built-in HTTP connector (a shared slot's leader
            runs a real informer over the context's client).
    """

    __slots__ = ("_session", "can_lead", "engine", "http")

    def __init__(self, http: Connector, engine: ShareEngine, *, can_lead: bool = True) -> None:
        if not isinstance(http, HttpConnector):
            # a ValueError, as it always was: share= and connector= do not combine
            raise ValueError("share= works with the built-in HTTP connector only")  # noqa: TRY004
        self.http = http
        self.engine = engine
        self.can_lead = can_lead
        self._session: ShareSession | None = None

    def __repr__(self) -> str:
        return f"<ShareConnector {self.engine!r} can_lead={self.can_lead}>"

    @property
    def session(self) -> ShareSession | None:
        """The engine's session while :meth:`open` is entered, else None."""
        return self._session

    def placement_status(self) -> PlacementStatus | None:
        """This replica's part in spreading the leaders (``status().share``); None outside
        :meth:`open`."""
        session = self._session
        return None if session is None else session.placement_status()

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """Open the engine's session (and the HTTP connector's lifetime) until exit."""
        if self._session is not None:
            raise RuntimeError("ShareConnector.open() is already entered")
        async with self.http.open(), self.engine.open() as session:
            self._session = session
            try:
                yield
            finally:
                self._session = None

    @contextlib.asynccontextmanager
    async def connect(self, config: ContextConfig) -> AsyncIterator[Connection]:
        session = self._session
        if session is None:
            raise RuntimeError("ShareConnector used outside its open() (the registry's lifespan)")
        async with self.http.connect_http(config) as conn:
            yield ShareConnection(
                conn, config, session, can_lead=self.can_lead, salt=self.engine.identity_salt
            )


class ShareConnection:
    """An HTTP connection whose slots (object and table views) are shared: it holds the
    HTTP connection and delegates discovery, resolution and credentials to it."""

    __slots__ = ("_identity", "_lock", "_salt", "can_lead", "config", "http", "session")

    def __init__(
        self,
        http: HttpConnection,
        config: ContextConfig,
        session: ShareSession,
        *,
        can_lead: bool,
        salt: bytes = b"",
    ) -> None:
        self.http = http
        self.config = config
        self.session = session
        self.can_lead = can_lead
        self._salt = salt
        self._identity: tuple[str | None, bytes | None] | None = None
        self._lock = anyio.Lock()

    @property
    def client(self) -> ContextClient:
        return self.http.client

    @property
    def settings(self) -> WatchSettings:
        return self.http.settings

    async def resources(self) -> tuple[Resource, ...]:
        return await self.http.resources()

    async def resolve(self, name: str) -> Resource:
        return await self.http.resolve(name)

    def resolve_cached(self, name: str) -> Resource | None:
        return self.http.resolve_cached(name)

    def credential_status(self) -> CredentialStatus | None:
        return self.http.credential_status()

    async def cluster_identity(self) -> tuple[str | None, bytes | None]:
        """(identity as the API server sees it, CA bytes): asked once per generation. The
        identity is None when nothing tells who the credentials are (not shared).

        Raises:
            ApiError, ClusterUnreachable: the review failed (other than a 404 or 403).
            KubeconfigError: the CA file cannot be read.
        """
        async with self._lock:
            if self._identity is None:
                identity = await _identity(self.client, self.config, self._salt)
                self._identity = (identity, await _ca_bytes(self.config))
            return self._identity

    def source(
        self,
        resource: Resource,
        key: InformerKey,
        *,
        store: Store,
        on_state: Callable[[], None],
    ) -> SlotSource:
        return SharedSource(self, resource, key, store=store, on_state=on_state)


class SharedSource:
    """One slot run through the share session: leads (a real informer) or follows."""

    def __init__(
        self,
        conn: ShareConnection,
        resource: Resource,
        key: InformerKey,
        *,
        store: Store,
        on_state: Callable[[], None],
    ) -> None:
        self.conn = conn
        self.resource = resource
        self.key = key
        self.store = store
        self.on_state = on_state
        self.share_key: str | None = None
        self.informer: Informer | None = None
        self.local = False  # nothing identifies the credentials: not shared

    def __repr__(self) -> str:
        st = self.conn.session.slot_status(self.share_key) if self.share_key else None
        role = "local" if self.local else st.role if st is not None else "starting"
        return f"<SharedSource {self.conn.client.context!r} {self.key} {role}>"

    @property
    def has_synced(self) -> bool:
        return self.store.has_synced

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Lead or follow the slot's share key until cancelled; ``started()`` once the
        store is synced in either role. Cancelling releases the lease (bounded)."""
        identity, ca = await self.conn.cluster_identity()
        key = self.key

        def on_informer(informer: Informer) -> None:
            self.informer = informer
            self.on_state()

        lead = informer_lead(
            self.conn.client,
            self.resource,
            key,
            settings=self.conn.settings,
            store=self.store,
            on_state=self.on_state,
            on_informer=on_informer,
        )
        if identity is None:  # nobody can tell whose data this is: watch alone
            self.local = True
            await lead(None, _no_publish, task_status)
            return
        self.share_key = share_key(
            server=self.conn.config.display_server,
            ca=ca,
            identity=identity,
            resource=self.resource,
            namespace=key.namespace,
            label_selector=key.label_selector,
            field_selector=key.field_selector,
            transform=_transform_name(self.store),
            view=key.view,
        )
        await self.conn.session.run_slot(
            key=self.share_key,
            store=self.store,
            lead=lead,
            task_status=task_status,
            can_lead=self.conn.can_lead,
            # Secret slots stay out of Redis (or are sealed) by what is read, the core
            # secrets resource, never by the kind discovery declares (issue 18)
            kind="Secret" if self.resource.is_secret else "",
            on_status=self.on_state,
        )

    def _leading(self) -> bool:
        if self.local:
            return self.informer is not None
        st = self.conn.session.slot_status(self.share_key) if self.share_key else None
        return self.informer is not None and st is not None and st.role in ("leader", "local")

    def status(self) -> InformerStatus:
        if self.local and self.informer is not None:
            return dataclasses.replace(self.informer.status(), share_role="local")
        st = self.conn.session.slot_status(self.share_key) if self.share_key else None
        if self._leading():
            assert self.informer is not None
            base = self.informer.status()
        else:
            store, key = self.store, self.key
            base = InformerStatus(
                resource=key.resource,
                namespace=key.namespace,
                label_selector=key.label_selector,
                field_selector=key.field_selector,
                state=InformerState.WATCHING if store.has_synced else InformerState.LISTING,
                has_synced=store.has_synced,
                objects=len(store),
                resource_version=store.resource_version,
                relists=0,
                reconnects=0,
                skipped_lines=0,
                last_error=st.last_error if st is not None else None,
                last_sync=None,
                bytes_cached=store.writer.sizes().bytes,
                watch_started=st.following_since if st is not None else None,
                last_event=st.last_event if st is not None else None,
                view=key.view,
            )
        if st is None:
            return dataclasses.replace(base, share_role="starting")
        errors = dict(base.errors_by_type)  # the informer's (leading) and the engine's
        for kind, n in st.errors_by_type.items():
            errors[kind] = errors.get(kind, 0) + n
        return dataclasses.replace(
            base,
            share_role=st.role,
            share_lag=st.lag if st.role == "follower" else None,
            stale_since=st.stale_since,
            # values found in Redis and not cached count as skipped lines, the last named
            skipped_lines=base.skipped_lines + st.skipped_values,
            last_error=base.last_error or st.last_error or st.last_skipped,
            # changes applied while following count on after a promotion
            events_applied=base.events_applied + st.events,
            errors_by_type=errors,
        )


def _transform_name(store: Store) -> str:
    """The store transform's identity for the share key ("" for none)."""
    writer = store.writer
    fn: Transform | None = drop_managed_fields if writer.drops_managed_fields else writer.transform
    if fn is None:
        return ""
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"


def _no_publish(etype: str, entry: Entry, resource_version: str) -> None:
    """A local slot's ``publish``: nothing is shared."""


async def _identity(client: ContextClient, config: ContextConfig, salt: bytes) -> str | None:
    """Who the API server says the context's credentials are: user and groups from a
    ``SelfSubjectReview`` (``authentication.k8s.io`` v1, else v1beta1, else v1alpha1, as
    kubectl's ``auth whoami`` falls back). Where none answers (404 or 403), a salted digest of
    the credential the requests send; None when they send none (not shared)."""
    for version in _REVIEW_VERSIONS:
        path = f"/apis/authentication.k8s.io/{version}/selfsubjectreviews"
        review = {"apiVersion": f"authentication.k8s.io/{version}", "kind": "SelfSubjectReview"}
        try:
            body = await client.post_json(path, review)
        except ApiError as exc:
            if exc.status in (403, 404):  # not served (or not allowed): the next version
                continue
            raise
        try:
            info = orjson.loads(body)["status"]["userInfo"]
            user = info["username"]
            groups = sorted(info.get("groups") or ())
            if not isinstance(user, str) or not user or not all(isinstance(g, str) for g in groups):
                raise TypeError("username and groups must be strings")
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            log.warning("context %r: unreadable SelfSubjectReview (%s)", config.name, exc)
            break  # a server that answers but cannot be read: trust only the credential
        return "user:" + orjson.dumps({"user": user, "groups": groups}).decode()
    digest = await _credential_digest(client, config, salt)
    if digest is None:
        log.warning(
            "context %r: the server has no SelfSubjectReview API and the context sends no "
            "credential of its own: its watches are not shared",
            config.name,
        )
        return None
    log.info("context %r: no SelfSubjectReview API; sharing by the credential sent", config.name)
    return "credential:" + digest


async def _credential_digest(
    client: ContextClient, config: ContextConfig, salt: bytes
) -> str | None:
    """HMAC-SHA256 under ``salt`` of what authenticates the context's requests: the
    ``Authorization`` header they send (a refreshing credential's current token, else the
    static token or basic auth) and the client certificate they present; None for neither.

    A token file or an exec plugin counts by what it returned, never by its path or command
    line. Taken once per generation: a token rotated later keeps this generation's key.
    """
    cert: bytes | None = await _static_cert(config)
    authorization, sent_cert = await client.sent_credentials()
    if sent_cert is not None:  # a refreshing credential's certificate is the one presented
        cert = sent_cert
    if authorization is None and cert is None:
        return None
    document = {
        "authorization": authorization or "",
        "cert": hashlib.sha256(cert).hexdigest() if cert is not None else "",
    }
    message = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    return hmac.new(salt, message, hashlib.sha256).hexdigest()


async def _static_cert(config: ContextConfig) -> bytes | None:
    """The client certificate of the context's user entry (inline or its file), or None."""
    user: Any = config.config["users"][0]["user"]
    return await _inline_or_file(config, user, "client-certificate", "its client certificate")


async def _ca_bytes(config: ContextConfig) -> bytes | None:
    cluster: Any = config.config["clusters"][0]["cluster"]
    return await _inline_or_file(config, cluster, "certificate-authority", "its CA file")


async def _inline_or_file(config: ContextConfig, entry: Any, field: str, what: str) -> bytes | None:
    """``entry[field + "-data"]`` (base64, else kept as text), or the file ``entry[field]``
    names, or None; a file that cannot be read is a KubeconfigError naming ``what``."""
    data = entry.get(f"{field}-data")
    if data:
        try:
            return base64.b64decode(data)
        except ValueError:
            return str(data).encode()
    path = entry.get(field)
    if not path:
        return None
    try:
        return await anyio.Path(path).read_bytes()
    except OSError as exc:
        raise KubeconfigError(
            f"context {config.name!r}: cannot read {what}: {exc.strerror}", path=config.source
        ) from exc
