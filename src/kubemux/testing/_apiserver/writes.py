"""Writes of the fake API server: PUT, PATCH (every type), DELETE, deletecollection, and the
``status``, ``scale`` and ``eviction`` subresources, answered as kube-apiserver answers them.

A write reads the current view of the object (``_views``), applies the request to it, writes
it back into the object and answers the new view.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import yaml
from aiohttp import hdrs, web

from .._state.resource import ResourceState, Stored
from .._state.state import ObjectStore
from .._state.views import unview, view
from .._wire.patch import PatchError, PatchRejected, json_patch, merge_patch, strategic_merge_patch
from .._wire.protocol import BadRequest, Selector
from .._wire.responses import JSON, json_response, read_body, status_response

__all__ = [
    "apply_patch",
    "delete_collection",
    "delete_one",
    "evict",
    "patch_object",
    "replace_object",
]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
RETURNS_DELETED = frozenset(
    {
        ("", "pods"),
        ("", "namespaces"),
        ("", "serviceaccounts"),
        ("storage.k8s.io", "storageclasses"),
    }
)
"""Kinds whose DELETE answers the deleted object (``ReturnDeletedObject``); others a Status."""
_PROPAGATION = ("Orphan", "Background", "Foreground")


# ------------------------------------------------------------------------------ bodies
def _decode(body: bytes, what: str = "the request body") -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"{what} is not JSON: {exc}") from None


def _details(state: ResourceState, name: str, uid: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if state.resource.group:
        details["group"] = state.resource.group
    details["kind"] = state.resource.plural
    if uid is not None:
        details["uid"] = uid
    return details


def _not_found(state: ResourceState, name: str) -> web.Response:
    return status_response(
        404, "NotFound", f'{state.resource.name} "{name}" not found', details=_details(state, name)
    )


def _conflict(state: ResourceState, name: str, why: str) -> web.Response:
    return status_response(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {state.resource.name} "{name}": {why}',
        details=_details(state, name),
    )


_MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def _dry_run(query: Mapping[str, str]) -> bool:
    value = query.get("dryRun", "")
    if value not in ("", "All"):
        raise BadRequest(f'Invalid dry run value "{value}": only "All" is supported')
    return value == "All"


def _object(stored: Stored) -> web.Response:
    return web.Response(body=stored.raw, content_type=JSON)


def _meta(obj: Any) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


# ------------------------------------------------------------------------------ PUT
async def replace_object(
    request: web.BaseRequest,
    store: ObjectStore,
    state: ResourceState,
    namespace: str | None,
    name: str,
    query: Mapping[str, str],
    sub: str | None = None,
) -> web.Response:
    """PUT: replace the object (or its view) from the body; 409 on a stale resourceVersion."""
    body = _decode(await read_body(request))
    dry_run = _dry_run(query)
    if not isinstance(body, Mapping):
        raise BadRequest("the request body is not a JSON object")
    meta = _meta(body)
    if meta.get("name") != name:
        raise BadRequest(
            f"the name of the object ({meta.get('name', '')}) does not match the name on the URL ({name})"
        )
    if namespace is not None and meta.get("namespace") not in (None, "", namespace):
        raise BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    key = store.key_of(state, namespace, name)
    old = state.objects.get(key)
    if old is None:
        return _not_found(state, name)
    rv = meta.get("resourceVersion")
    if rv in (None, "") and state.resource.verbs:  # custom resources refuse blind updates
        return status_response(
            422,
            "Invalid",
            f'{state.kind}.{state.resource.group} "{name}" is invalid: metadata.resourceVersion: '
            "Invalid value: 0x0: must be specified for an update",
            details={**_details(state, name), "kind": state.kind},
        )
    if rv not in (None, "") and rv != old.obj["metadata"]["resourceVersion"]:
        return _conflict(state, name, _MODIFIED)
    uid = meta.get("uid")
    if uid not in (None, "") and uid != old.obj["metadata"].get("uid"):
        return _conflict(
            state,
            name,
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
            f"{old.obj['metadata'].get('uid')}",
        )
    new = unview(store, state, sub, old.obj, body)
    stored, _ = store.replace(state, key, new, dry_run=dry_run)
    return json_response(view(state, sub, stored.obj)) if sub == "scale" else _object(stored)


# ------------------------------------------------------------------------------ PATCH
def apply_patch(content_type: str, current: Any, body: bytes, *, custom: bool) -> Any:
    """Apply a PATCH body of ``content_type`` to ``current`` (for every type but apply).

    Raises:
        BadRequest: the body is not a patch of that type.
        PatchRejected: it does not apply to ``current``.
    """
    patch = _decode(body, "the patch")
    try:
        if content_type == JSON_PATCH:
            return json_patch(current, patch)
        if content_type == MERGE_PATCH:
            if not isinstance(patch, Mapping):
                raise BadRequest("Invalid JSON Patch")
            return merge_patch(current, patch)
        if content_type == STRATEGIC_PATCH and not custom:
            return strategic_merge_patch(current, patch)
    except PatchError as exc:
        raise BadRequest(str(exc)) from None
    except RecursionError:
        raise BadRequest("the patch is nested too deeply") from None
    raise AssertionError(content_type)  # the caller checked the type


def _unsupported(custom: bool) -> web.Response:
    types = (
        [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
        if custom
        else [
            JSON_PATCH,
            MERGE_PATCH,
            STRATEGIC_PATCH,
            APPLY_PATCH,
        ]
    )
    return status_response(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(types),
    )


def _apply_config(
    body: bytes, state: ResourceState, name: str, namespace: str | None
) -> dict[str, Any]:
    try:
        config = yaml.safe_load(body.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"error decoding YAML: {type(exc).__name__}") from None
    if not isinstance(config, dict):
        raise BadRequest("the applied configuration is not an object")
    if not config.get("apiVersion") or not config.get("kind"):
        raise BadRequest("Object 'Kind' is missing in the applied configuration")
    if config.get("kind") != state.kind:
        raise BadRequest(
            f"the kind of the applied configuration ({config['kind']}) is not {state.kind}"
        )
    meta = dict(_meta(config))
    if meta.get("name") not in (None, name):
        raise BadRequest(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
        )
    meta["name"] = name
    if namespace is not None:
        meta["namespace"] = namespace
    return {**config, "metadata": meta}


async def patch_object(
    request: web.BaseRequest,
    store: ObjectStore,
    state: ResourceState,
    namespace: str | None,
    name: str,
    query: Mapping[str, str],
    sub: str | None = None,
) -> web.Response:
    """PATCH of any type; server-side apply creates a missing object (201)."""
    content_type = request.headers.get(hdrs.CONTENT_TYPE, "").split(";")[0].strip().lower()
    res = state.resource
    custom = (res.group, res.plural) in store.crds
    if content_type not in (JSON_PATCH, MERGE_PATCH, APPLY_PATCH) and (
        content_type != STRATEGIC_PATCH or custom
    ):
        return _unsupported(custom)
    body = await read_body(request)
    dry_run = _dry_run(query)
    key = store.key_of(state, namespace, name)
    old = state.objects.get(key)
    if content_type == APPLY_PATCH:
        if not query.get("fieldManager"):
            return status_response(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is '
                "required for apply patch",
                details={
                    "group": "meta.k8s.io",
                    "kind": "PatchOptions",
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: is required for apply patch",
                            "field": "fieldManager",
                        }
                    ],
                },
            )
        config = _apply_config(body, state, name, namespace)
        if old is None:
            if sub is not None:
                return _not_found(state, name)
            try:
                _, stored = store.prepare(state, config)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            if not dry_run:
                stored = store.insert(state, config)
            return web.Response(status=201, body=stored.raw, content_type=JSON)
        current = view(state, sub, old.obj)
        try:
            patched = strategic_merge_patch(current, config)
        except RecursionError:
            raise BadRequest("the patch is nested too deeply") from None
    else:
        if old is None:
            return _not_found(state, name)
        current = view(state, sub, old.obj)
        try:
            patched = apply_patch(content_type, current, body, custom=custom)
        except PatchRejected as exc:
            return status_response(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
                details={"causes": [{"reason": "UnexpectedServerResponse", "message": str(exc)}]},
            )
    rv = _meta(patched).get("resourceVersion")
    if rv not in (None, "") and rv != old.obj["metadata"]["resourceVersion"]:
        return _conflict(state, name, _MODIFIED)
    new = unview(store, state, sub, old.obj, patched)
    stored, _ = store.replace(state, key, new, dry_run=dry_run)
    return json_response(view(state, sub, stored.obj)) if sub == "scale" else _object(stored)


# ------------------------------------------------------------------------------ DELETE
async def _delete_options(request: web.BaseRequest, query: Mapping[str, str]) -> dict[str, Any]:
    body = await read_body(request)
    options: dict[str, Any] = {}
    if body.strip():
        decoded = _decode(body)
        if not isinstance(decoded, Mapping):
            raise BadRequest("the DeleteOptions are not a JSON object")
        options = dict(decoded)
    for key in ("propagationPolicy", "gracePeriodSeconds", "dryRun"):
        if key in query:
            options[key] = query[key]
    policy = options.get("propagationPolicy")
    if policy is not None and policy not in _PROPAGATION:
        raise BadRequest(
            f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
            f'"{policy}": supported values: "Foreground", "Background", "Orphan", "nil"'
        )
    return options


def _deleted(state: ResourceState, stored: Stored) -> web.Response:
    res = state.resource
    if (res.group, res.plural) in RETURNS_DELETED:
        return _object(stored)
    meta = stored.obj["metadata"]
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": _details(state, meta["name"], meta.get("uid")),
    }
    return json_response(body)


async def delete_one(
    request: web.BaseRequest,
    store: ObjectStore,
    state: ResourceState,
    namespace: str | None,
    name: str,
    query: Mapping[str, str],
) -> web.Response:
    """DELETE one object (at once: no finalizers, no grace period); preconditions checked."""
    options = await _delete_options(request, query)
    key = store.key_of(state, namespace, name)
    old = state.objects.get(key)
    if old is None:
        return _not_found(state, name)
    pre = options.get("preconditions")
    if isinstance(pre, Mapping):
        meta = old.obj["metadata"]
        for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            want = pre.get(field)
            if want not in (None, "") and want != meta.get(field):
                return _conflict(
                    state,
                    name,
                    f"Precondition failed: {label} in precondition: {want}, {label} in object "
                    f"meta: {meta.get(field)}",
                )
    dry = options.get("dryRun")
    if dry == "All" or dry == ["All"]:
        return _deleted(state, old)
    (final,) = store.remove(state, [key])
    return _deleted(state, final)


async def delete_collection(
    request: web.BaseRequest,
    store: ObjectStore,
    state: ResourceState,
    selector: Selector,
    query: Mapping[str, str],
) -> web.Response:
    """DELETE of a collection: every object the selectors match; answers their List."""
    await _delete_options(request, query)
    page, _, _ = store.list_at(state, store.rv, selector, None, 0)
    keys = [
        store.key_of(state, s.obj["metadata"].get("namespace"), s.obj["metadata"]["name"])
        for s in page
    ]
    gone = page if _dry_run(query) else store.remove(state, keys)
    body = b"".join(
        (
            b'{"kind":',
            orjson.dumps(state.list_kind),
            b',"apiVersion":',
            orjson.dumps(state.resource.api_version),
            b',"metadata":{},"items":[',
            b",".join(s.raw for s in gone),
            b"]}",
        )
    )
    return web.Response(body=body, content_type=JSON)


async def evict(
    request: web.BaseRequest, store: ObjectStore, state: ResourceState, namespace: str, name: str
) -> web.Response:
    """POST pods/{name}/eviction: the pod is deleted (no PodDisruptionBudgets here)."""
    body = _decode(await read_body(request))
    if not isinstance(body, Mapping) or body.get("kind") not in (None, "Eviction"):
        raise BadRequest("the request body is not an Eviction")
    if _meta(body).get("name") not in (None, name):
        raise BadRequest(
            f"name in URL does not match name in Eviction object: {_meta(body).get('name')}"
        )
    key = store.key_of(state, namespace, name)
    if key not in state.objects:
        return _not_found(state, name)
    store.remove(state, [key])
    doc = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    return json_response(doc, status=201)
