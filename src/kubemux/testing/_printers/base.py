"""The pieces kube-apiserver's printers share: column definitions, time and label text.

``_printers`` and the per-kind printer modules build on these; see ``_printers`` for what the
fake prints.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._wire.ages import CREATED_DOC, human_duration

__all__ = [
    "CREATED_DOC",
    "NAME_DOC",
    "NONE",
    "Cells",
    "Column",
    "Printer",
    "age",
    "age_col",
    "as_list",
    "col",
    "format_labels",
    "human_duration",
    "label_selector",
    "meta_of",
    "name_col",
    "parse_time",
    "since",
    "sub",
]

Column = dict[str, Any]
Cells = list[Any]
NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
NONE = "<none>"


def col(
    name: str, kind: str = "string", *, priority: int = 0, doc: str = "", fmt: str = ""
) -> Column:
    return {"name": name, "type": kind, "format": fmt, "description": doc, "priority": priority}


def name_col() -> Column:
    return col("Name", fmt="name", doc=NAME_DOC)


def age_col() -> Column:
    return col("Age", doc=CREATED_DOC)


# ------------------------------------------------------------------------------ time
def parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def since(value: Any) -> str:
    """``translateTimestampSince``: the age of a timestamp, ``<unknown>`` when unset."""
    stamp = parse_time(value)
    if stamp is None:
        return "<unknown>"
    return human_duration(time.time() - stamp)


def age(obj: Mapping[str, Any]) -> str:
    return since(meta_of(obj).get("creationTimestamp"))


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def sub(obj: Any, *path: str) -> Any:
    for step in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(step)
    return obj


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def format_labels(value: Any) -> str:
    """``labels.FormatLabels``: sorted ``k=v`` pairs, ``<none>`` when empty."""
    if not isinstance(value, Mapping) or not value:
        return NONE
    return ",".join(f"{k}={value[k]}" for k in sorted(value))


# ------------------------------------------------------------------------------ printers
class Printer:
    """The columns of one kind and the function that fills a row's cells."""

    __slots__ = ("cells", "columns")

    def __init__(self, columns: Sequence[Column], cells: Callable[[Mapping[str, Any]], Cells]):
        self.columns = list(columns)
        self.cells = cells


def label_selector(selector: Any) -> str:
    """``metav1.LabelSelectorAsSelector(...).String()`` for matchLabels and matchExpressions."""
    if not isinstance(selector, Mapping):
        return NONE
    parts: list[str] = []
    labels = selector.get("matchLabels")
    if isinstance(labels, Mapping):
        parts.extend(f"{k}={v}" for k, v in labels.items())
    for expr in as_list(selector.get("matchExpressions")):
        if not isinstance(expr, Mapping):
            continue
        key, op, values = expr.get("key", ""), expr.get("operator", ""), as_list(expr.get("values"))
        if op == "In":
            parts.append(f"{key} in ({','.join(sorted(map(str, values)))})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(sorted(map(str, values)))})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    if not parts:
        return "" if labels is not None or selector.get("matchExpressions") is not None else NONE
    return ",".join(sorted(parts))
