"""FakeCluster: a kube-apiserver stand-in that serves the real list/watch protocol over HTTP.

It listens on 127.0.0.1 (HTTP, or HTTPS with a generated CA) and speaks enough of the API for
informers, ``kubernetes_asyncio`` and ``kubectl get``. Tests drive it directly: object
operations are plain synchronous calls that take effect immediately and reach open watches;
faults (dropped streams, 5xx, stalls, compaction, restarts) are scripted; and requests,
watches and connections are recorded so tests can wait on them instead of sleeping.

Faithful to kube-apiserver:

* one resourceVersion counter across all resources (like etcd); every change bumps it;
* LIST with ``limit``/``continue`` at a consistent snapshot, ``resourceVersion`` +
  ``resourceVersionMatch`` (``Exact``/``NotOlderThan``), 410 ``Expired`` for compacted
  continue tokens (with the "inconsistent continue" token in the Status metadata);
* WATCH as a chunked JSON stream, one event per line, framed as Go's ``net/http`` frames
  it (a 2 KiB buffer before chunking: an event above 2 KiB is one HTTP chunk, smaller
  ones are packed into 2 KiB chunks and cut mid-line); resume from a resourceVersion,
  in-stream ``ERROR`` 410 "too old resource version" (or HTTP 410 with
  ``expired_as_http=True``); ``allowWatchBookmarks`` (every ``bookmark_period`` s);
  ``timeoutSeconds`` ends the stream cleanly; label and field selectors, where an object
  that starts or stops matching is sent as ADDED or DELETED;
* streaming lists (``sendInitialEvents=true`` + ``resourceVersionMatch=NotOlderThan``):
  ADDED for every object, then a BOOKMARK annotated ``k8s.io/initial-events-end`` (sent
  only when ``allowWatchBookmarks=true``, as the real watch cache does), then live events.
  The request validation is the real one (422 ``Invalid`` for a bad combination);
* bearer-token auth with a 401 Status, discovery (``/version``, ``/api``, ``/apis``, group
  versions) good enough for ``kubectl get`` and ``kubectl api-resources``, with the
  built-in short names and the ``all`` category of ``kubectl get all`` (horizontal pod
  autoscalers, ``autoscaling/v2``, included); every error answer is a ``Status`` JSON body;
* aggregated discovery (``APIGroupDiscoveryList`` v2 and v2beta1 from ``/api`` and ``/apis``
  when the Accept header asks for it; ``aggregated_discovery=False`` serves legacy
  discovery only, like a server older than 1.26);
* CustomResourceDefinitions: creating one (:meth:`FakeCluster.add_crd`, ``create``, or a
  POST) serves its resource at every served version, listed in discovery with its short
  names and categories; deleting it withdraws the resource (404), drops its objects and
  ends its open watches;
* the Table format (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``, with
  ``includeObject``) for LIST and WATCH, with kube-apiserver's columns for pods,
  deployments, services, configmaps, nodes, namespaces and events, a CRD's
  ``additionalPrinterColumns``, and ``Name``/``Created At`` for the rest; in a watch only
  the first event carries the column definitions;
* per-token RBAC by namespace and resource (:meth:`FakeCluster.restrict`), answered with
  the 403 Status the RBAC authorizer writes;
* users governed by Kubernetes RBAC (:meth:`FakeCluster.add_user`,
  :meth:`FakeCluster.service_account_token`): Roles, ClusterRoles (aggregation included),
  RoleBindings and ClusterRoleBindings served, watched and enforced for their tokens as
  kube-apiserver's chain does (``system:masters``, RBAC, an optional :attr:`webhook`), the
  403 with the RBAC resolution errors; impersonation (``kubectl auth can-i --as``);
  TokenReview, SubjectAccessReview and SelfSubjectAccessReview;
* writes as kube-apiserver answers them (each checked with kubectl 1.32: ``create -f``,
  ``replace -f``, ``apply -f`` and ``apply --server-side``, ``patch`` of every ``--type``,
  ``label``, ``annotate``, ``scale``, ``delete``): POST (``generateName``, 409
  ``AlreadyExists``), PUT (409 ``Conflict`` on a stale ``metadata.resourceVersion``; a custom
  resource needs one), PATCH as ``application/json-patch+json`` (RFC 6902),
  ``application/merge-patch+json`` (RFC 7386), ``application/strategic-merge-patch+json``
  (built-in kinds only, 415 for custom resources, as the API server) and
  ``application/apply-patch+yaml`` (server-side apply: ``fieldManager`` required; a missing
  object is created), DELETE (the deleted object for pods, namespaces, service accounts and
  storage classes, else a ``Success`` Status; ``preconditions`` checked,
  ``propagationPolicy`` accepted), deletecollection (the deleted items as a List), and
  ``dryRun=All``. Every write bumps the resourceVersion and reaches open watches, except a
  write that changes nothing, which keeps the object as the API server does. Bodies over
  3 MiB get 413;
* the ``status`` subresource (its writes change only ``.status``; writes of the main resource
  of such a kind keep the stored status), ``scale`` (an ``autoscaling/v1`` Scale of
  deployments, replicasets, statefulsets and replication controllers) and ``pods/eviction``;
* ``/openapi/v3``: per group version, the paths and PATCH parameters kubectl's validation
  looks for (``fieldValidation``), no schemas;
* ``pods/log`` from per-container logs a test appends to (:meth:`FakeCluster.append_log`):
  ``container``, ``tailLines``, ``sinceSeconds``/``sinceTime``, ``timestamps``,
  ``limitBytes``, and ``follow=true`` streaming appended lines until the pod is deleted or
  its container terminated; ``kubectl logs [-f]`` works;
* ``pods/exec`` and ``pods/attach`` over WebSocket (``v5``/``v4.channel.k8s.io``, kubectl
  1.32's default): a minimal exec (``echo``, ``cat`` echoing stdin, ``true``, ``false``,
  ``sh -c 'exit N'``), the kubelet's status on channel 3; ``attach`` streams the lines
  appended once the request arrived (and echoes stdin) until the pod goes or stdin ends;
* ``pods/portforward`` over WebSocket with SPDY/3.1 inside (``SPDY/3.1+portforward.k8s.io``,
  kubectl 1.32's default): the kubelet's error and data stream per connection, each
  connection to pod port P forwarded to the address :meth:`forward_port` gave for P;
  ``kubectl port-forward`` works;
* exec, attach and port-forward over a plain ``Upgrade: SPDY/3.1`` too (kubectl's SPDY path,
  ``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`` / ``KUBECTL_PORT_FORWARD_WEBSOCKETS=false``),
  with the kubelet's ``X-Stream-Protocol-Version`` negotiation; :attr:`open_upgrades`
  counts the upgraded connections open;
* requests recorded with their verb and resource (:meth:`FakeCluster.request_count`).

Simplified:

* discovery lists only the ``get``, ``list`` and ``watch`` verbs for built-in resources,
  and no subresources;
* deletes are immediate (no finalizers, no graceful deletion, no garbage collector:
  ``propagationPolicy`` deletes no dependents); the Python :meth:`FakeCluster.update` does
  not check ``metadata.resourceVersion`` (HTTP PUT does); ``generation`` bumps when ``spec``
  changes; ``managedFields`` are not maintained; a status given on create is kept;
* the strategic merge patch knows the list keys by where a list sits (``containers`` under a
  ``spec``, ``env`` under a container ...), one table for every built-in kind (see
  ``_patch``); server-side apply merges the applied configuration like a strategic merge
  patch: no field ownership, so fields a manager stops applying stay and there are no
  conflicts between managers (``force`` is accepted and changes nothing);
  ``fieldValidation`` is accepted and not enforced;
* exec and attach over SPDY speak ``v5.channel.k8s.io`` (kubectl 1.32's first offer, v4's
  semantics over SPDY, as a current kubelet) and ``v4.channel.k8s.io``, not v3 and before;
  SPDY has no flow control (neither has spdystream, kubectl's side);
* field selectors accept any dotted path (the real server allows a per-type list) and
  compare the field's string form; missing fields compare as ``""``;
* no protobuf answers: JSON only (kubectl copes); ``/openapi/v2`` is 404 (kubectl then
  computes its patches from its built-in types) and ``/openapi/v3`` has no schemas
  (``kubectl explain`` finds nothing);
* a LIST with a resourceVersion newer than the server's answers 504 at once (the real one
  waits up to 3 s first); a WATCH from a future resourceVersion starts at the current one;
* ``streaming_list=False`` answers a streaming list with the 422 of a server whose WatchList
  feature gate is off (Kubernetes 1.27 to 1.33 by default); ``streaming_list="ignore"``
  behaves like a server older than 1.27, which ignores the unknown parameters and serves a
  plain watch;
* history is kept per resource, ``history_limit`` events each; ``compact()`` forgets all of
  it at once and ends every open watch with an in-stream 410 (after the events it had
  queued), where etcd would only end the watches that lag behind the compaction.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from ..._resources import Resource
from .._access.rbac import review_versions
from .._access.tokens import AuthState
from .._apiserver.http import ApiServer, RecordedRequest, StreamingList, TrackingServer
from .._state.state import ObjectStore
from .auth import AuthControls, make_tls
from .crds import CrdControls
from .faults import FaultControls
from .observe import ObservationControls
from .pods import PodControls

__all__ = ["FakeCluster", "RecordedRequest"]

_SHUTDOWN_TIMEOUT = 2.0


class FakeCluster(AuthControls, CrdControls, FaultControls, ObservationControls, PodControls):
    """A fake kube-apiserver on 127.0.0.1 for tests, benchmarks and demos.

    Use it as an async context manager (``async with FakeCluster() as cluster``), or call
    :meth:`start` and :meth:`stop`. Object operations (:meth:`create`, :meth:`update`,
    :meth:`delete`, ...) are synchronous, take effect at once and never wait for watchers;
    they must be called from the thread running the event loop (or before it starts).

    Args:
        tokens: Accepted bearer tokens; None turns authentication off. The set is kept and
            exposed as :attr:`tokens`, so tests can change it while the server runs.
        tls: Serve HTTPS with a certificate from a freshly generated CA (:attr:`ca_file`).
            Needs the ``trustme`` package.
        history_limit: Events kept per resource for watch resumes and paginated lists.
        port: Port to listen on; 0 picks a free one on the first start (kept on restart).
        bookmark_period: Seconds between BOOKMARK events on watches that allow them.
        streaming_list: True: serve streaming lists (``sendInitialEvents``); False: reject
            them with a 422 like a server whose WatchList gate is off; ``"ignore"``: ignore
            the parameters like a server older than Kubernetes 1.27.
        expired_as_http: Answer a watch from an expired resourceVersion with HTTP 410
            instead of an in-stream ERROR event.
        chunk_buffer: Bytes a watch response buffers before it sends an HTTP chunk. The
            default is Go's (2048), which is what kube-apiserver clients see; a large value
            sends big chunks, cheaper to read than any real cluster's stream.
        aggregated_discovery: Answer ``/api`` and ``/apis`` with an
            ``APIGroupDiscoveryList`` when asked; False: legacy discovery only.
        table_format: Answer Table requests with Tables; False: plain objects, like an
            aggregated API server without Table support.
        name: A label for ``repr`` and logs.
        signing_key: Also accept signed tokens (:meth:`sign_token`, or minted out of process
            with :func:`kubemux.testing.sign_token`), each until its expiry.
        newest_only: Refuse a signed token once a newer one for the same user was used.
        self_subject_review: Which versions of ``POST /apis/authentication.k8s.io/<version>/
            selfsubjectreviews`` are served, answered per credential as kube-apiserver does
            (a :meth:`restrict` token's user, a signed token's user, a client certificate's
            common name, else ``token-<first 8 hex digits of its sha256>``). True: ``v1``
            and ``v1beta1`` (Kubernetes 1.28 and later); False: none, every version a 404
            (before 1.26, or the API turned off); or the versions to serve, e.g.
            ``("v1beta1",)`` for 1.27, ``("v1alpha1",)`` for 1.26 with the alpha API on.
        rbac: Start with the RBAC objects a new cluster has (:meth:`bootstrap_rbac`). The
            RBAC resources are served either way, and tokens of :meth:`add_user` are always
            governed by RBAC; the other credentials are cluster admins.
    """

    def __init__(
        self,
        *,
        tokens: Iterable[str] | None = None,
        tls: bool = False,
        history_limit: int = 10_000,
        port: int = 0,
        bookmark_period: float = 1.0,
        streaming_list: StreamingList = True,
        expired_as_http: bool = False,
        chunk_buffer: int = 2048,
        aggregated_discovery: bool = True,
        table_format: bool = True,
        name: str = "fake",
        signing_key: str | None = None,
        newest_only: bool = False,
        self_subject_review: bool | Iterable[str] = True,
        rbac: bool = False,
    ) -> None:
        self.name = name
        self._auth = AuthState(
            set(tokens) if tokens is not None else None,
            signing_key=signing_key,
            newest_only=newest_only,
        )
        self._port = port
        self._store = ObjectStore(history_limit=history_limit, on_change=self._notify)
        self._api = ApiServer(
            self._store,
            tokens=set(tokens) if tokens is not None else None,
            bookmark_period=bookmark_period,
            streaming_list=streaming_list,
            expired_as_http=expired_as_http,
            chunk_buffer=chunk_buffer,
            auth=self._auth,
            aggregated_discovery=aggregated_discovery,
            table_format=table_format,
        )
        self._api.self_subject_review = review_versions(self_subject_review)
        self._runner: web.ServerRunner | None = None
        self._server: TrackingServer | None = None
        self._ssl: ssl.SSLContext | None = None
        self._ca_file: str | None = None
        self._ca: Any = None
        if tls:
            self._ssl, self._ca_file, self._ca = make_tls(self)
        if rbac:
            self.bootstrap_rbac()

    def _notify(self) -> None:
        self._api.notify()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start listening (on the same port as before after a :meth:`stop`).

        Raises:
            RuntimeError: The cluster is already running.
            OSError: The port cannot be bound.
        """
        if self._runner is not None:
            raise RuntimeError(f"{self!r} is already running")
        self._api.stopping = False
        server = TrackingServer(self._api)
        runner = web.ServerRunner(server, shutdown_timeout=_SHUTDOWN_TIMEOUT)
        await runner.setup()
        site = web.TCPSite(
            runner, "127.0.0.1", self._port, ssl_context=self._ssl, reuse_address=True
        )
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._port = int(runner.addresses[0][1])
        self._runner, self._server = runner, server
        self._notify()

    async def stop(self) -> None:
        """Stop listening and close every connection; idempotent. State is kept.

        Open watch streams and requests in flight (also stalled ones) are cut off abruptly,
        like a crashing server; a :meth:`stall` ends with it. Returns once every server task has finished; cancelling
        this call may leave some of them winding down.
        """
        runner, server = self._runner, self._server
        if runner is None or server is None:
            return
        self._runner = self._server = None
        self._api.release()
        for transport in list(server.live.values()):
            transport.abort()
        try:
            await runner.cleanup()
            if server.finishing:
                await asyncio.wait(set(server.finishing), timeout=_SHUTDOWN_TIMEOUT)
        finally:
            self._api.stopping = False
            self._notify()

    async def restart(self) -> None:
        """:meth:`stop`, then :meth:`start` on the same port, keeping all objects."""
        await self.stop()
        await self.start()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def is_running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._runner is not None

    @property
    def port(self) -> int:
        """The TCP port (0 until the first start when none was given)."""
        return self._port

    @property
    def server(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:41234``.

        Raises:
            RuntimeError: No port is known yet (not started and ``port=0``).
        """
        if not self._port:
            raise RuntimeError(f"{self!r} has no port yet: start it first")
        scheme = "https" if self._ssl is not None else "http"
        return f"{scheme}://127.0.0.1:{self._port}"

    @property
    def ca_file(self) -> str | None:
        """Path of the PEM file of the CA that signed the server certificate (``tls=True``)."""
        return self._ca_file

    def client_ssl_context(self) -> ssl.SSLContext | None:
        """An SSL context that trusts this cluster's CA, for aiohttp clients (``tls=True``)."""
        if self._ca_file is None:
            return None
        return ssl.create_default_context(cafile=self._ca_file)

    # ------------------------------------------------------------------ objects
    def create(self, resource: str | Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create an object and notify watches.

        Fills ``kind``, ``apiVersion``, ``metadata.uid``, ``resourceVersion``,
        ``creationTimestamp`` (when missing) and ``generation``; the namespace of a
        namespaced object defaults to ``default``. ``generateName`` works.

        Returns:
            A copy of the stored object.

        Raises:
            ValueError: It exists already, or it has no name.
        """
        return self._store.create(resource, obj)

    def create_many(self, resource: str | Resource, objs: Iterable[Mapping[str, Any]]) -> str:
        """Create many objects cheaply: one history append and one wake-up per watch.

        Returns:
            The resourceVersion after the last one.

        Raises:
            ValueError: An object exists already (the ones before it were created).
        """
        return str(self._store.create_many(resource, objs))

    def update(self, resource: str | Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace an object (no resourceVersion conflict check) and notify watches.

        Returns:
            A copy of the stored object, with its new resourceVersion.

        Raises:
            KeyError: No such object.
        """
        return self._store.update(resource, obj)

    def apply(self, resource: str | Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create the object, or update it when it exists. Returns a copy of it."""
        return self._store.apply(resource, obj)

    def delete(
        self, resource: str | Resource, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """Delete an object at once; watches get DELETED with a new resourceVersion.

        Returns:
            The deleted object as sent in the DELETED event, or None if it did not exist.
        """
        return self._store.delete(resource, namespace, name)

    def get(
        self, resource: str | Resource, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """A copy of one object, or None. ``namespace`` is ignored for cluster-scoped types."""
        return self._store.get(resource, namespace, name)

    def objects(
        self, resource: str | Resource, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Copies of the current objects (all namespaces by default), by (namespace, name)."""
        return self._store.objects(resource, namespace)

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        return str(self._store.rv)

    # ------------------------------------------------------------------ observation
    async def wait_for(
        self,
        predicate: Callable[[], bool],
        timeout: float = 5.0,  # noqa: ASYNC109 - the documented test-helper signature
    ) -> None:
        """Wait until ``predicate()`` is true.

        It is re-checked after every request start and end, watch open and close,
        connection open and close and object change (and every 20 ms, for conditions
        outside the cluster). Cancelling the call just stops the wait.

        Raises:
            TimeoutError: Still false after ``timeout`` seconds.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                name = getattr(predicate, "__qualname__", repr(predicate))
                raise TimeoutError(
                    f"FakeCluster.wait_for: {name} still false after {timeout} s; {self!r}"
                )
            await self._api.wait_changed(min(remaining, 0.02))

    def __repr__(self) -> str:
        where = self.server if self._port else "no port"
        state = "running" if self.is_running else "stopped"
        if self._api.stalled:
            state += ", stalled"
        return (
            f"<FakeCluster {self.name!r} {where} {state}; rv={self._store.rv} "
            f"watches={self.open_watches} connections={self.open_connections} "
            f"requests={len(self._api.requests)}>"
        )
