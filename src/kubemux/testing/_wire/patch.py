"""The patch types of a PATCH request, applied to an object's JSON (sync, no I/O).

* ``application/json-patch+json``: RFC 6902 (add, remove, replace, move, copy, test; JSON
  pointers with ``~0``/``~1``, ``-`` appends), at most 10,000 operations as kube-apiserver;
* ``application/merge-patch+json``: RFC 7386 (objects merge, ``null`` deletes, anything else
  replaces);
* ``application/strategic-merge-patch+json``: the merge patch plus the strategies of the
  built-in kinds' Go types: lists merged by key (``containers``, ``initContainers``,
  ``volumes``, ``imagePullSecrets`` by ``name``; a container's ``env`` by ``name``, ``ports``
  by ``containerPort``, ``volumeMounts`` by ``mountPath``; a Service's ``ports`` by ``port``;
  ``ownerReferences`` by ``uid``; ``status.conditions`` and a Node's ``status.addresses`` by
  ``type``; ``metadata.finalizers`` as a set) and the directives kubectl writes (``$patch``:
  ``replace``/``delete``/``merge``, ``$retainKeys``, ``$setElementOrder/<list>``,
  ``$deleteFromPrimitiveList/<list>``). Simplified: a list is recognised by where it sits
  (``spec.containers`` under any ``spec``, ``env`` under any container list), not by the Go
  type of the object, so the table is one table for every built-in kind; every other list is
  replaced whole, as the API does for lists without a strategy; ``$setElementOrder`` puts the
  named items first, in its order, and keeps the others after them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_JSON_PATCH_OPERATIONS",
    "PatchError",
    "PatchRejected",
    "json_patch",
    "list_merge_key",
    "merge_patch",
    "strategic_merge_patch",
]

MAX_JSON_PATCH_OPERATIONS = 10_000
_DELETE = object()  # a map that ``$patch: delete`` removes
_PRIMITIVE = "$primitive"  # a list of scalars merged as a set
_POD_SPEC_LISTS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "schedulingGates": "name",
}
_CONTAINER_LISTS = {
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
}
_CONTAINERS = frozenset(("containers", "initContainers", "ephemeralContainers"))
_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


class PatchError(ValueError):
    """The patch cannot be read (kube-apiserver answers 400 BadRequest)."""


class PatchRejected(ValueError):
    """The patch does not apply to the object (kube-apiserver answers 422)."""


# ------------------------------------------------------------------------------ RFC 6902
def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise PatchRejected(f"JSON pointer must be empty or start with a '/': {path!r}")
    if not path:
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str], op: str, path: str) -> tuple[Any, str]:
    if not tokens:
        raise PatchRejected(f"{op} operation does not apply: doc is missing path: {path!r}")
    current = doc
    for token in tokens[:-1]:
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            raise PatchRejected(
                f"{op} operation does not apply: doc is missing path: {path!r}: missing value"
            )
    return current, tokens[-1]


def _get(doc: Any, path: str, op: str) -> Any:
    current = doc
    for token in _pointer(path):
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            raise PatchRejected(
                f"{op} operation does not apply: doc is missing path: {path!r}: missing value"
            )
    return current


def _add(doc: Any, path: str, value: Any, op: str = "add") -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, op, path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchRejected(f"{op} operation does not apply: index out of range: {path!r}")
    else:
        raise PatchRejected(f"{op} operation does not apply: doc is missing path: {path!r}")
    return doc


def _remove(doc: Any, path: str, op: str = "remove") -> tuple[Any, Any]:
    tokens = _pointer(path)
    parent, last = _parent(doc, tokens, op, path)
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return doc, parent.pop(int(last))
    raise PatchRejected(
        f"{op} operation does not apply: doc is missing path: {path!r}: missing value"
    )


def json_patch(doc: Any, patch: Any) -> Any:
    """Apply an RFC 6902 patch to a copy of ``doc``.

    Raises:
        PatchError: ``patch`` is not a list of operations.
        PatchRejected: an operation does not apply (a missing path, a failed ``test``).
    """
    if not isinstance(patch, list):
        raise PatchError(
            f"json: cannot unmarshal {type(patch).__name__} into Go value of type jsonpatch.Patch"
        )
    if len(patch) > MAX_JSON_PATCH_OPERATIONS:
        raise PatchError(
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, "
            f"got {len(patch)}"
        )
    out = copy.deepcopy(doc)
    for operation in patch:
        if not isinstance(operation, Mapping):
            raise PatchError("json: cannot unmarshal operation: not an object")
        op = operation.get("op")
        path = operation.get("path", "")
        if op == "add":
            out = _add(out, path, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            out, _ = _remove(out, path)
        elif op == "replace":
            _get(out, path, "replace")
            if _pointer(path):
                out, _ = _remove(out, path, "replace")
            out = _add(out, path, copy.deepcopy(operation.get("value")), "replace")
        elif op in ("move", "copy"):
            source = operation.get("from", "")
            if op == "move":
                out, value = _remove(out, source, "move")
            else:
                value = copy.deepcopy(_get(out, source, "copy"))
            out = _add(out, path, value, op)
        elif op == "test":
            if _get(out, path, "test") != operation.get("value"):
                raise PatchRejected(f"testing value {path} failed: test failed")
        else:
            raise PatchRejected(f"Unexpected kind: {op}")
    return out


# ------------------------------------------------------------------------------ RFC 7386
def merge_patch(doc: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch: objects merge, ``null`` deletes, the rest replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(doc) if isinstance(doc, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# ------------------------------------------------------------------------------ strategic
def list_merge_key(path: tuple[str, ...]) -> str | None:
    """The merge key of the list at ``path`` (map keys from the root), None: replace it.

    ``"$primitive"`` means a list of scalars merged as a set (``metadata.finalizers``).
    """
    if len(path) < 2:
        return None
    field, parent = path[-1], path[-2]
    if parent == "metadata":
        return {"finalizers": _PRIMITIVE, "ownerReferences": "uid"}.get(field)
    if parent == "spec":
        if field in _POD_SPEC_LISTS:
            return _POD_SPEC_LISTS[field]
        return "port" if field == "ports" else None  # a Service's ports
    if parent in _CONTAINERS:
        return _CONTAINER_LISTS.get(field)
    if parent == "status" and field in ("conditions", "addresses"):
        return "type"
    return None


def strategic_merge_patch(doc: Any, patch: Any) -> Any:
    """Apply a strategic merge patch to a copy of ``doc`` (see the module docstring).

    Raises:
        PatchError: the patch is not a JSON object.
    """
    if not isinstance(patch, Mapping):
        raise PatchError("the strategic merge patch is not a JSON object")
    out = _merge_map(doc if isinstance(doc, Mapping) else {}, patch, ())
    return {} if out is _DELETE else out


def _merge_map(doc: Mapping[str, Any], patch: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return _clean(patch, path)
    out = copy.deepcopy(dict(doc))
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            out.pop(key, None)
            continue
        sub = (*path, key)
        if isinstance(value, Mapping):
            current = out.get(key)
            merged = _merge_map(current if isinstance(current, Mapping) else {}, value, sub)
            if merged is _DELETE:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, list):
            out[key] = _merge_list(out.get(key), value, sub)
        else:
            out[key] = copy.deepcopy(value)
    for key, value in patch.items():
        if key.startswith(_DELETE_PRIMITIVE) and isinstance(
            out.get(key[len(_DELETE_PRIMITIVE) :]), list
        ):
            field = key[len(_DELETE_PRIMITIVE) :]
            gone = value if isinstance(value, list) else []
            out[field] = [item for item in out[field] if item not in gone]
        elif key.startswith(_ORDER) and isinstance(value, list):
            field = key[len(_ORDER) :]
            if isinstance(out.get(field), list):
                out[field] = _ordered(out[field], value, list_merge_key((*path, field)))
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(current: Any, patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    key = list_merge_key(path)
    items = list(current) if isinstance(current, list) else []
    if key is None:
        return [_clean(item, path) for item in patch]
    if key == _PRIMITIVE:
        return items + [
            item for item in patch if item not in items and not isinstance(item, Mapping)
        ]
    if any(isinstance(item, Mapping) and item.get("$patch") == "replace" for item in patch):
        return [
            _clean(item, path)
            for item in patch
            if not (isinstance(item, Mapping) and item.get("$patch") == "replace")
        ]
    for item in patch:
        if not isinstance(item, Mapping):
            continue
        found = next(
            (
                i
                for i, old in enumerate(items)
                if isinstance(old, Mapping) and old.get(key) == item.get(key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if found is not None:
                del items[found]
            continue
        if found is None:
            items.append(_clean(item, path))
        else:
            items[found] = _merge_map(items[found], item, path)
    return items


def _ordered(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def ident(item: Any) -> Any:
        return (
            item.get(key) if key not in (None, _PRIMITIVE) and isinstance(item, Mapping) else item
        )

    wanted = [ident(o) for o in order]
    first: list[Any] = []
    for value in wanted:
        first.extend(item for item in items if ident(item) == value and item not in first)
    return first + [item for item in items if item not in first]


def _clean(value: Any, path: tuple[str, ...]) -> Any:
    """``value`` without patch directives (a new list item, a ``$patch: replace`` map)."""
    if isinstance(value, Mapping):
        out = _merge_map({}, {k: v for k, v in value.items() if k != "$patch"}, path)
        return {} if out is _DELETE else out
    if isinstance(value, list):
        return [_clean(item, path) for item in value]
    return copy.deepcopy(value)
