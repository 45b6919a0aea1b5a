"""The JSON API's route handlers (see :mod:`.app` for the endpoints) and the page."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import anyio
import orjson
from starlette.requests import Request
from starlette.responses import FileResponse, Response

from kubemux import (
    Forbidden,
    KubemuxError,
    Resource,
    TableStore,
    UnknownResource,
    parse_resource,
)

from .._redact import redact_text
from .._wire.codec import decode_raw
from ._answers import Answers, Gathered
from ._responses import Problem, json_response
from ._state import Dashboard, dashboard_of
from ._viewer import Denied, Viewer, viewer_of
from .views import event_payload, redact, status_payload

STATIC = Path(__file__).resolve().parent / "static"
RESOURCES_TTL = 30.0  # seconds a context's discovery (or failed namespaces) answer is kept
NAMESPACES = parse_resource("namespaces")


def _param(request: Request, name: str) -> str:
    """A path parameter of the JSON API, decoded (see :func:`.app._decode_keeping_slashes`)."""
    return urllib.parse.unquote(request.path_params[name])


async def problem_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return exc.response()


def _resource(name: str) -> Resource:
    try:
        return parse_resource(name)
    except ValueError as exc:
        raise Problem(400, str(exc)) from exc


def _namespace(segment: str) -> str:
    return "" if segment in ("_", "-") else segment


async def page(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


async def api_not_found(request: Request) -> Response:
    raise Problem(404, f"no such API endpoint: {request.url.path}")


async def api_contexts(request: Request) -> Response:
    dashboard = dashboard_of(request)
    viewer = viewer_of(request)
    if viewer is not None:
        return json_response(_contexts_as(viewer, dashboard))
    raw = dashboard.contexts_json(dashboard.registry.status_version)
    return Response(raw, media_type="application/json")


def _contexts_as(viewer: Viewer, dashboard: Dashboard) -> dict[str, Any]:
    """The registry's state as a user may see it: each context, the informers (and their
    counts) of what the user may list cluster-wide, the user's error where refused."""
    out = status_payload(dashboard.registry.status())
    session = viewer.session
    for item in out["contexts"]:
        name = item["name"]
        item["informers"] = [
            i
            for i in item["informers"]
            if i.get("namespace") is None and viewer.may_see_counts(name, i["resource"])
        ]
        item["objects"] = {
            r: n for r, n in item["objects"].items() if viewer.may_see_counts(name, r)
        }
        if name not in session.users and name in session.refused:
            item["last_error"] = item["last_error"] or session.refused[name]
    return out


async def _scope(
    viewer: Viewer, context: str, resource: Resource, namespace: str | None
) -> frozenset[str] | None:
    """The user's scope of a list, or the API server's denial as a Problem."""
    scope = await viewer.scope(context, resource, namespace)
    if isinstance(scope, Denied):
        raise Problem(scope.status, scope.message, retry_after=1 if scope.status == 503 else None)
    return scope


async def api_list(request: Request) -> Response:
    dashboard = dashboard_of(request)
    context = _param(request, "context")
    resource = _resource(_param(request, "resource"))
    namespace = request.query_params.get("namespace") or None
    viewer = viewer_of(request)
    scope = None if viewer is None else await _scope(viewer, context, resource, namespace)
    store = await dashboard.ready_store(context, resource)
    if scope is None:
        raws = store.list_raw(namespace if resource.namespaced else None)
    else:  # steve's partition: the namespaces the user may list
        raws = [raw for ns in sorted(scope) for raw in store.list_raw(ns)]
    if resource.is_secret:  # what is read decides, not the kind discovery declares
        raws = [orjson.dumps(redact(resource, decode_raw(raw))) for raw in raws]
    head = orjson.dumps(
        {
            "context": context,
            "resource": resource.name,
            "namespace": namespace,
            "resourceVersion": store.resource_version,
        }
    )
    body = head[:-1] + b',"items":[' + b",".join(raws) + b"]}"  # no decode, no re-encode
    return Response(body, media_type="application/json")


async def api_resources(request: Request) -> Response:
    dashboard = dashboard_of(request)
    context = _param(request, "context")
    with anyio.move_on_after(dashboard.sync_timeout):
        try:
            served = await dashboard.registry.resources(context)
        except KubemuxError as exc:
            raise dashboard.problem(exc, context) from exc
        resources = [
            {
                "name": r.name,
                "kind": r.kind,
                "namespaced": r.namespaced,
                "short_names": list(r.short_names),
            }
            for r in served
        ]
        return json_response({"context": context, "resources": resources})
    raise Problem(503, f"discovery of context {context!r} is not done yet", retry_after=1)


async def api_table(request: Request) -> Response:
    dashboard = dashboard_of(request)
    context = _param(request, "context")
    name = _param(request, "resource")  # as typed: discovery resolves it, as kubectl does
    namespace = request.query_params.get("namespace") or None
    with anyio.move_on_after(dashboard.sync_timeout):
        try:
            table = await dashboard.registry.table(context, name, namespace)
        except UnknownResource as exc:
            problem = dashboard.problem(exc, context)
            body = {"error": problem.message, "status": 404, "suggestions": list(exc.suggestions)}
            return json_response(body, status=404)
        except KubemuxError as exc:
            raise dashboard.problem(exc, context) from exc
        except ValueError as exc:
            raise Problem(400, str(exc)) from exc
        columns = [
            {
                "name": c.name,
                "type": c.type,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            }
            for c in table.columns
        ]
        viewer = viewer_of(request)
        scope = None
        if viewer is not None:
            scope = await _scope(viewer, context, table.resource, namespace)
        rows = [
            {"namespace": r.namespace, "name": r.name, "cells": list(r.cells)}
            for r in table.rows(namespace)
            if scope is None or r.namespace in scope
        ]
        return json_response(
            {
                "context": context,
                "resource": table.resource.name,
                "namespace": namespace,
                "columns": columns,
                "rows": rows,
            }
        )
    raise Problem(503, f"{name} in context {context!r} is not synced yet", retry_after=1)


async def api_object(request: Request) -> Response:
    dashboard = dashboard_of(request)
    context = _param(request, "context")
    resource = _resource(_param(request, "resource"))
    namespace = _namespace(_param(request, "namespace"))
    name = _param(request, "name")
    viewer = viewer_of(request)
    if viewer is not None:  # authorization before routing: a 403 says nothing of existence
        await viewer.check(context, "get", resource, namespace=namespace or None, name=name)
    store = await dashboard.ready_store(context, resource)
    obj = store.get(namespace if resource.namespaced else "", name)
    if obj is None:
        where = f"{namespace}/{name}" if namespace else name
        raise Problem(404, f"{resource.name} {where} not found in context {context!r}")
    return json_response(redact(resource, obj))


async def api_events(request: Request) -> Response:
    dashboard = dashboard_of(request)
    registry = dashboard.registry
    context = _param(request, "context")
    kind = _param(request, "kind")
    if kind[:1].islower():  # "pods" -> "Pod"
        kind = _resource(kind).kind or kind
    namespace = _namespace(_param(request, "namespace"))
    name = _param(request, "name")
    viewer = viewer_of(request)
    if viewer is not None:
        await viewer.check(context, "list", "events", namespace=namespace or None)
    with anyio.move_on_after(dashboard.sync_timeout):
        try:
            events = await registry.events_for(context, kind, namespace or None, name)
        except KubemuxError as exc:
            raise dashboard.problem(exc, context) from exc
        return json_response(
            {
                "context": context,
                "kind": kind,
                "namespace": namespace,
                "name": name,
                "events": [event_payload(e) for e in events],
            }
        )
    raise Problem(503, f"the events of context {context!r} are not synced yet", retry_after=1)


def _kept(dashboard: Dashboard, question: str) -> Answers[Any]:
    """The kept answers of every context to one of the pickers' questions."""
    answers: Answers[Any] | None = dashboard.answers.get(question)
    if answers is not None:
        return answers
    registry = dashboard.registry
    if question == "resources":
        answers = Answers(registry.resources, ttl=RESOURCES_TTL)
    else:

        def peek(context: str) -> tuple[list[str], str | None] | None:
            store = registry.store(context, NAMESPACES, view="table")
            if not isinstance(store, TableStore):
                return None
            return [row.name for row in store.rows()], None

        async def ask(context: str) -> tuple[list[str], str | None]:
            try:
                table = await registry.table(context, NAMESPACES)
            except Forbidden as exc:  # the context's own namespace stands in
                cfg = registry.contexts.get(context)
                own = (cfg.namespace if cfg is not None else None) or "default"
                return [own], redact_text(str(exc))
            return [row.name for row in table.rows()], None

        answers = Answers(ask, ttl=RESOURCES_TTL, peek=peek)
    dashboard.answers[question] = answers
    return answers


async def gather_answers(dashboard: Dashboard, question: str) -> Gathered[Any]:
    """Every context's kept answer to ``question`` (``resources``, ``namespaces``)."""
    contexts = list(dashboard.registry.contexts)
    return await _kept(dashboard, question).gather(contexts, dashboard.hub, dashboard.sync_timeout)


async def api_all_resources(request: Request) -> Response:
    """What the contexts serve (discovery), merged: each resource once, with the contexts
    serving it; in the first context's (kubectl's priority) order, then the others'.
    Answered from what each context said last (:mod:`._answers`): ``pending`` names the
    contexts that have not answered yet."""
    dashboard = dashboard_of(request)
    found = await gather_answers(dashboard, "resources")
    merged: dict[str, dict[str, Any]] = {}
    for context in found.contexts:
        for r in found.answers.get(context, ()):
            item = merged.get(r.name)
            if item is None:
                item = merged[r.name] = {
                    "name": r.name,
                    "kind": r.kind,
                    "namespaced": r.namespaced,
                    "short_names": list(r.short_names),
                    "contexts": [],
                }
            item["contexts"].append(context)
    body = {"resources": list(merged.values()), "errors": found.errors, "pending": found.pending}
    return json_response(body)


async def api_namespaces(request: Request) -> Response:
    """The namespaces of every context's cluster (a live table view of ``namespaces`` in
    each, read where it runs, started in the background where not), merged by name with
    the contexts that have them. Where the user may not list namespaces, the context's own
    namespace from the kubeconfig stands in (and the error is in ``errors``); ``pending``
    names the contexts that have not answered yet."""
    dashboard = dashboard_of(request)
    viewer = viewer_of(request)
    found = await gather_answers(dashboard, "namespaces")
    errors = dict(found.errors)
    merged: dict[str, list[str]] = {}
    for context in found.contexts:
        answer = found.answers.get(context)
        if answer is None:
            continue
        names, error = answer
        if viewer is not None:
            names, error = await _namespaces_as(viewer, dashboard, context, names, error)
        if error is not None:
            errors[context] = error
        for name in names:
            merged.setdefault(name, []).append(context)
    namespaces = [{"name": n, "contexts": merged[n]} for n in sorted(merged)]
    return json_response({"namespaces": namespaces, "errors": errors, "pending": found.pending})


async def _namespaces_as(
    viewer: Viewer, dashboard: Dashboard, context: str, names: list[str], error: str | None
) -> tuple[list[str], str | None]:
    """A context's namespaces as a user may see them: all if they may list namespaces
    there, else those where they may list the dashboard's resource."""
    if await viewer.scope(context, NAMESPACES, None) is None:
        return names, error
    scope = await viewer.scope(context, dashboard.resource, None)
    if isinstance(scope, Denied):
        return [], scope.message
    return (names if scope is None else sorted(scope)), None
