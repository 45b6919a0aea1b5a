"""RBAC's records and matching rules, exactly as Kubernetes evaluates them.

The matching functions are those of ``k8s.io/kubernetes/pkg/apis/rbac/v1/evaluation_helpers.go``
(``VerbMatches``, ``APIGroupMatches``, ``ResourceMatches`` with ``*/subresource``,
``ResourceNameMatches``, ``NonResourceURLMatches`` with a trailing ``*``) and ``RuleAllows`` of
``plugin/pkg/auth/authorizer/rbac/rbac.go``; subjects match as ``appliesToUser`` of
``pkg/registry/rbac/validation/rule.go`` does. Pure and sync.

Objects come from the cluster as JSON (``dict``); the records here keep what RBAC reads and
nothing else, so two objects that differ only in metadata compare equal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .attributes import Attributes
from .forbidden import go_quote
from .user import SERVICE_ACCOUNT_PREFIX, User

__all__ = [
    "ALL",
    "Binding",
    "PolicyRule",
    "Role",
    "RoleRef",
    "Subject",
    "api_group_matches",
    "applies_to",
    "non_resource_url_matches",
    "resource_matches",
    "resource_name_matches",
    "rule_allows",
    "verb_matches",
]

ALL = "*"
"""``rbacv1.VerbAll``, ``APIGroupAll``, ``ResourceAll``, ``NonResourceAll``."""
RBAC_GROUP = "rbac.authorization.k8s.io"


def _strings(value: Any) -> tuple[str, ...]:
    # The API server only stores lists of strings; anything else from a broken server is
    # read as nothing (never as a wildcard).
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyRule:
    """One rule of a Role or ClusterRole (``rbacv1.PolicyRule``)."""

    verbs: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, raw: Any) -> PolicyRule:
        """The rule of a ``rules[]`` JSON item (fields of the wrong type read as empty)."""
        if not isinstance(raw, dict):
            return cls()
        return cls(
            _strings(raw.get("verbs")),
            _strings(raw.get("apiGroups")),
            _strings(raw.get("resources")),
            _strings(raw.get("resourceNames")),
            _strings(raw.get("nonResourceURLs")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Subject:
    """A binding's subject: ``kind`` is ``User``, ``Group`` or ``ServiceAccount``."""

    kind: str
    name: str
    namespace: str = ""
    api_group: str = ""

    @classmethod
    def from_json(cls, raw: Any) -> Subject:
        if not isinstance(raw, dict):
            return cls("", "")
        return cls(
            _text(raw.get("kind")),
            _text(raw.get("name")),
            _text(raw.get("namespace")),
            _text(raw.get("apiGroup")),
        )

    def describe(self, binding_namespace: str) -> str:
        """As ``describeSubject`` writes it in an RBAC reason: ``User "alice"``,
        ``ServiceAccount "NAME/NS"`` (the binding's namespace when the subject has none)."""
        if self.kind == "ServiceAccount":
            namespace = self.namespace or binding_namespace
            return f"{self.kind} {go_quote(self.name + '/' + namespace)}"
        return f"{self.kind} {go_quote(self.name)}"


@dataclasses.dataclass(frozen=True, slots=True)
class RoleRef:
    """What a binding grants: a ``Role`` (in the binding's namespace) or a ``ClusterRole``."""

    kind: str
    name: str
    api_group: str = RBAC_GROUP


@dataclasses.dataclass(frozen=True, slots=True)
class Role:
    """A Role (``namespace`` set) or ClusterRole (``namespace == ""``): its rules.

    A ClusterRole's ``rules`` are the stored ones; for an aggregated ClusterRole they are
    what the aggregation controller wrote, which is what kube-apiserver evaluates.
    """

    namespace: str
    name: str
    rules: tuple[PolicyRule, ...]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Role:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        rules = obj.get("rules")
        return cls(
            _text(meta.get("namespace")),
            _text(meta.get("name")),
            tuple(PolicyRule.from_json(r) for r in rules) if isinstance(rules, list) else (),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Binding:
    """A RoleBinding (``namespace`` set) or ClusterRoleBinding (``namespace == ""``)."""

    namespace: str
    name: str
    role_ref: RoleRef
    subjects: tuple[Subject, ...]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Binding:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        ref = obj.get("roleRef")
        ref = ref if isinstance(ref, dict) else {}
        subjects = obj.get("subjects")
        return cls(
            _text(meta.get("namespace")),
            _text(meta.get("name")),
            RoleRef(_text(ref.get("kind")), _text(ref.get("name")), _text(ref.get("apiGroup"))),
            tuple(Subject.from_json(s) for s in subjects) if isinstance(subjects, list) else (),
        )

    def describe(self, subject: Subject) -> str:
        """The binding as the RBAC authorizer names it in ``RBAC: allowed by ...``."""
        if self.namespace:
            name = go_quote(self.name + "/" + self.namespace)
            return (
                f"RoleBinding {name} of {self.role_ref.kind} {go_quote(self.role_ref.name)} "
                f"to {subject.describe(self.namespace)}"
            )
        return (
            f"ClusterRoleBinding {go_quote(self.name)} of {self.role_ref.kind} "
            f"{go_quote(self.role_ref.name)} to {subject.describe('')}"
        )


def verb_matches(rule: PolicyRule, verb: str) -> bool:
    return any(v in (ALL, verb) for v in rule.verbs)


def api_group_matches(rule: PolicyRule, group: str) -> bool:
    return any(g in (ALL, group) for g in rule.api_groups)


def resource_matches(rule: PolicyRule, combined: str, subresource: str) -> bool:
    """``combined`` is ``resource/subresource`` (or ``resource``); ``*/sub`` matches any
    resource's ``sub`` and only that."""
    for r in rule.resources:
        if r in (ALL, combined):
            return True
        # "*/sub" (Go: a length check, a "*/" prefix and a suffix: the same thing)
        if subresource and r == "*/" + subresource:
            return True
    return False


def resource_name_matches(rule: PolicyRule, name: str) -> bool:
    return not rule.resource_names or name in rule.resource_names


def non_resource_url_matches(rule: PolicyRule, path: str) -> bool:
    for url in rule.non_resource_urls:
        if url in (ALL, path):
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(attrs: Attributes, rule: PolicyRule) -> bool:
    """Whether ``rule`` allows the request (``RuleAllows``)."""
    if attrs.resource_request:
        combined = attrs.resource
        if attrs.subresource:
            combined = f"{attrs.resource}/{attrs.subresource}"
        return (
            verb_matches(rule, attrs.verb)
            and api_group_matches(rule, attrs.api_group)
            and resource_matches(rule, combined, attrs.subresource)
            and resource_name_matches(rule, attrs.name)
        )
    return verb_matches(rule, attrs.verb) and non_resource_url_matches(rule, attrs.path)


def subject_applies(user: User, subject: Subject, namespace: str) -> bool:
    """``appliesToUser``: ``namespace`` is the binding's (``""`` for a ClusterRoleBinding).
    The subject's ``apiGroup`` is not read, as Kubernetes does not read it."""
    if subject.kind == "User":
        return user.name == subject.name
    if subject.kind == "Group":
        return subject.name in user.groups
    if subject.kind == "ServiceAccount":
        sa_namespace = subject.namespace or namespace
        if not sa_namespace:
            return False
        return user.name == f"{SERVICE_ACCOUNT_PREFIX}{sa_namespace}:{subject.name}"
    return False


def applies_to(user: User, subjects: Sequence[Subject], namespace: str) -> int | None:
    """The index of the first subject that applies to ``user``, or None (``appliesTo``)."""
    for i, subject in enumerate(subjects):
        if subject_applies(user, subject, namespace):
            return i
    return None
