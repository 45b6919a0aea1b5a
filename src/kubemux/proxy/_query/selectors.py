"""Selectors: what a LIST or WATCH selects, evaluated as kube-apiserver evaluates it.

``labelSelector`` is parsed in :mod:`.labels` (every operator, the API server's
parse errors), ``fieldSelector`` in :mod:`.fields` (per-kind fields and refusals).
:class:`ObjectFilter` puts a namespace and both selectors together and evaluates them on an
object's cached JSON bytes: only the metadata is decoded unless a field selector reads more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..._wire.codec import decode_raw
from .fields import (
    BUILTIN_GROUPS,
    FieldRequirement,
    FieldSelector,
    FieldTerms,
    convert_field_terms,
    parse_field_selector,
    parse_field_terms,
)
from .labels import (
    EVERYTHING,
    MAX_REQUIREMENTS,
    MAX_SELECTOR_LENGTH,
    LabelRequirement,
    LabelSelector,
    parse_label_selector,
)

__all__ = [
    "BUILTIN_GROUPS",
    "EVERYTHING",
    "MAX_REQUIREMENTS",
    "MAX_SELECTOR_LENGTH",
    "FieldRequirement",
    "FieldSelector",
    "FieldTerms",
    "LabelRequirement",
    "LabelSelector",
    "ObjectFilter",
    "convert_field_terms",
    "parse_field_selector",
    "parse_field_terms",
    "parse_label_selector",
]


# ---------------------------------------------------------------------------- on raw bytes
class _Meta(msgspec.Struct, gc=False):
    name: str = ""
    namespace: str = ""
    labels: dict[str, str] | None = None


class _Head(msgspec.Struct, gc=False):
    metadata: _Meta | None = None


_head_decoder = msgspec.json.Decoder(_Head)
_EMPTY_META = _Meta()
_NO_LABELS: dict[str, str] = {}


class ObjectFilter:
    """What a LIST or WATCH selects: a namespace, a label and a field selector, evaluated on
    an object's cached JSON bytes (only its metadata is decoded unless a field selector
    reads more). Works on Table rows too (``{"cells": ..., "metadata": ...}``) as long as
    the field selector reads only metadata."""

    __slots__ = ("_fields", "_fields_need_object", "_labels", "fields", "labels", "namespace")

    def __init__(
        self,
        namespace: str | None = None,
        labels: LabelSelector = EVERYTHING,
        fields: FieldSelector | None = None,
    ):
        self.namespace = namespace or None
        self.labels = labels
        self.fields = fields if fields is not None else FieldSelector()
        self._fields_need_object = self.fields.needs_object
        # the hot path reads these: None when there is nothing to check
        self._labels = None if labels.empty else labels.matches
        self._fields = None if self.fields.empty else self.fields.matches_meta

    @property
    def is_everything(self) -> bool:
        """True when every object of the resource is selected."""
        return self.namespace is None and self.labels.empty and self.fields.empty

    @property
    def filters_content(self) -> bool:
        """True when a label or field selector is set (the API server then leaves
        ``remainingItemCount`` out)."""
        return not (self.labels.empty and self.fields.empty)

    @property
    def key(self) -> tuple[str | None, str, str]:
        """Equal for filters that select the same objects (views are shared by key)."""
        return (self.namespace, str(self.labels), str(self.fields))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether the decoded object is selected."""
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            meta = {}
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        if not self.labels.empty:
            labels = meta.get("labels")
            if not self.labels.matches(labels if isinstance(labels, Mapping) else {}):
                return False
        return self.fields.empty or self.fields.matches(obj)

    def matches_raw(self, raw: bytes) -> bool:
        """:meth:`matches` on JSON bytes."""
        if self._fields_need_object:
            return self.matches(self.fields.project(raw))
        namespace = self.namespace
        labels = self._labels
        fields = self._fields
        if labels is None and fields is None and namespace is None:
            return True
        try:
            meta = _head_decoder.decode(raw).metadata or _EMPTY_META
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return self.matches(decode_raw(raw))
        if namespace is not None and meta.namespace != namespace:
            return False
        if labels is not None and not labels(meta.labels or _NO_LABELS):
            return False
        return fields is None or fields(meta.namespace, meta.name)

    def __repr__(self) -> str:
        return (
            f"<ObjectFilter namespace={self.namespace!r} labels={str(self.labels)!r} "
            f"fields={str(self.fields)!r}>"
        )
