"""``/openapi/v3``: a minimal OpenAPI v3 document per group version, for kubectl.

kubectl 1.32 fetches ``/openapi/v3`` before ``create``, ``replace`` and ``apply`` (its
``--validate=strict`` default): when the group version's document lists the ``fieldValidation``
parameter on the kind's PATCH operation, kubectl leaves validation to the server (it sends
``fieldValidation=Strict``) and needs no schema; when ``/openapi/v3`` and ``/openapi/v2`` are
404 it refuses to send anything ("failed to download openapi"). So the fake serves, for every
served group version, the paths of its resources with the write operations and their query
parameters, and no schemas (``components.schemas`` is empty: ``kubectl explain`` finds
nothing). ``/openapi/v2`` stays 404, as on a server that only serves v3.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from aiohttp import web

from ..._resources import Resource
from .._state.state import ObjectStore
from .._wire.responses import JSON, not_found

__all__ = ["openapi"]

_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")


def _group_versions(store: ObjectStore) -> dict[str, list[Resource]]:
    """``api/v1`` / ``apis/{group}/{version}`` -> the resources served there."""
    out: dict[str, list[Resource]] = {}
    for res in store.resources():
        for version in store.served_versions(res):
            prefix = f"apis/{res.group}/{version}" if res.group else f"api/{version}"
            out.setdefault(prefix, []).append(res)
    return out


def _operation(res: Resource, version: str, kind: str, verb: str) -> dict[str, Any]:
    return {
        "operationId": f"{verb}{kind}",
        "x-kubernetes-action": verb,
        "x-kubernetes-group-version-kind": {"group": res.group, "version": version, "kind": kind},
        "parameters": [
            {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for name in _PARAMETERS
        ],
        "responses": {"200": {"description": "OK"}},
    }


def _document(store: ObjectStore, prefix: str, resources: list[Resource]) -> dict[str, Any]:
    version = prefix.rsplit("/", 1)[1]
    paths: dict[str, Any] = {}
    for res in resources:
        kind = store.state(res).kind
        base = (
            f"/{prefix}/namespaces/{{namespace}}/{res.plural}"
            if res.namespaced
            else (f"/{prefix}/{res.plural}")
        )
        paths[base] = {"post": _operation(res, version, kind, "post")}
        paths[f"{base}/{{name}}"] = {
            verb: _operation(res, version, kind, verb) for verb in ("put", "patch")
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def openapi(store: ObjectStore, parts: list[str]) -> web.Response:
    """``/openapi/v3`` (the index) and ``/openapi/v3/{group version}``; everything else 404."""
    if not parts or parts[0] != "v3":
        return not_found()
    served = _group_versions(store)
    if len(parts) == 1:
        index = {}
        for prefix, resources in served.items():
            digest = hashlib.sha512(orjson.dumps(_document(store, prefix, resources))).hexdigest()
            index[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={digest.upper()}"}
        return web.Response(body=orjson.dumps({"paths": index}), content_type=JSON)
    prefix = "/".join(parts[1:])
    if prefix not in served:
        return not_found()
    body = orjson.dumps(_document(store, prefix, served[prefix]))
    return web.Response(body=body, content_type=JSON)
