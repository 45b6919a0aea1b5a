"""The HTTP side of the fake: the request entry point, faults, routing and discovery.

The handlers live in their own modules: ``_rest`` (GET, LIST, POST), ``_writes`` (PUT, PATCH,
DELETE, deletecollection, status/scale/eviction), ``_watch_stream`` (WATCH), ``_pod_logs``
(pods/log), ``_pod_exec`` (exec and attach over WebSocket), ``_pod_forward`` and ``_spdy``
(port-forward over SPDY/3.1), ``_openapi``, ``_table_http`` (Table negotiation), ``_rbac``
(credentials and RBAC), ``_responses`` (Status bodies) and ``_chunked`` (Go's chunked
framing); ``_request_info`` reads the verb and resource of a path.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import hdrs, web
from aiohttp.web_protocol import RequestHandler

from .._access.authorizer import Caller, Decision, authorize, forbidden_body, request_of
from .._access.authorizer import Request as AuthzRequest
from .._access.identities import EXPIRED, admin_caller, impersonation
from .._access.rbac import Access, bearer, common_name, forbidden, peercert, self_subject_review
from .._kubelet.exec import serve_stream
from .._kubelet.logs import serve_log
from .._state.api_state import ApiState, Fault, RecordedRequest, StreamingList
from .._state.resource import ResourceState
from .._state.state import RBAC_RESOURCES
from .._state.views import SCALE_KINDS, has_status, scale_view
from .._wire.protocol import BadRequest, Selector
from .._wire.request_info import RequestInfo, request_info
from .._wire.responses import (
    JSON,
    abort,
    is_json,
    json_response,
    media_types,
    method_not_allowed,
    not_found,
    status_response,
    too_large,
)
from .discovery import (
    DISCOVERY_VERSIONS,
    VERSION_INFO,
    aggregated,
    api_versions,
    group_list,
    groups,
    resource_list,
)
from .openapi import openapi
from .rest import create_object, get_object, list_objects
from .reviews import REVIEWS, serve_review
from .tables import table_printer
from .watch import serve_watch
from .writes import delete_collection, delete_one, evict, patch_object, replace_object

__all__ = ["Access", "ApiServer", "Fault", "RecordedRequest", "StreamingList", "TrackingServer"]

_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


class ApiServer(ApiState):
    """Serves one :class:`ObjectStore` over the kube-apiserver HTTP protocol."""

    # ------------------------------------------------------------------ entry point
    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Serve one request (the aiohttp low-level server's handler)."""
        query = dict(request.query.items())
        is_watch = query.get("watch", "").lower() in ("true", "1")
        token = bearer(request.headers.get(hdrs.AUTHORIZATION))
        path = request.path
        info = request_info(request.method, path, is_watch=is_watch)
        self.requests.append(
            RecordedRequest(
                method=request.method,
                path=path,
                query=query,
                token=token,
                is_watch=is_watch,
                verb=info.verb,
                resource=info.resource,
                namespace=info.namespace,
                name=info.name,
                subresource=info.subresource,
                client_cert=common_name(peercert(request)),
            )
        )
        self.notify()
        try:
            await self.held()
            if self.stopping:
                return abort(request)
            fault = self.take_fault(path, is_watch, query)
            if fault is not None:
                headers = {"Retry-After": "1"} if fault.status in (429, 503) else None
                return status_response(
                    fault.status,
                    fault.reason,
                    f"fault injected by FakeCluster.fail_next ({fault.reason})",
                    headers=headers,
                )
            user = None
            found = self.identities.lookup(token) if token is not None else None
            if found is EXPIRED:
                return status_response(401, "Unauthorized", "Unauthorized")
            governed = found is not None  # a user token: RBAC decides
            if found is None and self.auth.required:
                user = self.auth.authenticate(token, peercert(request))
                if user is None:
                    return status_response(401, "Unauthorized", "Unauthorized")
            caller = found if found is not None else admin_caller(token, user)
            acting = impersonation(request.headers, caller, self._allows)
            if isinstance(acting, AuthzRequest):  # not allowed to impersonate that
                return json_response(forbidden_body(caller, acting, ""), status=403)
            if acting is not None:
                caller, governed = acting, True
            if governed:
                attrs = request_of(info, request.method, path, query)
                decision = self.authorize(caller, attrs)
                if not decision.allowed:
                    body = forbidden_body(caller, attrs, decision.reason)
                    return json_response(body, status=403)
            if request.method == "POST" and self._is_review(path):
                version = path.split("/")[3]
                if governed:
                    info_ = caller.user_info()
                    review = self_subject_review(None, token, info_["username"], version)
                    review["status"]["userInfo"] = info_
                else:
                    access = self.access.get(token) if token is not None else None
                    review = self_subject_review(access, token, user, version)
                return json_response(review, status=201)
            if request.method == "POST" and (info.group, info.plural) in REVIEWS and not info.name:
                return await serve_review(
                    request,
                    info.group,
                    info.version,
                    info.plural or "",
                    caller,
                    self._authenticate,
                    self.authorize,
                )
            if request.method not in _METHODS:
                return method_not_allowed()
            return await self._route(request, info, path, query, is_watch, token)
        except BadRequest as exc:
            return too_large(exc) or status_response(400, "BadRequest", str(exc))
        finally:
            self.notify()

    # ------------------------------------------------------------------ authorization
    def _rbac_objects(self, plural: str) -> list[dict[str, Any]]:
        return self.store.objects(RBAC_RESOURCES[plural])

    def authorize(self, caller: Caller, attrs: AuthzRequest) -> Decision:
        """The fake's authorizer chain for ``caller`` asking ``attrs``."""
        return authorize(self._rbac_objects, caller, attrs, self.webhook)

    def _allows(self, caller: Caller, attrs: AuthzRequest) -> bool:
        return self.authorize(caller, attrs).allowed

    def _authenticate(self, token: str) -> Caller | None:
        """Who ``token`` is, for a TokenReview: a user token's user, an admin credential's
        ``system:masters`` user, :data:`EXPIRED`, or None."""
        found = self.identities.lookup(token)
        if found is not None:
            return found
        if not self.auth.required:
            return None
        rejected = self.auth.rejected
        user = self.auth.authenticate(token, None)
        self.auth.rejected = rejected  # a review's failure is not a request answered 401
        return None if user is None else admin_caller(token, user)

    def _is_review(self, path: str) -> bool:
        """``/apis/authentication.k8s.io/<served version>/selfsubjectreviews``?"""
        parts = path.split("/")
        return (
            len(parts) == 5
            and parts[:3] == ["", "apis", "authentication.k8s.io"]
            and parts[3] in self.self_subject_review
            and parts[4] == "selfsubjectreviews"
        )

    async def _route(
        self,
        request: web.BaseRequest,
        info: RequestInfo,
        path: str,
        query: dict[str, str],
        is_watch: bool,
        token: str | None,
    ) -> web.StreamResponse:
        parts = [p for p in path.split("/") if p]
        method = request.method
        if method != "GET" and (not parts or parts[0] not in ("api", "apis") or is_watch):
            return method_not_allowed()
        if not parts:
            return json_response({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/version"]})
        head = parts[0]
        if len(parts) == 1 and head in ("healthz", "livez", "readyz"):
            return web.Response(text="ok")
        if parts == ["version"]:
            return json_response(VERSION_INFO)
        if head == "openapi":
            return openapi(self.store, parts[1:])
        if head not in ("api", "apis"):
            return not_found()
        if info.plural is None:
            if method != "GET":
                return method_not_allowed()
            if len(parts) == 1:
                return self._discovery(request, core=head == "api")
            if head == "apis" and len(parts) == 2:
                group_info = self.discovery_overrides.get((path, False))
                group_info = group_info or groups(self.store).get(parts[1])
                return json_response(group_info) if group_info else not_found()
            override = self.discovery_overrides.get((path, False))
            listing = override or resource_list(self.store, info.group, info.version)
            return json_response(listing) if listing else not_found()
        return await self._resource(request, info, query, is_watch, token)

    async def _resource(
        self,
        request: web.BaseRequest,
        info: RequestInfo,
        query: dict[str, str],
        is_watch: bool,
        token: str | None,
    ) -> web.StreamResponse:
        assert info.plural is not None
        state = self.store.lookup(info.group, info.version, info.plural)
        namespace, name, sub = info.namespace, info.name, info.subresource
        if state is None or info.extra:
            return not_found()
        res = state.resource
        if (namespace is not None and not res.namespaced) or (
            name is not None and res.namespaced and namespace is None
        ):
            return not_found()
        method = request.method
        access = self.access.get(token) if token is not None else None
        if access is not None and not access.allows(res, namespace):
            return forbidden(access.user, info.verb, res, namespace, name)
        store = self.store
        if name is None:
            if method == "POST":
                return await create_object(request, store, state, namespace, query)
            if method == "DELETE":
                selector = Selector.parse(
                    namespace, query.get("labelSelector", ""), query.get("fieldSelector", "")
                )
                return await delete_collection(request, store, state, selector, query)
            if method != "GET":
                return method_not_allowed()
        elif sub is None:
            if method == "PUT":
                return await replace_object(request, store, state, namespace, name, query)
            if method == "PATCH":
                return await patch_object(request, store, state, namespace, name, query)
            if method == "DELETE":
                return await delete_one(request, store, state, namespace, name, query)
            if method != "GET":
                return method_not_allowed()
        else:
            return await self._subresource(request, state, namespace, name, sub, query)
        table = (
            table_printer(request, store, state, info.version, query) if self.table_format else None
        )
        field_selector = query.get("fieldSelector", "")
        if name is not None:
            if not is_watch:
                return get_object(state, namespace, name)
            extra = f"metadata.name={name}"
            field_selector = f"{field_selector},{extra}" if field_selector else extra
        selector = Selector.parse(namespace, query.get("labelSelector", ""), field_selector)
        if is_watch:
            return await serve_watch(self, request, state, selector, query, token, table)
        return list_objects(store, state, selector, query, table)

    async def _subresource(
        self,
        request: web.BaseRequest,
        state: ResourceState,
        namespace: str | None,
        name: str,
        sub: str,
        query: dict[str, str],
    ) -> web.StreamResponse:
        method, store = request.method, self.store
        ident = (state.resource.group, state.resource.plural)
        pods = ident == ("", "pods")
        if sub in ("status", "scale"):
            if (sub == "status" and not has_status(store, state)) or (
                sub == "scale" and ident not in SCALE_KINDS
            ):
                return not_found()
            if method == "GET":
                stored = state.objects.get(store.key_of(state, namespace, name))
                if stored is None or sub == "status":
                    return get_object(state, namespace, name)
                return json_response(scale_view(state, stored.obj))
            if method == "PUT":
                return await replace_object(request, store, state, namespace, name, query, sub)
            if method == "PATCH":
                return await patch_object(request, store, state, namespace, name, query, sub)
            return method_not_allowed()
        if pods and sub == "eviction" and namespace is not None:
            if method != "POST":
                return method_not_allowed()
            return await evict(request, store, state, namespace, name)
        if pods and sub == "log" and namespace is not None:
            if method != "GET":
                return method_not_allowed()
            return await serve_log(self, request, state, namespace, name)
        if pods and sub in ("exec", "attach", "portforward") and namespace is not None:
            if method not in ("GET", "POST"):
                return method_not_allowed()
            self.upgrades += 1
            try:
                return await serve_stream(self, request, state, namespace, name, sub)
            finally:
                self.upgrades -= 1
                self.notify()
        return not_found()

    # ------------------------------------------------------------------ discovery
    def _discovery(self, request: web.BaseRequest, *, core: bool) -> web.Response:
        """``/api`` or ``/apis``: aggregated when the Accept header asks for it and it is on."""
        accept = request.headers.get(hdrs.ACCEPT, "")
        for media_type, params in media_types(accept) or [("*/*", {})]:
            if not is_json(media_type):
                continue
            kind = params.get("as")
            if kind is None:
                break  # plain JSON: legacy discovery
            if (
                self.aggregated_discovery
                and kind == "APIGroupDiscoveryList"
                and params.get("g") == "apidiscovery.k8s.io"
                and params.get("v") in DISCOVERY_VERSIONS
            ):
                version = params["v"]
                body = self.discovery_overrides.get((request.path, True)) or aggregated(
                    self.store, core=core, version=version
                )
                content_type = (
                    f"application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
                )
                return web.Response(
                    body=orjson.dumps(body), headers={hdrs.CONTENT_TYPE: content_type}
                )
        else:
            if accept:
                return status_response(
                    406, "NotAcceptable", f"only the following media types are accepted: {JSON}"
                )
        override = self.discovery_overrides.get((request.path, False))
        if override is not None:
            return json_response(override)
        return json_response(api_versions(request.host) if core else group_list(self.store))


class TrackingServer(web.Server):
    """aiohttp's low-level server, counting live connections and their handler tasks."""

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api.handle, handler_cancellation=True, access_log=None)
        self._api = api
        self.live: dict[RequestHandler, asyncio.Transport] = {}
        self.finishing: set[asyncio.Task[None]] = set()

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        self.live[handler] = transport
        self._api.notify()

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        task = handler._task_handler  # aiohttp's per-connection task, still winding down
        if task is not None and not task.done():
            self.finishing.add(task)
            task.add_done_callback(self.finishing.discard)
        super().connection_lost(handler, exc)
        self.live.pop(handler, None)
        self._api.notify()
