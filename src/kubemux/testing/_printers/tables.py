"""Server-side printing: the ``meta.k8s.io/v1`` Table a kube-apiserver answers for
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``.

The columns and cells follow kube-apiserver's printers (``pkg/printers/internalversion``)
for the kinds the fake serves most: pods, deployments, services, configmaps, nodes,
namespaces and core events. A custom resource gets its CRD's ``additionalPrinterColumns``
(simple JSON paths); every other kind gets the default convertor's ``Name`` and
``Created At``. The server always fills every column, wide ones (``priority`` 1) included;
kubectl shows those only with ``-o wide``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from .base import (
    CREATED_DOC,
    Cells,
    Column,
    Printer,
    col,
    human_duration,
    meta_of,
    name_col,
    parse_time,
)
from .cluster import CONFIGMAP, EVENT, NAMESPACE, NODE, SERVICE
from .workloads import DEPLOYMENT, POD

__all__ = [
    "Column",
    "Printer",
    "crd_printer",
    "human_duration",
    "printer_for",
    "row_object",
]

_DEFAULT = Printer(
    [name_col(), col("Created At", "date", doc=CREATED_DOC)],
    lambda obj: [meta_of(obj).get("name", ""), meta_of(obj).get("creationTimestamp") or None],
)

_BUILTIN: dict[tuple[str, str], Printer] = {
    ("", "pods"): POD,
    ("apps", "deployments"): DEPLOYMENT,
    ("", "services"): SERVICE,
    ("", "configmaps"): CONFIGMAP,
    ("", "namespaces"): NAMESPACE,
    ("", "nodes"): NODE,
    ("", "events"): EVENT,
}


def printer_for(group: str, plural: str) -> Printer:
    """The built-in printer of a kind, or the default convertor's (``Name``, ``Created At``)."""
    return _BUILTIN.get((group, plural), _DEFAULT)


# ------------------------------------------------------------------------------ CRDs
def _json_path(obj: Any, path: str) -> tuple[bool, Any]:
    """Follow a simple JSONPath (``.spec.size``, ``.status.conditions[0].type``)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    current = obj
    for part in text.lstrip(".").replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("[") and part.endswith("]"):
            try:
                index = int(part[1:-1])
            except ValueError:
                return False, None
            if not isinstance(current, list) or not -len(current) <= index < len(current):
                return False, None
            current = current[index]
        elif isinstance(current, Mapping) and part in current:
            current = current[part]
        else:
            return False, None
    return True, current


def _crd_cell(kind: str, value: Any) -> Any:
    """``cellForJSONValue`` of the CRD table convertor."""
    if kind == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "number":
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind == "date":
        stamp = parse_time(value)
        return "<unknown>" if stamp is None else human_duration(time.time() - stamp)
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return None
    return orjson.dumps(value).decode() if isinstance(value, (dict, list)) else str(value)


DEFAULT_CRD_COLUMNS: list[dict[str, Any]] = [
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
]


def crd_printer(columns: Sequence[Mapping[str, Any]] | None) -> Printer:
    """A CRD version's printer: ``Name`` then its ``additionalPrinterColumns`` (default Age)."""
    specs = list(columns) if columns else DEFAULT_CRD_COLUMNS
    defs = [name_col()] + [
        col(
            str(c.get("name", "")),
            str(c.get("type", "string")),
            priority=int(c.get("priority") or 0),
            doc=str(c.get("description") or ""),
            fmt=str(c.get("format") or ""),
        )
        for c in specs
    ]
    if not columns:
        defs[1]["description"] = CREATED_DOC

    def cells(obj: Mapping[str, Any]) -> Cells:
        out: Cells = [meta_of(obj).get("name", "")]
        for spec in specs:
            found, value = _json_path(obj, str(spec.get("jsonPath", "")))
            out.append(_crd_cell(str(spec.get("type", "string")), value) if found else None)
        return out

    return Printer(defs, cells)


# ------------------------------------------------------------------------------ objects
def row_object(obj: Mapping[str, Any], include: str) -> dict[str, Any] | None:
    """A row's ``object`` for ``includeObject``: PartialObjectMetadata, the object, or None."""
    if include == "None":
        return None
    if include == "Object":
        return dict(obj)
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(meta_of(obj)),
    }
