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

Bounded like label selectors (:data:`MAX_SELECTOR_LENGTH`, :data:`MAX_REQUIREMENTS`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from .._codec import decode_raw
from .._resources import Resource
from ._label_selector import (
    MAX_REQUIREMENTS,
    ParseError,
    TooMany,
    too_long,
    too_many,
)
from ._statuses import bad_request, go_quote

__all__ = [
    "BUILTIN_GROUPS",
    "FieldRequirement",
    "FieldSelector",
    "FieldTerms",
    "convert_field_terms",
    "parse_field_selector",
    "parse_field_terms",
]


# ----------------------------------------------------------------------------- field values
def _get(obj: Mapping[str, Any], *path: str) -> Any:
    current: Any = obj
    for step in path:
        if not isinstance(current, Mapping):
            return None
        current = current.get(step)
    return current


def _text(obj: Mapping[str, Any], *path: str) -> str:
    value = _get(obj, *path)
    return value if isinstance(value, str) else ""


def _bool(obj: Mapping[str, Any], *path: str) -> str:
    return "true" if _get(obj, *path) is True else "false"


def _int(obj: Mapping[str, Any], *path: str) -> str:
    value = _get(obj, *path)
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "0"


Path = tuple[str, ...]


class _Getter:
    """How a kind reads one selectable field from a decoded object, and which paths of the
    object that takes (a field selector decodes only those: see :meth:`FieldSelector.project`)."""

    __slots__ = ("fn", "paths")

    def __init__(self, fn: Callable[[Mapping[str, Any]], str], *paths: Path):
        self.fn = fn
        self.paths = paths

    def __call__(self, obj: Mapping[str, Any]) -> str:
        return self.fn(obj)


def _path_getter(*path: str) -> _Getter:
    return _Getter(lambda obj: _text(obj, *path), path)


def _bool_getter(*path: str) -> _Getter:
    return _Getter(lambda obj: _bool(obj, *path), path)


def _int_getter(*path: str) -> _Getter:
    return _Getter(lambda obj: _int(obj, *path), path)


def _pod_ip(obj: Mapping[str, Any]) -> str:
    ip = _text(obj, "status", "podIP")
    if ip:
        return ip
    ips = _get(obj, "status", "podIPs")
    if isinstance(ips, list) and ips and isinstance(ips[0], Mapping):
        first = ips[0].get("ip")
        return first if isinstance(first, str) else ""
    return ""


def _service_account(obj: Mapping[str, Any]) -> str:
    return _text(obj, "spec", "serviceAccountName") or _text(obj, "spec", "serviceAccount")


def _event_source(obj: Mapping[str, Any]) -> str:
    return _text(obj, "source", "component") or _text(obj, "reportingComponent")


def _events_v1_source(obj: Mapping[str, Any]) -> str:
    return _text(obj, "deprecatedSource", "component") or _text(obj, "reportingController")


_NAME = _path_getter("metadata", "name")
_NAMESPACE = _path_getter("metadata", "namespace")
_META = {"metadata.name": _NAME, "metadata.namespace": _NAMESPACE}
_INVOLVED = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")


@dataclasses.dataclass(frozen=True, slots=True)
class _Kind:
    """What one kind's ``ConvertFieldLabel`` accepts (label -> the label it becomes) and how
    it words a refusal; how its ``ToSelectableFields`` reads each field."""

    accepted: Mapping[str, str]
    refuse: Callable[[str], str]
    values: Mapping[str, _Getter]


def _not_supported(label: str) -> str:
    return f"field label not supported: {label}"


def _default_refusal(label: str) -> str:
    return f'{go_quote(label)} is not a known field selector: only "metadata.name", "metadata.namespace"'


def _same(*labels: str) -> dict[str, str]:
    return {label: label for label in labels}


_DEFAULT = _Kind(_same("metadata.name", "metadata.namespace"), _default_refusal, _META)

_KINDS: dict[tuple[str, str], _Kind] = {
    ("", "pods"): _Kind(
        {
            **_same(
                "metadata.name",
                "metadata.namespace",
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.podIPs",
                "status.nominatedNodeName",
            ),
            "spec.host": "spec.nodeName",  # old v1 clients
        },
        _not_supported,
        {
            **_META,
            "spec.nodeName": _path_getter("spec", "nodeName"),
            "spec.restartPolicy": _path_getter("spec", "restartPolicy"),
            "spec.schedulerName": _path_getter("spec", "schedulerName"),
            "spec.serviceAccountName": _Getter(
                _service_account, ("spec", "serviceAccountName"), ("spec", "serviceAccount")
            ),
            "spec.hostNetwork": _bool_getter("spec", "hostNetwork"),
            "status.phase": _path_getter("status", "phase"),
            "status.podIP": _Getter(_pod_ip, ("status", "podIP"), ("status", "podIPs")),
            "status.nominatedNodeName": _path_getter("status", "nominatedNodeName"),
            # status.podIPs: accepted by the conversion, not in ToSelectableFields: always ""
        },
    ),
    ("", "nodes"): _Kind(
        _same("metadata.name", "spec.unschedulable"),
        _not_supported,
        {
            "metadata.name": _NAME,
            "spec.unschedulable": _bool_getter("spec", "unschedulable"),
        },
    ),
    ("", "replicationcontrollers"): _Kind(
        _same("metadata.name", "metadata.namespace", "status.replicas"),
        _not_supported,
        {**_META, "status.replicas": _int_getter("status", "replicas")},
    ),
    ("", "events"): _Kind(
        _same(
            *(f"involvedObject.{f}" for f in _INVOLVED),
            "reason",
            "reportingComponent",
            "source",
            "type",
            "metadata.namespace",
            "metadata.name",
        ),
        _not_supported,
        {
            **_META,
            **{f"involvedObject.{f}": _path_getter("involvedObject", f) for f in _INVOLVED},
            "reason": _path_getter("reason"),
            "reportingComponent": _path_getter("reportingComponent"),
            "source": _Getter(_event_source, ("source", "component"), ("reportingComponent",)),
            "type": _path_getter("type"),
        },
    ),
    ("events.k8s.io", "events"): _Kind(
        {
            "reason": "reason",
            **{f"regarding.{f}": f"involvedObject.{f}" for f in _INVOLVED},
            "reportingController": "reportingComponent",
            "source": "source",
            "type": "type",
            "metadata.namespace": "metadata.namespace",
            "metadata.name": "metadata.name",
        },
        _not_supported,
        {
            **_META,
            **{f"involvedObject.{f}": _path_getter("regarding", f) for f in _INVOLVED},
            "reason": _path_getter("reason"),
            "reportingComponent": _path_getter("reportingController"),
            "source": _Getter(
                _events_v1_source, ("deprecatedSource", "component"), ("reportingController",)
            ),
            "type": _path_getter("type"),
        },
    ),
    ("", "namespaces"): _Kind(
        _same("status.phase", "metadata.name"),
        _not_supported,
        {"metadata.name": _NAME, "status.phase": _path_getter("status", "phase")},
    ),
    ("", "secrets"): _Kind(
        _same("type", "metadata.namespace", "metadata.name"),
        _not_supported,
        {**_META, "type": _path_getter("type")},
    ),
    ("", "services"): _Kind(
        _same("metadata.namespace", "metadata.name", "spec.clusterIP", "spec.type"),
        _not_supported,
        {
            **_META,
            "spec.clusterIP": _path_getter("spec", "clusterIP"),
            "spec.type": _path_getter("spec", "type"),
        },
    ),
    ("batch", "jobs"): _Kind(
        _same("metadata.name", "metadata.namespace", "status.successful"),
        lambda label: f"field label {go_quote(label)} not supported for Job",
        {**_META, "status.successful": _int_getter("status", "succeeded")},
    ),
    ("certificates.k8s.io", "certificatesigningrequests"): _Kind(
        _same("metadata.name", "spec.signerName"),
        _not_supported,
        {"metadata.name": _NAME, "spec.signerName": _path_getter("spec", "signerName")},
    ),
    ("certificates.k8s.io", "clustertrustbundles"): _Kind(
        _same("metadata.name", "spec.signerName"),
        _not_supported,
        {"metadata.name": _NAME, "spec.signerName": _path_getter("spec", "signerName")},
    ),
}

_RESOURCE_SLICE_FIELDS = {
    "metadata.name": _NAME,
    "spec.nodeName": _path_getter("spec", "nodeName"),
    "spec.driver": _path_getter("spec", "driver"),
}

BUILTIN_GROUPS: Final = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "extensions",
        "flowcontrol.apiserver.k8s.io",
        "internal.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "storagemigration.k8s.io",
    }
)
"""API groups kube-apiserver serves itself; any other group is a custom resource (served by
the apiextensions server) or an aggregated API."""


def _kind_rules(resource: Resource, custom: bool | None, selectable: Sequence[str]) -> _Kind:
    known = _KINDS.get((resource.group, resource.plural))
    if known is not None:
        return known
    if resource.group == "resource.k8s.io" and resource.plural == "resourceslices":
        gvk = f"resource.k8s.io/{resource.version}, Kind=ResourceSlice"
        return _Kind(
            _same(*_RESOURCE_SLICE_FIELDS),
            lambda label: f"field label not supported for {gvk}: {label}",
            _RESOURCE_SLICE_FIELDS,
        )
    if custom is None:
        custom = resource.group not in BUILTIN_GROUPS
    if not custom:
        return _DEFAULT
    # apiextensions' crConverter: metadata.name, metadata.namespace when namespaced, and the
    # CRD version's selectableFields
    labels = ["metadata.name", *(["metadata.namespace"] if resource.namespaced else [])]
    values: dict[str, _Getter] = {"metadata.name": _NAME}
    if resource.namespaced:
        values["metadata.namespace"] = _NAMESPACE
    for field in selectable:
        label = field.lstrip(".")
        labels.append(label)
        values[label] = _selectable_getter(label)
    return _Kind(_same(*labels), _not_supported, values)


def _selectable_getter(label: str) -> _Getter:
    path = tuple(label.split("."))

    def value(obj: Mapping[str, Any]) -> str:
        found = _get(obj, *path)
        if isinstance(found, bool):
            return "true" if found else "false"
        if isinstance(found, int | str):
            return str(found)
        return ""

    return _Getter(value, path)


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
        values: Mapping[str, _Getter] | None = None,
    ):
        self.requirements = tuple(requirements)
        getters = values or _META
        checks: list[tuple[_Getter, str, bool]] = []
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
        return any(r.field not in _META for r in self.requirements)

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


_ALWAYS_EMPTY = _Getter(lambda obj: "")


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
    rules = _kind_rules(resource, custom, selectable_fields)
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
