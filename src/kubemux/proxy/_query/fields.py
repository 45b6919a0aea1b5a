"""``fieldSelector`` as kube-apiserver parses, converts and evaluates it.

The parser is ``k8s.io/apimachinery/pkg/fields`` (``=``, ``==``, ``!=``, backslash escapes
in values). The API server then converts each label for the kind (``ConvertFieldLabel``):
each kind accepts its own fields and refuses others in its own words (``field label not
supported: spec.foo`` for pods, ``"spec.foo" is not a known field selector: only
"metadata.name", "metadata.namespace"`` for kinds without selectable fields, ``field label
"x" not supported for Job``; a custom resource accepts ``metadata.name``,
``metadata.namespace`` when namespaced, and its CRD's ``selectableFields``). Values are read
from an object as the kind's ``ToSelectableFields`` reads them (a field the conversion
accepts but the kind does not expose, like pods' ``status.podIPs``, reads as ``""``).

Which fields each kind accepts, and how they are read: :mod:`.field_kinds`. Bounded like
label selectors (:data:`MAX_SELECTOR_LENGTH`, :data:`MAX_REQUIREMENTS`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from ..._resources import Resource
from ..._wire.codec import decode_raw
from .._api.statuses import bad_request
from .field_kinds import BUILTIN_GROUPS, META_FIELDS, Getter, Path, kind_rules
from .labels import (
    MAX_REQUIREMENTS,
    ParseError,
    TooMany,
    too_long,
    too_many,
)

__all__ = [
    "BUILTIN_GROUPS",
    "FieldRequirement",
    "FieldSelector",
    "FieldTerms",
    "convert_field_terms",
    "parse_field_selector",
    "parse_field_terms",
]


# -------------------------------------------------------------------------- field selectors
@dataclasses.dataclass(frozen=True, slots=True)
class FieldRequirement:
    """``field=value`` or ``field!=value``; ``field`` is the label after the kind's
    conversion (``spec.host`` becomes ``spec.nodeName``)."""

    field: str
    operator: str  # "=" or "!="
    value: str

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
        return f"{self.field}{self.operator}{escaped}"


class FieldSelector:
    """A parsed, converted ``fieldSelector`` for one resource: requirements ANDed."""

    __slots__ = ("_checks", "_decoder", "paths", "requirements")

    requirements: tuple[FieldRequirement, ...]
    paths: frozenset[Path]
    """The object paths matching reads (metadata name and namespace not included)."""

    def __init__(
        self,
        requirements: Iterable[FieldRequirement] = (),
        values: Mapping[str, Getter] | None = None,
    ):
        self.requirements = tuple(requirements)
        getters = values or META_FIELDS
        checks: list[tuple[Getter, str, bool]] = []
        paths: set[Path] = set()
        for req in self.requirements:
            getter = getters.get(req.field, _ALWAYS_EMPTY)
            checks.append((getter, req.value, req.operator == "!="))
            paths.update(getter.paths)
        self._checks = tuple(checks)
        self.paths = frozenset(paths - {("metadata", "name"), ("metadata", "namespace")})
        self._decoder: msgspec.json.Decoder[Any] | None = None

    def project(self, raw: bytes) -> dict[str, Any]:
        """The parts of the object ``raw`` that matching (and a label selector, and a
        namespace) read, as a dict: decoded by msgspec, which skips the rest at C speed
        (a pod's ``spec.nodeName`` costs a fraction of decoding the pod)."""
        if self._decoder is None:
            self._decoder = _projection_decoder(self.paths)
        try:
            value: dict[str, Any] = msgspec.to_builtins(self._decoder.decode(raw))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return decode_raw(raw)  # not the shape the kind has: read it all
        return value

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything."""
        return not self.requirements

    @property
    def needs_object(self) -> bool:
        """True when matching reads more than ``metadata.name``/``metadata.namespace`` (see
        :meth:`matches_meta` for the fast path)."""
        return any(r.field not in META_FIELDS for r in self.requirements)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether the decoded object ``obj`` is selected."""
        for getter, value, negate in self._checks:  # noqa: SIM110 (a loop beats all(genexpr))
            if (getter(obj) == value) == negate:
                return False
        return True

    def matches_meta(self, namespace: str, name: str) -> bool:
        """:meth:`matches` for a selector on ``metadata.*`` only, without the object."""
        for req in self.requirements:
            if req.field == "metadata.name":
                have = name
            elif req.field == "metadata.namespace":
                have = namespace
            else:
                have = ""
            if (have == req.value) == (req.operator == "!="):
                return False
        return True

    def requires_exact_match(self, field: str) -> str | None:
        """``RequiresExactMatch``: the value ``field`` must have, or None."""
        for req in self.requirements:
            if req.field == field and req.operator == "=":
                return req.value
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    def __repr__(self) -> str:
        return f"<FieldSelector {str(self)!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FieldSelector) and self.requirements == other.requirements

    def __hash__(self) -> int:
        return hash(self.requirements)


_ALWAYS_EMPTY = Getter(lambda obj: "")


def _projection_decoder(paths: Iterable[Path]) -> msgspec.json.Decoder[Any]:
    """A decoder into nested structs holding ``paths`` (leaves of any type, absent ones
    left out), plus ``metadata.name``, ``namespace`` and ``labels``."""
    tree: dict[str, Any] = {"metadata": {"name": None, "namespace": None, "labels": None}}
    for path in paths:
        node = tree
        for step in path[:-1]:
            child = node.get(step)
            if child is None and step in node:  # already a leaf: keep the whole value
                break
            node = node.setdefault(step, {})
        else:
            node[path[-1]] = None
    return msgspec.json.Decoder(_struct_type(tree))


_COUNTER = iter(range(1 << 62))


def _struct_type(tree: Mapping[str, Any]) -> Any:
    fields: list[tuple[str, Any, Any]] = []
    rename: dict[str, str] = {}
    for i, (key, child) in enumerate(tree.items()):
        ident = f"f{i}"
        rename[ident] = key
        kind = Any if child is None else _struct_type(child) | None
        fields.append((ident, kind, None))
    return msgspec.defstruct(
        f"_Projection{next(_COUNTER)}", fields, rename=rename, omit_defaults=True, gc=False
    )


def _split_terms(text: str) -> list[str]:
    """``splitTerms``: commas not escaped by a backslash separate terms."""
    terms: list[str] = []
    start = 0
    in_slash = False
    for i, char in enumerate(text):
        if in_slash:
            in_slash = False
        elif char == "\\":
            in_slash = True
        elif char == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


_OPERATOR_RE = re.compile(r"!=|==|=")


def _split_term(term: str) -> tuple[str, str, str] | None:
    """``splitTerm``: the first ``!=``, ``==`` or ``=`` splits (no escapes on the left)."""
    found = _OPERATOR_RE.search(term)
    if found is None:
        return None
    return term[: found.start()], found.group(), term[found.end() :]


def _unescape(value: str) -> str:
    """``UnescapeValue``."""
    if "\\" not in value and "," not in value and "=" not in value:
        return value
    out: list[str] = []
    in_slash = False
    for char in value:
        if in_slash:
            if char not in "\\,=":
                raise ParseError(f"invalid field selector: invalid escape sequence: \\{char}")
            out.append(char)
            in_slash = False
        elif char == "\\":
            in_slash = True
        elif char in ",=":
            raise ParseError(f"invalid field selector: unescaped character in value: {ord(char)}")
        else:
            out.append(char)
    if in_slash:
        raise ParseError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


FieldTerms = tuple[tuple[str, str, str], ...]
"""A field selector's terms after parsing, before the kind's conversion: ``(label,
operator, unescaped value)``, sorted."""


def parse_field_terms(text: str) -> FieldTerms:
    """The syntax half of :func:`parse_field_selector` (``fields.ParseSelector``): the API
    server runs it while decoding the query, before validating the ListOptions, and converts
    the labels only after that (:func:`convert_field_terms`).

    Raises:
        ProxyStatusError: 400 BadRequest with the API server's message.
    """
    if not text:
        return ()
    error = too_long("fieldSelector", text)
    if error is not None:
        raise error
    parsed: list[tuple[str, str, str]] = []
    try:
        for part in sorted(_split_terms(text)):
            if not part:
                continue
            split = _split_term(part)
            if split is None:
                raise ParseError(f"invalid selector: '{text}'; can't understand '{part}'")
            lhs, op, rhs = split
            parsed.append((lhs, "!=" if op == "!=" else "=", _unescape(rhs)))
            if len(parsed) > MAX_REQUIREMENTS:
                raise TooMany(len(parsed))
    except ParseError as exc:
        raise bad_request(str(exc)) from None
    except TooMany as exc:
        raise too_many("fieldSelector", exc.count) from None
    return tuple(parsed)


def convert_field_terms(
    terms: FieldTerms,
    resource: Resource,
    *,
    custom: bool | None = None,
    selectable_fields: Sequence[str] = (),
) -> FieldSelector:
    """The conversion half of :func:`parse_field_selector` (``ConvertFieldLabel`` for the
    resource's kind, term by term in sorted order).

    Raises:
        ProxyStatusError: 400 BadRequest with the kind's refusal for the first label it
            does not support.
    """
    if not terms:
        return FieldSelector()
    rules = kind_rules(resource, custom, selectable_fields)
    reqs: list[FieldRequirement] = []
    for lhs, op, value in terms:
        label = rules.accepted.get(lhs)
        if label is None:
            raise bad_request(rules.refuse(lhs))
        reqs.append(FieldRequirement(label, op, value))
    return FieldSelector(reqs, rules.values)


def parse_field_selector(
    text: str,
    resource: Resource,
    *,
    custom: bool | None = None,
    selectable_fields: Sequence[str] = (),
) -> FieldSelector:
    """Parse a ``fieldSelector`` and convert its labels as kube-apiserver does for
    ``resource`` (``fields.ParseSelector``, then ``ConvertFieldLabel``).

    Args:
        text: The query parameter.
        resource: The resource listed or watched.
        custom: Whether it is a custom resource (its CRD's rules apply); None guesses from
            the group (not one of :data:`BUILTIN_GROUPS`).
        selectable_fields: A CRD version's ``selectableFields`` JSON paths (``.spec.color``).

    Raises:
        ProxyStatusError: 400 BadRequest with the API server's message.
    """
    return convert_field_terms(
        parse_field_terms(text), resource, custom=custom, selectable_fields=selectable_fields
    )
