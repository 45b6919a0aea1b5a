"""Pieces of the kube-apiserver wire protocol: Status bodies, selectors, continue tokens.

Everything here is sync and free of I/O, so the HTTP layer stays small and these rules can be
tested on their own.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import orjson

from ..._cache.snapshot import Key

__all__ = [
    "BadRequest",
    "Selector",
    "decode_continue",
    "encode_continue",
    "field_value",
    "parse_field_selector",
    "parse_label_selector",
    "status_body",
]


class BadRequest(ValueError):
    """A request parameter cannot be parsed: the server answers 400 BadRequest."""


def status_body(
    code: int,
    reason: str,
    message: str,
    *,
    details: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``meta/v1`` Status object, as the API server sends with every error."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": dict(metadata or {}),
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = dict(details)
    body["code"] = code
    return body


# ------------------------------------------------------------------------------- selectors
_LABEL_KEY = re.compile(
    r"^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_SET_REQ = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")


@dataclasses.dataclass(frozen=True, slots=True)
class _LabelReq:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", ">", "<"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        # ">" / "<": integer comparison, the label must exist and be an integer
        try:
            number = int(value) if value is not None else None
        except ValueError:
            return False
        if number is None:
            return False
        bound = int(next(iter(self.values)))
        return number > bound if self.op == ">" else number < bound


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _check_key(key: str, requirement: str) -> str:
    if not _LABEL_KEY.match(key):
        raise BadRequest(
            f"unable to parse requirement: <nil>: Invalid value: {key!r}: name part must "
            "consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            f"with an alphanumeric character (in {requirement!r})"
        )
    return key


def _check_value(value: str, requirement: str) -> str:
    if not _LABEL_VALUE.match(value):
        raise BadRequest(
            f"unable to parse requirement: <nil>: Invalid value: {value!r}: a valid label "
            "must be an empty string or consist of alphanumeric characters, '-', '_' or "
            f"'.' (in {requirement!r})"
        )
    return value


def parse_label_selector(text: str) -> tuple[_LabelReq, ...]:
    """Parse a ``labelSelector`` query parameter.

    Supports ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``,
    ``k>N``, ``k<N``; a comma means AND.

    Raises:
        BadRequest: the selector is malformed.
    """
    reqs: list[_LabelReq] = []
    if not text.strip():
        return ()
    for raw in _split_top_level(text):
        part = raw.strip()
        if not part:
            raise BadRequest(f"unable to parse requirement: found '', in {text!r}")
        if part.startswith("!"):
            reqs.append(_LabelReq(_check_key(part[1:].strip(), part), "!"))
            continue
        match = _SET_REQ.match(part)
        if match:
            values = [v.strip() for v in match.group(3).split(",")]
            for value in values:
                _check_value(value, part)
            key = _check_key(match.group(1), part)
            reqs.append(_LabelReq(key, match.group(2), frozenset(values)))
            continue
        for op, token in (("!=", "!="), ("=", "=="), ("=", "="), (">", ">"), ("<", "<")):
            if token in part:
                key, _, value = part.partition(token)
                key, value = key.strip(), value.strip()
                _check_key(key, part)
                if op in (">", "<"):
                    if not value.lstrip("-").isdigit():
                        raise BadRequest(
                            f"unable to parse requirement: for 'Gt', 'Lt' operators, the "
                            f"value must be an integer (in {part!r})"
                        )
                else:
                    _check_value(value, part)
                reqs.append(_LabelReq(key, op, frozenset((value,))))
                break
        else:
            reqs.append(_LabelReq(_check_key(part, part), "exists"))
    return tuple(reqs)


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldReq:
    path: tuple[str, ...]
    value: str
    negate: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negate


def field_value(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    """The string form of a dotted field as field selectors compare it (missing is ``""``)."""
    current: Any = obj
    for step in path:
        if not isinstance(current, Mapping):
            return ""
        current = current.get(step)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def parse_field_selector(text: str) -> tuple[_FieldReq, ...]:
    """Parse a ``fieldSelector``: ``a.b=v``, ``a.b==v``, ``a.b!=v``; a comma means AND.

    Any dotted path is accepted (the real server only allows a per-type list of fields).

    Raises:
        BadRequest: the selector is malformed.
    """
    reqs: list[_FieldReq] = []
    if not text.strip():
        return ()
    for raw in text.split(","):
        part = raw.strip()
        for token, negate in (("!=", True), ("==", False), ("=", False)):
            if token in part:
                field, _, value = part.partition(token)
                field = field.strip()
                if not field or any(not s for s in field.split(".")):
                    raise BadRequest(f"invalid selector: {text!r}; can't understand {part!r}")
                reqs.append(_FieldReq(tuple(field.split(".")), value.strip(), negate))
                break
        else:
            raise BadRequest(f"invalid selector: {text!r}; can't understand {part!r}")
    return tuple(reqs)


@dataclasses.dataclass(frozen=True, slots=True)
class Selector:
    """What a LIST or WATCH asks for: a namespace, label and field requirements."""

    namespace: str | None = None
    labels: tuple[_LabelReq, ...] = ()
    fields: tuple[_FieldReq, ...] = ()

    @property
    def is_everything(self) -> bool:
        """True when every object of the resource matches."""
        return self.namespace is None and not self.labels and not self.fields

    @property
    def filters_content(self) -> bool:
        """True when matching depends on more than the object's namespace."""
        return bool(self.labels or self.fields)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is selected (the namespace is checked only through its metadata)."""
        meta = obj.get("metadata") or {}
        if self.namespace is not None and (meta.get("namespace") or "") != self.namespace:
            return False
        if self.labels:
            labels = meta.get("labels") or {}
            if not all(req.matches(labels) for req in self.labels):
                return False
        return all(req.matches(obj) for req in self.fields)

    @classmethod
    def parse(cls, namespace: str | None, label_selector: str, field_selector: str) -> Selector:
        """Build a selector from the request's namespace and selector query parameters.

        Raises:
            BadRequest: a selector is malformed.
        """
        return cls(
            namespace=namespace,
            labels=parse_label_selector(label_selector),
            fields=parse_field_selector(field_selector),
        )


# ------------------------------------------------------------------------- continue tokens
def encode_continue(rv: int, last: Key) -> str:
    """An opaque continue token, shaped like the real one: base64 JSON of RV and start key."""
    start = f"{last[0]}/{last[1]}\x00"
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_continue(token: str) -> tuple[int, Key]:
    """Return ``(snapshot_rv, last_key)`` from a token; ``snapshot_rv`` is -1 for "latest".

    Raises:
        BadRequest: the token is not one this server issued.
    """
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
        rv = int(data["rv"])
        start = str(data["start"])
        if data.get("v") != "meta.k8s.io/v1" or not start.endswith("\x00") or "/" not in start:
            raise ValueError(start)
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise BadRequest(f"continue key is not valid: {exc}") from exc
    namespace, _, name = start[:-1].partition("/")
    return rv, (namespace, name)
