"""FakeCluster's authorizer: kube-apiserver's chain over the cluster's own RBAC objects.

The chain is ``system:masters`` (allowed before anything else), RBAC, then an optional
webhook (:attr:`FakeCluster.webhook`, standing for a Node or webhook authorizer: EKS access
entries, AKS Azure RBAC) that may allow what RBAC does not. RBAC reads the Roles,
ClusterRoles, RoleBindings and ClusterRoleBindings stored in the fake at the moment of the
request, as kube-apiserver reads its informers: ClusterRoleBindings first, then the
RoleBindings of the request's namespace; a RoleBinding to a ClusterRole grants in its
namespace only; a ServiceAccount subject without a namespace is the binding's namespace's;
a binding to a role that does not exist adds its error to a denial's reason.

This is written apart from ``kubemux._authz`` on purpose (and must never import it): the
proxy's differential test compares kubemux's local RBAC with this fake's answers, so the
two are independent readings of Kubernetes' rules. It also runs the ClusterRole aggregation
controller (:func:`aggregate`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..._resources import Resource
from .._wire.request_info import RequestInfo

__all__ = [
    "RBAC_RESOURCES",
    "Caller",
    "Decision",
    "Request",
    "Webhook",
    "aggregate",
    "authorize",
    "forbidden_body",
    "request_of",
    "settle_aggregation",
]

Objects = Callable[[str], list[dict[str, Any]]]  # "clusterroles" -> its objects
RBAC_RESOURCES = {
    plural: Resource(
        group="rbac.authorization.k8s.io",
        version="v1",
        plural=plural,
        kind=kind,
        namespaced=not plural.startswith("cluster"),
    )
    for plural, kind in (
        ("roles", "Role"),
        ("clusterroles", "ClusterRole"),
        ("rolebindings", "RoleBinding"),
        ("clusterrolebindings", "ClusterRoleBinding"),
    )
}
"""``rbac.authorization.k8s.io/v1``, by plural: served by every fake, read by its RBAC."""
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclasses.dataclass(frozen=True)
class Caller:
    """Who makes a request, as the authenticator (or impersonation) says."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def user_info(self) -> dict[str, Any]:
        """As a TokenReview's ``status.user``."""
        out: dict[str, Any] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


@dataclasses.dataclass(frozen=True)
class Request:
    """What is asked: kube-apiserver's authorization attributes (without the user)."""

    verb: str
    resource: str = ""
    group: str = ""
    version: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""
    is_resource: bool = True


@dataclasses.dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


Webhook = Callable[[Caller, Request], bool]
"""An authorizer after RBAC: True allows, False has no opinion."""


def _valid_segment(name: str) -> bool:
    return name not in (".", "..") and "/" not in name and "%" not in name


def _selected_name(selector: str) -> str:
    """The name ``metadata.name=X`` (or ``==``) selects; terms sorted as Go sorts them; none
    if any term does not parse (kube-apiserver then reads no name). Values with escapes
    (``\\,``) name nothing here: no valid object name has them."""
    terms = sorted(t for t in selector.split(",") if t)
    names = []
    for term in terms:
        match = re.fullmatch(r"([^=!]*)(!=|==|=)(.*)", term)
        if match is None or re.search(r"[=,\\]", match.group(3)):
            return ""
        if match.group(1) == "metadata.name" and match.group(2) != "!=":
            names.append(match.group(3))
    return names[0] if names and _valid_segment(names[0]) else ""


def request_of(info: RequestInfo, method: str, path: str, query: Mapping[str, str]) -> Request:
    """The attributes of a request as ``RequestInfoFactory`` reads them: a Namespace is in
    itself, a LIST or WATCH with ``fieldSelector=metadata.name=X`` is for ``X``, a
    non-resource request's verb is its lower-cased method."""
    if info.plural is None:
        return Request(verb=method.lower(), path=path, is_resource=False)
    namespace = info.namespace or ""
    if info.plural == "namespaces" and not info.group and info.name is not None:
        namespace = info.name  # /api/v1/namespaces/NAME[/status|/finalize]
    name = info.name or ""
    if not name and info.verb in ("list", "watch"):
        name = _selected_name(query.get("fieldSelector", ""))
    return Request(
        verb=info.verb,
        resource=info.plural,
        group=info.group,
        version=info.version,
        subresource=info.subresource or "",
        name=name,
        namespace=namespace,
    )


# -- RBAC --------------------------------------------------------------------------------


def _listed(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _grants(rule: Mapping[str, Any], req: Request) -> bool:
    verbs = _listed(rule.get("verbs"))
    if not ("*" in verbs or req.verb in verbs):
        return False
    if not req.is_resource:
        for pattern in _listed(rule.get("nonResourceURLs")):
            if pattern in ("*", req.path):
                return True
            stem = pattern.rstrip("*")
            if stem != pattern and req.path.startswith(stem):
                return True
        return False
    groups = _listed(rule.get("apiGroups"))
    if not ("*" in groups or req.group in groups):
        return False
    resources = set(_listed(rule.get("resources")))
    asked = f"{req.resource}/{req.subresource}" if req.subresource else req.resource
    if not ("*" in resources or asked in resources) and not (
        req.subresource and f"*/{req.subresource}" in resources
    ):
        return False
    names = _listed(rule.get("resourceNames"))
    return not names or req.name in names


def quote(text: str) -> str:
    """Go's ``%q`` for the texts RBAC writes (printable ASCII and Unicode kept)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(ch)])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def _subject_matches(subject: Any, caller: Caller, binding_namespace: str) -> bool:
    if not isinstance(subject, dict):
        return False
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return caller.name == name
    if kind == "Group":
        return name in caller.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return bool(namespace) and caller.name == f"system:serviceaccount:{namespace}:{name}"
    return False


def _who(subject: dict[str, Any], binding_namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        ns = subject.get("namespace") or binding_namespace
        return f"ServiceAccount {quote(str(subject.get('name')) + '/' + ns)}"
    return f"{subject.get('kind')} {quote(str(subject.get('name')))}"


def _role_rules(objects: Objects, ref: Any, namespace: str) -> list[Any] | str:
    ref = ref if isinstance(ref, dict) else {}
    kind, name = ref.get("kind"), str(ref.get("name", ""))
    if kind == "ClusterRole":
        found = [o for o in objects("clusterroles") if o["metadata"]["name"] == name]
        if not found:
            return f"clusterrole.rbac.authorization.k8s.io {quote(name)} not found"
    elif kind == "Role":
        found = [
            o
            for o in objects("roles")
            if namespace
            and o["metadata"].get("namespace") == namespace
            and o["metadata"]["name"] == name
        ]
        if not found:
            return f"role.rbac.authorization.k8s.io {quote(name)} not found"
    else:
        return f"unsupported role reference kind: {quote(str(kind))}"
    rules = found[0].get("rules")
    return rules if isinstance(rules, list) else []


def rbac(objects: Objects, caller: Caller, req: Request) -> Decision:
    """RBAC's answer, with kube-apiserver's reason (``RBAC: allowed by ...``, or the
    resolution errors of a denial)."""
    errors: list[str] = []
    scopes: list[tuple[str, list[dict[str, Any]]]] = [("", objects("clusterrolebindings"))]
    if req.namespace:
        local = [
            b for b in objects("rolebindings") if b["metadata"].get("namespace") == req.namespace
        ]
        scopes.append((req.namespace, local))
    for namespace, bindings in scopes:
        for binding in sorted(bindings, key=lambda b: str(b["metadata"]["name"])):
            subjects = binding.get("subjects")
            subjects = subjects if isinstance(subjects, list) else []
            first = next((s for s in subjects if _subject_matches(s, caller, namespace)), None)
            if first is None:
                continue
            rules = _role_rules(objects, binding.get("roleRef"), namespace)
            if isinstance(rules, str):
                errors.append(rules)
                continue
            if any(isinstance(r, dict) and _grants(r, req) for r in rules):
                ref = binding.get("roleRef") or {}
                what = (
                    f"RoleBinding {quote(binding['metadata']['name'] + '/' + namespace)}"
                    if namespace
                    else f"ClusterRoleBinding {quote(binding['metadata']['name'])}"
                )
                return Decision(
                    True,
                    f"RBAC: allowed by {what} of {ref.get('kind')} {quote(str(ref.get('name')))}"
                    f" to {_who(first, namespace)}",
                )
    if not errors:
        return Decision(False)
    distinct = list(dict.fromkeys(errors))
    text = distinct[0] if len(distinct) == 1 else "[" + ", ".join(distinct) + "]"
    return Decision(False, f"RBAC: {text}")


def authorize(
    objects: Objects, caller: Caller, req: Request, webhook: Webhook | None = None
) -> Decision:
    """The chain: ``system:masters``, RBAC, the webhook."""
    if "system:masters" in caller.groups:
        return Decision(True)
    decision = rbac(objects, caller, req)
    if decision.allowed:
        return decision
    if webhook is not None and webhook(caller, req):
        return Decision(True, "allowed by the webhook authorizer")
    return decision


def forbidden_body(caller: Caller, req: Request, reason: str) -> dict[str, Any]:
    """The 403 Status of a denial (``responsewriters.ForbiddenStatusError``)."""
    if req.is_resource:
        what = req.resource + (f"/{req.subresource}" if req.subresource else "")
        text = (
            f"User {quote(caller.name)} cannot {req.verb} resource {quote(what)} in API group "
            f"{quote(req.group)} "
            + (
                f"in the namespace {quote(req.namespace)}"
                if req.namespace
                else "at the cluster scope"
            )
        )
    else:
        text = f"User {quote(caller.name)} cannot {req.verb} path {quote(req.path)}"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if reason:
        text += ": " + reason
    qualified = f"{req.resource}.{req.group}" if req.group else req.resource
    if not req.resource and not req.group:
        message = f"forbidden: {text}"
    elif req.name:
        message = f"{qualified} {quote(req.name)} is forbidden: {text}"
    else:
        message = f"{qualified} is forbidden: {text}"
    details: dict[str, Any] = {}
    if req.name:
        details["name"] = req.name
    if req.group:
        details["group"] = req.group
    if req.resource:
        details["kind"] = req.resource
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    }


# -- the ClusterRole aggregation controller ------------------------------------------------


def _selects(selector: Any, labels: Mapping[str, Any]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against ``labels``."""
    if not isinstance(selector, dict):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def aggregate(cluster_roles: Iterable[dict[str, Any]]) -> dict[str, list[Any]]:
    """The rules each aggregated ClusterRole should hold (name -> rules): for each of its
    ``aggregationRule.clusterRoleSelectors`` in order, the rules of the ClusterRoles it
    selects (by name, itself excepted), each rule once."""
    roles = sorted(cluster_roles, key=lambda r: str(r["metadata"]["name"]))
    out: dict[str, list[Any]] = {}
    for role in roles:
        rule = role.get("aggregationRule")
        if not isinstance(rule, dict):
            continue
        name = role["metadata"]["name"]
        rules: list[Any] = []
        for selector in rule.get("clusterRoleSelectors") or ():
            for other in roles:
                if other["metadata"]["name"] == name:
                    continue
                if not _selects(selector, other["metadata"].get("labels") or {}):
                    continue
                for item in other.get("rules") or ():
                    if item not in rules:
                        rules.append(item)
        out[name] = rules
    return out


def settle_aggregation(
    read: Callable[[], list[dict[str, Any]]], write: Callable[[dict[str, Any]], object]
) -> None:
    """Run the aggregation controller until it settles: each pass writes every aggregated
    ClusterRole whose rules differ from :func:`aggregate`'s (missing rules read as none, as
    Go's semantic equality has them)."""
    for _ in range(100):  # each pass writes only what differs: it settles
        roles = read()
        wanted = aggregate(roles)
        stale = [
            {**role, "rules": wanted[role["metadata"]["name"]]}
            for role in roles
            if role["metadata"]["name"] in wanted
            and (role.get("rules") or []) != wanted[role["metadata"]["name"]]
        ]
        if not stale:
            return
        for role in stale:
            write(role)
