"""What the dashboard shows, as plain functions: table rows, events, context states, redaction,
and the object page (its YAML, the objects it links to, a pod's containers).

Everything here is synchronous and free of I/O, so it is tested without a server. The browser
receives these dicts as JSON and builds its DOM with ``textContent`` only: nothing that comes
from a cluster is ever interpreted as HTML.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import yaml

from kubemux import Change, RegistryStatus, Resource, TableColumn

from .._cache.event_index import event_timestamp
from .._redact import redact_text, redact_url
from .._resources import BUILTIN_RESOURCES

__all__ = [
    "LAST_APPLIED",
    "change_payload",
    "column_payload",
    "event_payload",
    "object_links",
    "object_payload",
    "object_yaml",
    "pod_containers",
    "redact",
    "safe_server",
    "status_payload",
    "summarize",
    "table_row",
]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_REDACTED = "(redacted)"


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: object) -> str:
    return "" if value is None else str(value)


def summarize(resource: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """One table row: a few cheap columns, the same for every resource.

    ``status``, ``ready``, ``restarts`` and ``node`` follow ``kubectl get`` where the resource
    has them (pods, workloads, nodes) and are empty otherwise.
    """
    meta = _dict(obj.get("metadata"))
    spec = _dict(obj.get("spec"))
    status = _dict(obj.get("status"))
    kind = _text(obj.get("kind"))
    row: dict[str, Any] = {
        "status": _text(status.get("phase")),
        "ready": "",
        "restarts": None,
        "node": "",
        "created": _text(meta.get("creationTimestamp")),
        "labels": {str(k): _text(v) for k, v in _dict(meta.get("labels")).items()},
    }
    if resource == "pods" or kind == "Pod":
        containers = [_dict(c) for c in _list(status.get("containerStatuses"))]
        total = len(_list(spec.get("containers"))) or len(containers)
        ready = sum(1 for c in containers if c.get("ready") is True)
        reason = _text(status.get("reason")) or _text(status.get("phase"))
        for c in containers:
            state = _dict(c.get("state"))
            waiting = _text(_dict(state.get("waiting")).get("reason"))
            terminated = _text(_dict(state.get("terminated")).get("reason"))
            if waiting or terminated:
                reason = waiting or terminated
        if meta.get("deletionTimestamp"):
            reason = "Terminating"
        row.update(
            status=reason,
            ready=f"{ready}/{total}",
            restarts=sum(int(c.get("restartCount") or 0) for c in containers),
            node=_text(spec.get("nodeName")),
        )
    elif "replicas" in spec or "replicas" in status:
        wanted = spec.get("replicas", status.get("replicas", 0))
        row["ready"] = f"{int(status.get('readyReplicas') or 0)}/{int(wanted or 0)}"
    elif kind == "Node" or resource == "nodes":
        for cond in _list(status.get("conditions")):
            cond = _dict(cond)
            if cond.get("type") == "Ready":
                row["status"] = "Ready" if cond.get("status") == "True" else "NotReady"
    elif kind == "Event" or resource in ("events", "events.events.k8s.io"):
        row["status"] = " ".join(p for p in (_text(obj.get("type")), _text(obj.get("reason"))) if p)
    return row


def table_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One row of a table view (``{"cells", "metadata"}``, see :class:`kubemux.TableStore`)
    as the page shows it: the server's cells, the labels (for the filter) and the
    creation time (the page ages it live).

    Nothing else of the metadata goes to the page: not the annotations, which may hold a
    whole Secret (``kubectl.kubernetes.io/last-applied-configuration``).
    """
    meta = _dict(row.get("metadata"))
    return {
        "cells": _list(row.get("cells")),
        "labels": {str(k): _text(v) for k, v in _dict(meta.get("labels")).items()},
        "created": _text(meta.get("creationTimestamp")),
    }


def column_payload(column: TableColumn) -> dict[str, Any]:
    """A table view's column definition as JSON."""
    return {
        "name": column.name,
        "type": column.type,
        "format": column.format,
        "description": column.description,
        "priority": column.priority,
    }


def change_payload(change: Change) -> dict[str, Any]:
    """A subscription change as the browser's table consumes it.

    ``row`` is :func:`table_row` for a table view's change (``change.view == "table"``),
    :func:`summarize` for an object's.
    """
    out: dict[str, Any] = {"type": change.type, "context": change.context}
    if change.type in ("RESET", "REMOVED"):
        out["resource"] = change.resource
        return out
    out["namespace"] = change.namespace
    out["name"] = change.name
    if change.type != "DELETED":
        obj = change.object or {}
        out["row"] = table_row(obj) if change.view == "table" else summarize(change.resource, obj)
    return out


def redact(resource: Resource | None, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` that is safe to show: a Secret's values are replaced.

    A Secret is an object of the core ``secrets`` resource (:attr:`Resource.is_secret`:
    what was read, whatever kind discovery calls it), or one that says ``kind: Secret``.
    The keys of ``data`` and ``stringData`` stay (as ``kubectl describe`` shows them), and
    the last-applied annotation, which holds the whole Secret, is replaced too.
    """
    out = dict(obj)
    is_secret = (resource is not None and resource.is_secret) or out.get("kind") == "Secret"
    if not is_secret:
        return out
    for field in ("data", "stringData"):
        values = out.get(field)
        if isinstance(values, Mapping):
            out[field] = dict.fromkeys(values, _REDACTED)
    meta = out.get("metadata")
    if isinstance(meta, Mapping):
        meta = dict(meta)
        annotations = meta.get("annotations")
        if isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
            meta["annotations"] = {**annotations, LAST_APPLIED: _REDACTED}
        out["metadata"] = meta
    return out


def event_payload(event: Mapping[str, Any]) -> dict[str, Any]:
    """A Kubernetes Event (``events.k8s.io/v1`` or core ``v1``) in one shape, dated as the
    event index dates it (:func:`kubemux._cache.event_index.event_timestamp`)."""
    when = _text(event_timestamp(event) or "")
    series = _dict(event.get("series"))
    count = series.get("count") or event.get("count") or event.get("deprecatedCount") or 1
    source = _text(event.get("reportingController")) or _text(
        _dict(event.get("source")).get("component")
    )
    return {
        "name": _text(_dict(event.get("metadata")).get("name")),
        "type": _text(event.get("type")),
        "reason": _text(event.get("reason")),
        "message": _text(event.get("note")) or _text(event.get("message")),
        "time": when,
        "count": _count(count),
        "source": source,
    }


def _count(value: object) -> int:
    try:
        return max(1, int(str(value)))
    except ValueError:
        return 1


def safe_server(url: str) -> str:
    """The server URL with any ``user:password@`` part replaced by ``***@``."""
    return redact_url(url)


def _safe(text: str | None) -> str | None:
    return None if text is None else redact_text(text)


def status_payload(
    status: RegistryStatus, watch_errors: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The registry's state as JSON for the contexts panel; never holds a secret.

    :meth:`RegistryStatus.to_json() <kubemux.RegistryStatus.to_json>` (the form ``kubemux
    status -o json`` prints), and for each context what the page derives from it:
    ``current``, ``objects`` (resource -> count, for informers over everything) and
    ``last_sync`` (the latest of its informers). Served by ``GET /api/contexts`` and the
    ``contexts`` stream event. Server URLs and error texts go through
    :mod:`kubemux._redact` whatever the registry already did.

    ``watch_errors`` are per-context failures to start the resource a page looks at (a
    resource the registry does not watch by itself).
    """
    watch_errors = watch_errors or {}
    out = status.to_json()  # the one JSON form, shared with ``kubemux status -o json``
    for ctx, item in zip(status.contexts.values(), out["contexts"], strict=True):
        objects: dict[str, int] = {}
        for i in ctx.informers:
            if i.namespace is None and i.label_selector is None and i.field_selector is None:
                objects[i.resource] = i.objects
        syncs = [i.last_sync for i in ctx.informers if i.last_sync is not None]
        for informer in item["informers"]:
            informer["last_error"] = _safe(informer.get("last_error"))
            informer["last_skip"] = _safe(informer.get("last_skip"))
        item.update(
            server=safe_server(ctx.server),
            last_error=_safe(ctx.last_error or watch_errors.get(ctx.name)),
            # what the page shows, derived: not in the shared form
            current=ctx.name == status.current_context,
            objects=objects,
            last_sync=max(syncs) if syncs else None,
        )
    out["kubeconfig_errors"] = {k: redact_text(v) for k, v in status.kubeconfig_errors.items()}
    out["invalid_contexts"] = {k: redact_text(v) for k, v in status.invalid_contexts.items()}
    return out


# ---------------------------------------------------------------------- the object page
_BY_KIND = {(r.group, r.kind): r for r in BUILTIN_RESOURCES if r.group != "events.k8s.io"}


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Block style as ``kubectl get -o yaml`` prints it: no anchors, long lines kept whole,
    multi-line strings as literal blocks."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


YAML_MAX_BYTES = 256 * 1024
"""Objects larger than this (as JSON) are not rendered as YAML: PyYAML's emitter runs on the
event loop at about 30 ms per MiB, on every change of the object shown."""


def object_yaml(obj: Mapping[str, Any]) -> str:
    """``obj`` as YAML: block style, the keys in the server's order, without
    ``metadata.managedFields`` (bookkeeping nobody reads). Redact a Secret before
    (:func:`redact`): this shows what it is given.

    An object over :data:`YAML_MAX_BYTES` or nested too deeply for the emitter (a custom
    resource may be) gets a one-line note instead, never an exception.
    """
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    try:
        size = len(orjson.dumps(out))
    except (orjson.JSONEncodeError, RecursionError):
        return "# not shown as YAML: the object is nested too deeply\n"
    if size > YAML_MAX_BYTES:
        return f"# not shown as YAML: the object is {size // 1024} KiB as JSON (over 256 KiB)\n"
    try:
        text: str = yaml.dump(
            out,
            Dumper=_Dumper,
            sort_keys=False,
            default_flow_style=False,
            allow_unicode=True,
            width=1 << 30,
        )
    except RecursionError:
        return "# not shown as YAML: the object is nested too deeply\n"
    return text


def _owner_resource(api_version: str, kind: str) -> Resource | None:
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return _BY_KIND.get((group, kind))


def _is_pod(resource: Resource | None, obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Pod" or (resource is not None and resource.kind == "Pod")


def object_links(resource: Resource | None, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The objects ``obj`` points at, for the object page: its owners (``ownerReferences``)
    and a pod's node.

    Each is ``{"rel": "owner" | "node", "kind", "name", "namespace", "resource",
    "controller"}``; ``resource`` (``replicasets.apps``, ``nodes``) is None for a kind the
    dashboard does not know, which the page shows as plain text.
    """
    meta = _dict(obj.get("metadata"))
    namespace = _text(meta.get("namespace"))
    links: list[dict[str, Any]] = []
    for ref in _list(meta.get("ownerReferences")):
        ref = _dict(ref)
        kind, name = _text(ref.get("kind")), _text(ref.get("name"))
        if not name:
            continue
        target = _owner_resource(_text(ref.get("apiVersion")), kind)
        links.append(
            {
                "rel": "owner",
                "kind": kind,
                "name": name,
                "namespace": namespace if target is None or target.namespaced else "",
                "resource": None if target is None else target.name,
                "controller": ref.get("controller") is True,
            }
        )
    node = _text(_dict(obj.get("spec")).get("nodeName")) if _is_pod(resource, obj) else ""
    if node:
        links.append(
            {
                "rel": "node",
                "kind": "Node",
                "name": node,
                "namespace": "",
                "resource": "nodes",
                "controller": False,
            }
        )
    return links


def _container_state(status: Mapping[str, Any]) -> tuple[str, str, str]:
    """(what the table shows, the reason to colour it by, the message)."""
    state = _dict(status.get("state"))
    if "running" in state:
        return "Running", "Running", ""
    if "terminated" in state:
        done = _dict(state.get("terminated"))
        reason = _text(done.get("reason")) or "Terminated"
        shown = f"Terminated: {reason}"
        if done.get("exitCode") is not None:
            shown += f" (exit code {_text(done.get('exitCode'))})"
        return shown, reason, _text(done.get("message"))
    waiting = _dict(state.get("waiting"))
    reason = _text(waiting.get("reason"))
    return (
        (f"Waiting: {reason}" if reason else "Waiting"),
        reason or "Pending",
        _text(waiting.get("message")),
    )


def pod_containers(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A pod's containers as the object page lists them: init containers first.

    Each is ``{"name", "image", "init", "ready", "restarts", "state", "reason",
    "message"}`` from the spec joined with the status by name; ``state`` reads like
    ``Running``, ``Waiting: CrashLoopBackOff`` or ``Terminated: Error (exit code 1)``.
    """
    spec = _dict(obj.get("spec"))
    status = _dict(obj.get("status"))
    rows: list[dict[str, Any]] = []
    for init, specs, statuses in (
        (True, "initContainers", "initContainerStatuses"),
        (False, "containers", "containerStatuses"),
    ):
        by_name = {_text(_dict(c).get("name")): _dict(c) for c in _list(status.get(statuses))}
        for container in _list(spec.get(specs)):
            container = _dict(container)
            name = _text(container.get("name"))
            found = by_name.get(name, {})
            shown, reason, message = _container_state(found)
            rows.append(
                {
                    "name": name,
                    "image": _text(container.get("image")) or _text(found.get("image")),
                    "init": init,
                    "ready": found.get("ready") is True,
                    "restarts": _count0(found.get("restartCount")),
                    "state": shown,
                    "reason": reason,
                    "message": message,
                }
            )
    return rows


def _count0(value: object) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0


def object_payload(resource: Resource | None, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object page's ``object`` event for ``obj``, which is redacted first (:func:`redact`):
    the object, its status as the table shows it (:func:`summarize`), its YAML
    (:func:`object_yaml`), its links (:func:`object_links`) and, for a pod, its containers
    (:func:`pod_containers`)."""
    shown = redact(resource, obj)
    try:
        orjson.dumps(shown)
    except (orjson.JSONEncodeError, RecursionError):  # deeper than orjson writes (255 levels)
        shown = {k: shown[k] for k in ("apiVersion", "kind", "metadata") if k in shown}
        shown["note"] = "the object is nested too deeply to show"
    row = summarize(resource.name if resource is not None else "", shown)
    return {
        "object": shown,
        "status": row["status"],
        "yaml": object_yaml(shown),
        "links": object_links(resource, shown),
        "containers": pod_containers(shown) if _is_pod(resource, shown) else [],
    }
