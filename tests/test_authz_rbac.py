"""Kubernetes RBAC evaluated locally (kubemux._authz): Kubernetes' own cases, more shapes,
the 403 texts, and the fast permission sets held equal to the reference evaluation.

Tables marked "rbac_test.go" and "rule_test.go" are the cases of
kubernetes/kubernetes ``plugin/pkg/auth/authorizer/rbac/rbac_test.go`` (TestAuthorizer,
TestRuleMatches) and ``pkg/registry/rbac/validation/rule_test.go`` (TestDefaultRuleResolver,
TestAppliesTo), rewritten as data.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubemux._authz.attributes import Attributes
from kubemux._authz.forbidden import (
    aggregate_message,
    forbidden_message,
    forbidden_status,
    go_quote,
    rbac_reason,
)
from kubemux._authz.permissions import EXPANSION_LIMIT, PermissionCache, RuleIndex
from kubemux._authz.rbac import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    ROLE_BINDINGS,
    ROLES,
    RbacPolicy,
)
from kubemux._authz.rules import PolicyRule, Subject, applies_to, rule_allows
from kubemux._authz.user import User

# -- builders, as rbac_test.go's newRule / newRole / newRoleBinding ... ----------------------


def rule(
    verbs: str, groups: str, resources: str, urls: str = "", names: str = ""
) -> dict[str, Any]:
    """``newRule``: comma-separated lists (``strings.Split`` keeps an empty item: ``""``
    splits to ``[""]``); ``names`` is resourceNames (empty: none)."""
    out: dict[str, Any] = {
        "verbs": verbs.split(","),
        "apiGroups": groups.split(","),
        "resources": resources.split(","),
        "nonResourceURLs": urls.split(","),
    }
    if names:
        out["resourceNames"] = names.split(",")
    return out


def cluster_role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "rules": list(rules)}


def role(namespace: str, name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "rules": list(rules)}


def subjects(*specs: str) -> list[dict[str, str]]:
    """``"User:alice"``, ``"Group:devs"``, ``"ServiceAccount:ns/name"`` (``ns/`` optional)."""
    out = []
    for spec in specs:
        kind, _, name = spec.partition(":")
        item = {"kind": kind, "name": name}
        if kind == "ServiceAccount":
            if "/" in name:
                item["namespace"], item["name"] = name.split("/", 1)
        else:
            item["apiGroup"] = "rbac.authorization.k8s.io"
        out.append(item)
    return out


def cluster_binding(name: str, role_name: str, *specs: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role_name,
        },
        "subjects": subjects(*specs),
    }


def binding(namespace: str, name: str, kind: str, role_name: str, *specs: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role_name},
        "subjects": subjects(*specs),
    }


def policy_of(
    *,
    roles: list[dict[str, Any]] = (),  # type: ignore[assignment]
    cluster_roles: list[dict[str, Any]] = (),  # type: ignore[assignment]
    bindings: list[dict[str, Any]] = (),  # type: ignore[assignment]
    cluster_bindings: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> RbacPolicy:
    policy = RbacPolicy()
    policy.replace(ROLES, roles)
    policy.replace(CLUSTER_ROLES, cluster_roles)
    policy.replace(ROLE_BINDINGS, bindings)
    policy.replace(CLUSTER_ROLE_BINDINGS, cluster_bindings)
    return policy


def res(
    verb: str,
    resource: str,
    namespace: str = "",
    *,
    group: str = "",
    sub: str = "",
    name: str = "",
) -> Attributes:
    return Attributes(
        verb=verb,
        resource=resource,
        namespace=namespace,
        api_group=group,
        subresource=sub,
        name=name,
    )


def url(verb: str, path: str) -> Attributes:
    return Attributes.non_resource(verb, path)


def user(name: str, groups: str = "") -> User:
    """As ``defaultAttributes.GetUser``: groups split on commas (``""``: one empty group)."""
    return User(name, groups=tuple(groups.split(",")))


def decide_both(policy: RbacPolicy, who: User, attrs: Attributes) -> bool:
    """The reference and the fast path, which must agree (decision and denial reason)."""
    reference = policy.explain(who, attrs)
    fast = PermissionCache(policy).decide(who, attrs)
    assert fast.allowed == reference.allowed, (who, attrs)
    if not fast.allowed:
        assert fast.reason == reference.reason
    else:
        assert fast.role == reference.role
    return fast.allowed


# -- rbac_test.go TestAuthorizer -----------------------------------------------------------

AUTHORIZER_CASES = [
    (
        policy_of(
            cluster_roles=[cluster_role("admin", rule("*", "*", "*", "*"))],
            bindings=[binding("ns1", "b", "ClusterRole", "admin", "User:admin", "Group:admins")],
        ),
        [
            (user("admin"), res("get", "Pods", "ns1")),
            (user("admin"), res("watch", "Pods", "ns1")),
            (user("admin", "group1"), res("watch", "Foobar", "ns1")),
            (user("joe", "admins"), res("watch", "Foobar", "ns1")),
            (user("joe", "group1,admins"), res("watch", "Foobar", "ns1")),
        ],
        [
            (user("admin"), res("GET", "Pods", "ns2")),
            (user("admin"), res("GET", "Nodes")),
            (user("admin", "admins"), res("GET", "Pods", "ns2")),
            (user("admin", "admins"), res("GET", "Nodes")),
        ],
    ),
    (  # non-resource URLs
        policy_of(
            cluster_roles=[
                cluster_role("non-resource-url-getter", rule("get", "", "", "/apis")),
                cluster_role("non-resource-url", rule("*", "", "", "/apis")),
                cluster_role("non-resource-url-prefix", rule("get", "", "", "/apis/*")),
            ],
            cluster_bindings=[
                cluster_binding("b1", "non-resource-url-getter", "User:foo", "Group:bar"),
                cluster_binding("b2", "non-resource-url", "User:admin", "Group:admin"),
                cluster_binding("b3", "non-resource-url-prefix", "User:prefixed", "Group:prefixed"),
            ],
        ),
        [
            (User("foo"), url("get", "/apis")),
            (User("", groups=("bar",)), url("get", "/apis")),
            (User("admin"), url("get", "/apis")),
            (User("", groups=("admin",)), url("get", "/apis")),
            (User("admin"), url("watch", "/apis")),
            (User("", groups=("admin",)), url("watch", "/apis")),
            (User("prefixed"), url("get", "/apis/v1")),
            (User("", groups=("prefixed",)), url("get", "/apis/v1")),
            (User("prefixed"), url("get", "/apis/v1/foobar")),
            (User("", groups=("prefixed",)), url("get", "/apis/v1/foorbar")),
        ],
        [
            (User("foo"), url("watch", "/apis")),
            (User("", groups=("bar",)), url("watch", "/apis")),
            (User("foo"), url("get", "/api/v1")),
            (User("", groups=("bar",)), url("get", "/api/v1")),
            (User("admin"), url("get", "/api/v1")),
            (User("", groups=("admin",)), url("get", "/api/v1")),
            (User("prefixed"), url("get", "/api/v1")),
            (User("", groups=("prefixed",)), url("get", "/api/v1")),
        ],
    ),
    (  # subresource resolution: "pods" does not grant "pods/status"
        policy_of(
            cluster_roles=[cluster_role("admin", rule("*", "*", "pods", "*"))],
            bindings=[binding("ns1", "b", "ClusterRole", "admin", "User:admin", "Group:admins")],
        ),
        [(user("admin"), res("get", "pods", "ns1"))],
        [(user("admin"), res("get", "pods", "ns1", sub="status"))],
    ),
    (  # subresource resolution: "pods/status" and "*/scale"
        policy_of(
            cluster_roles=[
                cluster_role(
                    "admin", rule("*", "*", "pods/status", "*"), rule("*", "*", "*/scale", "*")
                )
            ],
            bindings=[binding("ns1", "b", "ClusterRole", "admin", "User:admin", "Group:admins")],
        ),
        [
            (user("admin"), res("get", "pods", "ns1", sub="status")),
            (user("admin"), res("get", "pods", "ns1", sub="scale")),
            (user("admin"), res("get", "deployments", "ns1", sub="scale")),
            (user("admin"), res("get", "anything", "ns1", sub="scale")),
        ],
        [(user("admin"), res("get", "pods", "ns1"))],
    ),
]


@pytest.mark.parametrize(("policy", "should_pass", "should_fail"), AUTHORIZER_CASES)
def test_kubernetes_authorizer_cases(
    policy: RbacPolicy,
    should_pass: list[tuple[User, Attributes]],
    should_fail: list[tuple[User, Attributes]],
) -> None:
    for who, attrs in should_pass:
        assert decide_both(policy, who, attrs), (who, attrs)
    for who, attrs in should_fail:
        assert not decide_both(policy, who, attrs), (who, attrs)


# -- rbac_test.go TestRuleMatches ----------------------------------------------------------

R = "resource"
RULE_CASES: list[tuple[str, PolicyRule, list[tuple[Attributes, bool]]]] = [
    (
        "star verb, exact match other",
        PolicyRule(("*",), ("group1",), ("resource1",)),
        [
            (res("verb1", "resource1", group="group1"), True),
            (res("verb1", "resource1", group="group2"), False),
            (res("verb1", "resource2", group="group1"), False),
            (res("verb1", "resource2", group="group2"), False),
            (res("verb2", "resource1", group="group1"), True),
            (res("verb2", "resource1", group="group2"), False),
            (res("verb2", "resource2", group="group1"), False),
            (res("verb2", "resource2", group="group2"), False),
        ],
    ),
    (
        "star group, exact match other",
        PolicyRule(("verb1",), ("*",), ("resource1",)),
        [
            (res("verb1", "resource1", group="group1"), True),
            (res("verb1", "resource1", group="group2"), True),
            (res("verb1", "resource2", group="group1"), False),
            (res("verb1", "resource2", group="group2"), False),
            (res("verb2", "resource1", group="group1"), False),
            (res("verb2", "resource1", group="group2"), False),
            (res("verb2", "resource2", group="group1"), False),
            (res("verb2", "resource2", group="group2"), False),
        ],
    ),
    (
        "star resource, exact match other",
        PolicyRule(("verb1",), ("group1",), ("*",)),
        [
            (res("verb1", "resource1", group="group1"), True),
            (res("verb1", "resource1", group="group2"), False),
            (res("verb1", "resource2", group="group1"), True),
            (res("verb1", "resource2", group="group2"), False),
            (res("verb2", "resource1", group="group1"), False),
            (res("verb2", "resource1", group="group2"), False),
            (res("verb2", "resource2", group="group1"), False),
            (res("verb2", "resource2", group="group2"), False),
        ],
    ),
    (
        "tuple expansion",
        PolicyRule(("verb1", "verb2"), ("group1", "group2"), ("resource1", "resource2")),
        [
            (res(v, r, group=g), True)
            for v in ("verb1", "verb2")
            for g in ("group1", "group2")
            for r in ("resource1", "resource2")
        ],
    ),
    (
        "subresource expansion",
        PolicyRule(("*",), ("*",), ("resource1/subresource1",)),
        [
            (res("verb1", "resource1", group="group1", sub="subresource1"), True),
            (res("verb1", "resource1", group="group2", sub="subresource2"), False),
            (res("verb1", "resource2", group="group1", sub="subresource1"), False),
            (res("verb1", "resource2", group="group2", sub="subresource1"), False),
            (res("verb2", "resource1", group="group1", sub="subresource1"), True),
            (res("verb2", "resource1", group="group2", sub="subresource2"), False),
            (res("verb2", "resource2", group="group1", sub="subresource1"), False),
            (res("verb2", "resource2", group="group2", sub="subresource1"), False),
        ],
    ),
    (
        "star nonresource, exact match other",
        PolicyRule(("verb1",), non_resource_urls=("*",)),
        [
            (url(v, p), v == "verb1")
            for v in ("verb1", "verb2")
            for p in ("/foo", "/foo/bar", "/foo/baz", "/foo/bar/one", "/foo/baz/one")
        ],
    ),
    (
        "star nonresource subpath",
        PolicyRule(("verb1",), non_resource_urls=("/foo/*",)),
        [
            (url("verb1", "/foo"), False),
            (url("verb1", "/foo/bar"), True),
            (url("verb1", "/foo/baz"), True),
            (url("verb1", "/foo/bar/one"), True),
            (url("verb1", "/foo/baz/one"), True),
            (url("verb1", "/notfoo"), False),
            (url("verb1", "/notfoo/bar"), False),
            (url("verb1", "/notfoo/baz"), False),
            (url("verb1", "/notfoo/bar/one"), False),
            (url("verb1", "/notfoo/baz/one"), False),
        ],
    ),
    (
        "star verb, exact nonresource",
        PolicyRule(("*",), non_resource_urls=("/foo", "/foo/bar/one")),
        [
            (url(v, p), p in ("/foo", "/foo/bar/one"))
            for v in ("verb1", "verb2")
            for p in ("/foo", "/foo/bar", "/foo/baz", "/foo/bar/one", "/foo/baz/one")
        ],
    ),
    # beyond Kubernetes' table: resourceNames, "*/scale" only for "scale", trailing "**"
    (
        "resource names",
        PolicyRule(("get",), ("",), ("pods",), ("web-1",)),
        [
            (res("get", "pods", name="web-1"), True),
            (res("get", "pods", name="web-2"), False),
            (res("get", "pods"), False),  # a LIST: no name, and the rule names some
        ],
    ),
    (
        "star slash subresource",
        PolicyRule(("get",), ("*",), ("*/scale",)),
        [
            (res("get", "deployments", group="apps", sub="scale"), True),
            (res("get", "deployments", group="apps", sub="status"), False),
            (res("get", "deployments", group="apps"), False),
            (res("get", "*", sub="scale"), True),
            (res("get", "x", sub="xscale"), False),
        ],
    ),
    (
        "trailing stars all trimmed",
        PolicyRule(("get",), non_resource_urls=("/logs**",)),
        [(url("get", "/logs"), True), (url("get", "/logsx/y"), True), (url("get", "/log"), False)],
    ),
]


@pytest.mark.parametrize(
    ("name", "policy_rule", "cases"), RULE_CASES, ids=[c[0] for c in RULE_CASES]
)
def test_kubernetes_rule_matches(
    name: str, policy_rule: PolicyRule, cases: list[tuple[Attributes, bool]]
) -> None:
    index = RuleIndex([(("ClusterRole", "", "r"), [policy_rule])])
    for attrs, expected in cases:
        assert rule_allows(attrs, policy_rule) is expected, (name, attrs)
        if attrs.resource_request:
            got = index.allows(
                attrs.verb, attrs.api_group, attrs.resource, attrs.subresource, attrs.name
            )
        else:
            got = index.allows_path(attrs.verb, attrs.path)
        assert (got is not None) is expected, (name, attrs)


# -- rule_test.go TestDefaultRuleResolver, TestAppliesTo -----------------------------------

READ_PODS = rule("GET,WATCH", "v1", "pods")
READ_SERVICES = rule("GET,WATCH", "v1", "services")
WRITE_NODES = rule("PUT,CREATE,UPDATE", "v1", "nodes")
ADMIN = rule("*", "*", "*")
STATIC_ROLES_1 = policy_of(
    roles=[role("namespace1", "readthings", READ_PODS, READ_SERVICES)],
    cluster_roles=[cluster_role("cluster-admin", ADMIN), cluster_role("write-nodes", WRITE_NODES)],
    bindings=[binding("namespace1", "rb", "Role", "readthings", "User:foobar", "Group:group1")],
    cluster_bindings=[cluster_binding("crb", "cluster-admin", "User:admin", "Group:admin")],
)


@pytest.mark.parametrize(
    ("who", "namespace", "effective"),
    [
        (User("foobar"), "namespace1", [READ_PODS, READ_SERVICES]),
        (User("foobar"), "namespace2", []),
        (User("foobar", groups=("admin",)), "", [ADMIN]),
        (User(""), "", []),
    ],
)
def test_kubernetes_default_rule_resolver(
    who: User, namespace: str, effective: list[dict[str, Any]]
) -> None:
    found = [r for _, _, r, _ in STATIC_ROLES_1.visit_rules_for(who, namespace)]
    assert sorted(found, key=repr) == sorted((PolicyRule.from_json(r) for r in effective), key=repr)


def _subjects(*items: tuple[str, str, str]) -> list[Subject]:
    return [Subject(kind, name, namespace) for kind, name, namespace in items]


@pytest.mark.parametrize(
    ("items", "who", "namespace", "expected"),
    [
        ([("User", "foobar", "")], User("foobar"), "", 0),
        ([("User", "barfoo", ""), ("User", "foobar", "")], User("foobar"), "", 1),
        ([("User", "barfoo", ""), ("User", "foobar", "")], User("zimzam"), "", None),
        (
            [("User", "barfoo", ""), ("Group", "foobar", "")],
            User("zimzam", groups=("foobar",)),
            "",
            1,
        ),
        (
            [("User", "barfoo", ""), ("Group", "foobar", "")],
            User("zimzam", groups=("foobar",)),
            "namespace1",
            1,
        ),
        (
            [
                ("User", "barfoo", ""),
                ("Group", "foobar", ""),
                ("ServiceAccount", "default", "kube-system"),
            ],
            User("system:serviceaccount:kube-system:default"),
            "default",
            2,
        ),
        ([("User", "*", "")], User("foobar"), "default", None),
        (
            [("Group", "system:authenticated", ""), ("Group", "system:unauthenticated", "")],
            User("foobar", groups=("system:authenticated",)),
            "default",
            0,
        ),
        (
            [("Group", "system:authenticated", ""), ("Group", "system:unauthenticated", "")],
            User("system:anonymous", groups=("system:unauthenticated",)),
            "default",
            1,
        ),
        # beyond Kubernetes' table: a ServiceAccount without a namespace is the binding's own
        (
            [("ServiceAccount", "deployer", "")],
            User("system:serviceaccount:web:deployer"),
            "web",
            0,
        ),
        (
            [("ServiceAccount", "deployer", "")],
            User("system:serviceaccount:web:deployer"),
            "",
            None,
        ),
        (
            [("ServiceAccount", "deployer", "")],
            User("system:serviceaccount:db:deployer"),
            "web",
            None,
        ),
        ([("Robot", "foobar", "")], User("foobar"), "", None),
    ],
)
def test_kubernetes_applies_to(
    items: list[tuple[str, str, str]], who: User, namespace: str, expected: int | None
) -> None:
    assert applies_to(who, _subjects(*items), namespace) == expected


# -- every shape issue 33 names ------------------------------------------------------------

VIEW_PODS = rule("get,list,watch", "", "pods")
SHAPES = policy_of(
    roles=[
        role("web", "reader", VIEW_PODS),
        role("web", "one-pod", rule("get,watch,list", "", "pods", names="web-1")),
        role("db", "reader", VIEW_PODS),
    ],
    cluster_roles=[
        cluster_role("pod-viewer", VIEW_PODS),
        cluster_role("log-reader", rule("get", "", "pods/log")),
        cluster_role("scaler", rule("get,update", "*", "*/scale")),
        cluster_role("ns-getter", rule("get", "", "namespaces")),
        cluster_role("health", rule("get", "", "", "/healthz,/metrics/*")),
    ],
    bindings=[
        binding("web", "alice-reads", "Role", "reader", "User:alice"),
        binding("web", "bob-one", "Role", "one-pod", "User:bob"),
        binding("db", "viewers", "ClusterRole", "pod-viewer", "Group:db-team"),
        binding("web", "sa-local", "ClusterRole", "log-reader", "ServiceAccount:deployer"),
        binding("web", "all-sas", "ClusterRole", "scaler", "Group:system:serviceaccounts:web"),
        binding("web", "ns", "ClusterRole", "ns-getter", "User:alice"),
    ],
    cluster_bindings=[
        cluster_binding("everyone-health", "health", "Group:system:authenticated"),
        cluster_binding("ops", "pod-viewer", "ServiceAccount:ops/watcher"),
        cluster_binding("no-ns-sa", "pod-viewer", "ServiceAccount:nobody"),
    ],
)
ALICE = User("alice", groups=("system:authenticated",))
BOB = User("bob", groups=("system:authenticated",))
CAROL = User("carol", groups=("db-team", "system:authenticated"))
DEPLOYER = User(
    "system:serviceaccount:web:deployer",
    groups=("system:serviceaccounts", "system:serviceaccounts:web", "system:authenticated"),
)
WATCHER = User("system:serviceaccount:ops:watcher", groups=("system:serviceaccounts",))


@pytest.mark.parametrize(
    ("who", "attrs", "allowed"),
    [
        (ALICE, res("list", "pods", "web"), True),
        (ALICE, res("watch", "pods", "web"), True),
        (ALICE, res("list", "pods", "db"), False),
        (ALICE, res("list", "pods"), False),  # cluster-wide: a 403, no partial list
        (ALICE, res("get", "pods", "web", sub="log", name="web-1"), False),  # pods != pods/log
        (ALICE, res("delete", "pods", "web", name="web-1"), False),
        (ALICE, res("get", "namespaces", "web", name="web"), True),  # a Namespace is in itself
        (ALICE, res("get", "namespaces", "db", name="db"), False),
        (ALICE, res("list", "namespaces"), False),
        (BOB, res("get", "pods", "web", name="web-1"), True),
        (BOB, res("get", "pods", "web", name="web-2"), False),
        (BOB, res("list", "pods", "web"), False),
        (BOB, res("watch", "pods", "web", name="web-1"), True),  # kubectl get pod web-1 -w
        (CAROL, res("list", "pods", "db"), True),  # RoleBinding to a ClusterRole: that namespace
        (CAROL, res("list", "pods", "web"), False),
        (CAROL, res("list", "pods"), False),
        (DEPLOYER, res("get", "pods", "web", sub="log", name="x"), True),  # SA without namespace
        (DEPLOYER, res("list", "pods", "web"), False),
        (DEPLOYER, res("update", "deployments", "web", group="apps", sub="scale", name="d"), True),
        (DEPLOYER, res("update", "deployments", "web", group="apps", name="d"), False),
        (DEPLOYER, res("get", "statefulsets", "db", group="apps", sub="scale", name="s"), False),
        (WATCHER, res("list", "pods"), True),
        (WATCHER, res("watch", "pods", "kube-system"), True),
        (User("system:serviceaccount:default:nobody"), res("list", "pods"), False),
        (ALICE, url("get", "/healthz"), True),
        (ALICE, url("get", "/metrics/cadvisor"), True),
        (ALICE, url("get", "/metrics"), False),
        (ALICE, url("post", "/healthz"), False),
        (User("anyone"), url("get", "/healthz"), False),  # not in system:authenticated
        (User("root", groups=("system:masters",)), res("delete", "nodes", name="n1"), True),
        (User("root", groups=("system:masters",)), url("post", "/anything"), True),
    ],
)
def test_rbac_shapes(who: User, attrs: Attributes, allowed: bool) -> None:
    if who.is_privileged:  # the privileged-group authorizer, before RBAC
        assert PermissionCache(SHAPES).decide(who, attrs).allowed is allowed
        assert not SHAPES.explain(who, attrs).allowed
        return
    assert decide_both(SHAPES, who, attrs) is allowed


def test_allow_reason_names_the_binding_and_subject() -> None:
    assert SHAPES.explain(CAROL, res("list", "pods", "db")).reason == (
        'RBAC: allowed by RoleBinding "viewers/db" of ClusterRole "pod-viewer" to Group "db-team"'
    )
    assert SHAPES.explain(DEPLOYER, res("get", "pods", "web", sub="log")).reason == (
        'RBAC: allowed by RoleBinding "sa-local/web" of ClusterRole "log-reader" to '
        'ServiceAccount "deployer/web"'
    )
    assert SHAPES.explain(WATCHER, res("list", "pods")).reason == (
        'RBAC: allowed by ClusterRoleBinding "ops" of ClusterRole "pod-viewer" to '
        'ServiceAccount "watcher/ops"'
    )
    fast = PermissionCache(SHAPES).decide(CAROL, res("list", "pods", "db"))
    assert fast.role == ("ClusterRole", "", "pod-viewer")


# -- the 403, word for word ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "attrs", "reason", "message"),
    [
        (
            "alice",
            res("list", "pods", "ns-1"),
            "",
            (
                'pods is forbidden: User "alice" cannot list resource "pods" in API group "" '
                'in the namespace "ns-1"'
            ),
        ),
        (
            "alice",
            res("list", "pods"),
            "",
            (
                'pods is forbidden: User "alice" cannot list resource "pods" in API group "" '
                "at the cluster scope"
            ),
        ),
        (
            "alice",
            res("get", "pods", "web", sub="log", name="web-1"),
            "",
            (
                'pods "web-1" is forbidden: User "alice" cannot get resource "pods/log" in API group "" '
                'in the namespace "web"'
            ),
        ),
        (
            "system:serviceaccount:web:deployer",
            res("watch", "deployments", "web", group="apps", name="api"),
            "",
            (
                'deployments.apps "api" is forbidden: User "system:serviceaccount:web:deployer" cannot '
                'watch resource "deployments" in API group "apps" in the namespace "web"'
            ),
        ),
        (
            "alice",
            res("get", "namespaces", "kube-system", name="kube-system"),
            "",
            (
                'namespaces "kube-system" is forbidden: User "alice" cannot get resource "namespaces" '
                'in API group "" in the namespace "kube-system"'
            ),
        ),
        (
            "alice",
            url("get", "/metrics"),
            "",
            'forbidden: User "alice" cannot get path "/metrics"',
        ),
        (
            "alice",
            res("list", "secrets", "web"),
            'RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found',
            (
                'secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" '
                'in the namespace "web": RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found'
            ),
        ),
        (  # the sanitizer escapes what could read as HTML in the user-made part only
            "<b>&",
            res("list", "pods", "web"),
            "RBAC: <x>",
            (
                'pods is forbidden: User "&lt;b&gt;&amp;" cannot list resource "pods" in API group "" '
                'in the namespace "web": RBAC: <x>'
            ),
        ),
        (  # Go's %q: escapes for what is not printable, printable Unicode kept
            'é\x1b"\u200b',
            res("get", "pods", "web", name="a\tb"),
            "",
            (
                'pods "a\\tb" is forbidden: User "é\\x1b\\"\\u200b" cannot get resource "pods" '
                'in API group "" in the namespace "web"'
            ),
        ),
    ],
)
def test_forbidden_message(who: str, attrs: Attributes, reason: str, message: str) -> None:
    assert forbidden_message(who, attrs, reason) == message


def test_forbidden_status_body() -> None:
    body = forbidden_status("alice", res("get", "deployments", "web", group="apps", name="api"))
    assert list(body) == [
        "kind",
        "apiVersion",
        "metadata",
        "status",
        "message",
        "reason",
        "details",
        "code",
    ]
    assert body["details"] == {"name": "api", "group": "apps", "kind": "deployments"}
    assert (body["code"], body["reason"], body["status"]) == (403, "Forbidden", "Failure")
    assert forbidden_status("alice", url("get", "/x"))["details"] == {}


def test_go_quote_matches_strconv_quote() -> None:
    assert go_quote("plain") == '"plain"'
    assert go_quote('a"b\\c') == '"a\\"b\\\\c"'
    assert go_quote("\x00\x7f\n") == '"\\x00\\x7f\\n"'
    assert go_quote("\u2028日本") == '"\\u2028日本"'
    assert go_quote("\U000e0001") == '"\\U000e0001"'


def test_resolution_errors_in_a_denial() -> None:
    policy = policy_of(
        cluster_roles=[cluster_role("pod-viewer", VIEW_PODS)],
        cluster_bindings=[
            cluster_binding("b-gone", "gone", "User:alice"),
            cluster_binding("a-gone-too", "gone", "Group:devs"),
            cluster_binding("c-other", "not-here", "User:alice"),
            cluster_binding("d-not-alice", "missing-for-bob", "User:bob"),
        ],
        bindings=[
            binding("web", "local", "Role", "absent", "User:alice"),
            binding("web", "weird", "Kind", "x", "User:alice"),
            binding("db", "elsewhere", "Role", "absent-db", "User:alice"),
        ],
    )
    alice = User("alice", groups=("devs",))
    # one distinct error: bare (the two bindings to "gone" say the same thing once)
    only = policy_of(
        cluster_bindings=[
            cluster_binding("x", "gone", "User:alice"),
            cluster_binding("y", "gone", "User:alice"),
        ]
    )
    assert only.explain(alice, res("list", "pods")).reason == (
        'RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found'
    )
    assert PermissionCache(only).decide(alice, res("list", "pods")).reason == (
        'RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found'
    )
    # several: in brackets, ClusterRoleBindings first, each by name; other namespaces' not
    expected = (
        'RBAC: [clusterrole.rbac.authorization.k8s.io "gone" not found, '
        'clusterrole.rbac.authorization.k8s.io "not-here" not found, '
        'role.rbac.authorization.k8s.io "absent" not found, '
        'unsupported role reference kind: "Kind"]'
    )
    assert policy.explain(alice, res("list", "pods", "web")).reason == expected
    assert PermissionCache(policy).decide(alice, res("list", "pods", "web")).reason == expected
    # an allowed request carries no error
    assert (
        policy_of(
            cluster_roles=[cluster_role("v", VIEW_PODS)],
            cluster_bindings=[
                cluster_binding("a", "v", "User:alice"),
                cluster_binding("b", "gone", "User:alice"),
            ],
        )
        .explain(alice, res("list", "pods"))
        .allowed
    )


def test_aggregate_message_as_utilerrors() -> None:
    assert aggregate_message(["a"]) == "a"
    assert aggregate_message(["a", "a"]) == "a"
    assert aggregate_message(["a", "b", "a"]) == "[a, b]"
    assert rbac_reason([]) == ""


# -- permission sets: built once, shared, rebuilt when RBAC changes -------------------------


def test_a_set_is_reused_until_rbac_changes_and_then_rebuilt() -> None:
    policy = policy_of(
        roles=[role("web", "reader", VIEW_PODS)],
        bindings=[binding("web", "alice", "Role", "reader", "User:alice")],
    )
    cache = PermissionCache(policy)
    alice = User("alice")
    assert cache.decide(alice, res("list", "pods", "web")).allowed
    first = cache.permissions(alice)
    for _ in range(100):
        assert cache.decide(alice, res("list", "pods", "web")).allowed
    assert cache.permissions(alice) is first
    assert cache.builds == 1

    # an update that changes nothing RBAC reads is not a change
    version = policy.version
    relabelled = binding("web", "alice", "Role", "reader", "User:alice")
    relabelled["metadata"]["labels"] = {"x": "y"}
    relabelled["metadata"]["resourceVersion"] = "99"
    assert not policy.put(ROLE_BINDINGS, relabelled)
    assert policy.version == version
    assert cache.permissions(alice) is first

    # revocation: the binding goes, the next check is a denial
    assert policy.delete(ROLE_BINDINGS, "web", "alice")
    assert policy.version == version + 1
    assert not cache.decide(alice, res("list", "pods", "web")).allowed
    # a grant through a role's new rule is honoured at once
    assert policy.put(ROLE_BINDINGS, binding("web", "alice", "Role", "reader", "User:alice"))
    assert not cache.decide(alice, res("list", "secrets", "web")).allowed
    assert policy.put(ROLES, role("web", "reader", VIEW_PODS, rule("list", "", "secrets")))
    assert cache.decide(alice, res("list", "secrets", "web")).allowed
    # the role goes: a denial that names it
    assert policy.delete(ROLES, "web", "reader")
    denial = cache.decide(alice, res("list", "pods", "web"))
    assert (denial.allowed, denial.reason) == (
        False,
        'RBAC: role.rbac.authorization.k8s.io "reader" not found',
    )


def test_users_bound_alike_share_one_set() -> None:
    policy = policy_of(
        cluster_roles=[cluster_role("pod-viewer", VIEW_PODS)],
        bindings=[
            binding(f"ns-{i}", "devs", "ClusterRole", "pod-viewer", "Group:devs") for i in range(50)
        ],
    )
    cache = PermissionCache(policy)
    sets = {id(cache.permissions(User(f"user-{i}", groups=("devs",)))) for i in range(200)}
    assert len(sets) == 1
    assert "users=200 distinct=1" in repr(cache)
    assert cache.permissions(User("x", groups=("devs",))).namespaces_with(
        "list", "", "pods"
    ) == frozenset(f"ns-{i}" for i in range(50))


def test_the_cache_is_bounded() -> None:
    cache = PermissionCache(policy_of(), max_users=10)
    for i in range(100):
        cache.decide(User(f"u{i}"), res("get", "pods", "web"))
    assert "users=10 " in repr(cache)


def test_relist_replaces_and_removes() -> None:
    policy = policy_of(
        cluster_roles=[cluster_role("v", VIEW_PODS)],
        cluster_bindings=[
            cluster_binding("a", "v", "User:alice"),
            cluster_binding("b", "v", "User:bob"),
        ],
    )
    cache = PermissionCache(policy)
    assert cache.decide(User("bob"), res("list", "pods")).allowed
    assert policy.replace(CLUSTER_ROLE_BINDINGS, [cluster_binding("a", "v", "User:alice")])
    assert not cache.decide(User("bob"), res("list", "pods")).allowed
    assert cache.decide(User("alice"), res("list", "pods")).allowed
    assert not policy.replace(CLUSTER_ROLE_BINDINGS, [cluster_binding("a", "v", "User:alice")])


def test_a_binding_that_changes_subjects_is_reindexed() -> None:
    policy = policy_of(
        cluster_roles=[cluster_role("v", VIEW_PODS)],
        bindings=[binding("web", "b", "ClusterRole", "v", "User:alice", "Group:g")],
    )
    cache = PermissionCache(policy)
    assert cache.decide(User("alice"), res("list", "pods", "web")).allowed
    policy.put(ROLE_BINDINGS, binding("web", "b", "ClusterRole", "v", "User:bob"))
    assert not cache.decide(User("alice"), res("list", "pods", "web")).allowed
    assert not cache.decide(User("x", groups=("g",)), res("list", "pods", "web")).allowed
    assert cache.decide(User("bob"), res("list", "pods", "web")).allowed
    assert "bindings=1 " in repr(policy)


# -- hostile input -------------------------------------------------------------------------


def test_a_rule_too_large_to_expand_is_matched_directly() -> None:
    many = [f"r{i}" for i in range(EXPANSION_LIMIT + 1)]
    big = {"verbs": ["get"], "apiGroups": [""], "resources": many, "nonResourceURLs": []}
    urls = {
        "verbs": ["get"],
        "nonResourceURLs": [f"/u{i}" for i in range(EXPANSION_LIMIT)] + ["/x/*"],
    }
    policy = policy_of(
        cluster_roles=[cluster_role("big", big, urls)],
        cluster_bindings=[cluster_binding("b", "big", "User:alice")],
    )
    cache = PermissionCache(policy)
    alice = User("alice")
    assert cache.decide(alice, res("get", "r4096")).allowed
    assert not cache.decide(alice, res("list", "r4096")).allowed
    assert cache.decide(alice, url("get", "/x/y")).allowed
    assert not cache.decide(alice, url("get", "/y")).allowed
    assert len(cache.permissions(alice).cluster) == 2  # two rules, no keys


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"metadata": "x", "rules": "all"},
        {"metadata": {"name": 5}, "rules": [None, 5, {"verbs": "*", "apiGroups": {"*": 1}}]},
        {"metadata": {"name": "r"}, "rules": [{"verbs": [None, 5, "get"], "resources": ["*"]}]},
    ],
)
def test_malformed_objects_grant_nothing_and_do_not_crash(obj: dict[str, Any]) -> None:
    policy = RbacPolicy()
    policy.put(CLUSTER_ROLES, obj)
    policy.put(ROLES, obj)
    policy.put(CLUSTER_ROLE_BINDINGS, {**obj, "subjects": "everyone", "roleRef": [1]})
    policy.put(ROLE_BINDINGS, {**obj, "subjects": [None, {"kind": "User"}]})
    policy.put(
        CLUSTER_ROLE_BINDINGS,
        {
            "metadata": {"name": "b"},
            "roleRef": {"kind": "ClusterRole", "name": "r"},
            "subjects": [{"kind": "User", "name": "alice"}],
        },
    )
    alice = User("alice")
    for attrs in (res("get", "pods"), res("get", "pods", "web"), url("get", "/")):
        assert not decide_both(policy, alice, attrs)


def test_a_rolebinding_without_namespace_is_ignored() -> None:
    policy = RbacPolicy()
    policy.put(CLUSTER_ROLES, cluster_role("v", VIEW_PODS))
    assert not policy.put(ROLE_BINDINGS, {**cluster_binding("b", "v", "User:alice")})
    assert not PermissionCache(policy).decide(User("alice"), res("list", "pods")).allowed


# -- the fast path equals the reference, for any policy (Hypothesis) ------------------------

WORDS = st.sampled_from(["a", "b", "*"])
_verbs = st.lists(st.sampled_from(["get", "list", "*"]), max_size=2)
_groups = st.lists(st.sampled_from(["", "apps", "*"]), max_size=2)
_resources = st.lists(
    st.sampled_from(["pods", "pods/log", "*", "*/scale", "deployments"]), max_size=2
)
_names = st.lists(st.sampled_from(["", "n1", "n2"]), max_size=2)
_urls = st.lists(st.sampled_from(["/a", "/a/*", "*", "/a*"]), max_size=2)
_rules = st.builds(
    lambda v, g, r, n, u: {
        "verbs": v,
        "apiGroups": g,
        "resources": r,
        "resourceNames": n,
        "nonResourceURLs": u,
    },
    _verbs,
    _groups,
    _resources,
    _names,
    _urls,
)
_subject = st.one_of(
    st.builds(
        lambda n: f"User:{n}", st.sampled_from(["alice", "bob", "system:serviceaccount:ns1:sa"])
    ),
    st.builds(lambda n: f"Group:{n}", st.sampled_from(["g1", "g2", "system:serviceaccounts:ns1"])),
    st.builds(lambda n: f"ServiceAccount:{n}", st.sampled_from(["sa", "ns1/sa", "ns2/sa"])),
)
_role_names = st.sampled_from(["r1", "r2", "r3"])


@st.composite
def _policies(draw: st.DrawFn) -> RbacPolicy:
    namespaces = st.sampled_from(["ns1", "ns2"])
    return policy_of(
        roles=[
            role(draw(namespaces), draw(_role_names), *draw(st.lists(_rules, max_size=3)))
            for _ in range(draw(st.integers(0, 3)))
        ],
        cluster_roles=[
            cluster_role(draw(_role_names), *draw(st.lists(_rules, max_size=3)))
            for _ in range(draw(st.integers(0, 3)))
        ],
        bindings=[
            binding(
                draw(namespaces),
                f"rb{i}",
                draw(st.sampled_from(["Role", "ClusterRole", "Nope"])),
                draw(_role_names),
                *draw(st.lists(_subject, max_size=3)),
            )
            for i in range(draw(st.integers(0, 4)))
        ],
        cluster_bindings=[
            cluster_binding(f"crb{i}", draw(_role_names), *draw(st.lists(_subject, max_size=3)))
            for i in range(draw(st.integers(0, 3)))
        ],
    )


_users = st.builds(
    User,
    st.sampled_from(
        ["alice", "bob", "system:serviceaccount:ns1:sa", "system:serviceaccount:ns2:sa"]
    ),
    st.just(""),
    st.lists(st.sampled_from(["g1", "g2", "system:serviceaccounts:ns1"]), max_size=2).map(tuple),
)
_requests = st.one_of(
    st.builds(
        lambda v, g, r, s, n, ns: res(v, r, ns, group=g, sub=s, name=n),
        st.sampled_from(["get", "list", "watch"]),
        st.sampled_from(["", "apps"]),
        st.sampled_from(["pods", "deployments", "*"]),
        st.sampled_from(["", "log", "scale"]),
        st.sampled_from(["", "n1", "n2"]),
        st.sampled_from(["", "ns1", "ns2"]),
    ),
    st.builds(url, st.sampled_from(["get", "post"]), st.sampled_from(["/a", "/a/b", "/ab", "/b"])),
)


@given(_policies(), st.lists(st.tuples(_users, _requests), min_size=1, max_size=10))
def test_permission_sets_agree_with_the_reference(
    policy: RbacPolicy, checks: list[tuple[User, Attributes]]
) -> None:
    cache = PermissionCache(policy)
    for who, attrs in checks:
        reference = policy.explain(who, attrs)
        fast = cache.decide(who, attrs)
        assert (fast.allowed, fast.reason if not fast.allowed else "") == (
            reference.allowed,
            reference.reason if not reference.allowed else "",
        )


@given(_rules, _requests)
def test_an_index_of_one_rule_is_rule_allows(raw: dict[str, Any], attrs: Attributes) -> None:
    policy_rule = PolicyRule.from_json(raw)
    index = RuleIndex([(("ClusterRole", "", "r"), [policy_rule])])
    if attrs.resource_request:
        got = index.allows(
            attrs.verb, attrs.api_group, attrs.resource, attrs.subresource, attrs.name
        )
    else:
        got = index.allows_path(attrs.verb, attrs.path)
    assert (got is not None) == rule_allows(attrs, policy_rule)


# -- User ----------------------------------------------------------------------------------


def test_user_is_a_frozen_value() -> None:
    a = User("alice", "u1", ["g1", "g2"], {"k": ["v"]})  # type: ignore[arg-type]
    b = User("alice", "u1", ("g1", "g2"), {"k": ("v",)})
    assert a == b and hash(a) == hash(b)
    assert a.groups == ("g1", "g2") and a.extra == {"k": ("v",)}
    with pytest.raises(AttributeError):
        a.name = "bob"  # type: ignore[misc]
    with pytest.raises(TypeError):
        a.extra["k"] = ("w",)  # type: ignore[index]
    assert User.from_user_info(a.to_user_info()) == a
    assert User("x").to_user_info() == {"username": "x"}


@pytest.mark.parametrize(
    "info",
    [
        None,
        [],
        {},
        {"username": ""},
        {"username": 5},
        {"username": "x" * 2000},
        {"username": "a", "groups": "g"},
        {"username": "a", "groups": [1]},
        {"username": "a", "groups": ["g"] * 2000},
        {"username": "a", "extra": []},
        {"username": "a", "extra": {"k": "v"}},
        {"username": "a", "extra": {f"k{i}": ["v"] * 10 for i in range(200)}},
        {"username": "a", "uid": 7},
    ],
)
def test_user_info_that_is_not_one_is_refused(info: Any) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - one message per field, the type is the contract
        User.from_user_info(info)


def test_service_account_users() -> None:
    sa = User("system:serviceaccount:web:deployer")
    assert sa.is_service_account and not User("alice").is_service_account
    assert User("x", groups=("system:masters",)).is_privileged


# -- request attributes: staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo_test.go


@pytest.mark.parametrize(
    ("method", "url", "verb", "group", "version", "namespace", "resource", "sub", "name"),
    [  # TestGetAPIRequestInfo's success cases
        ("GET", "/api/v1/namespaces", "list", "", "v1", "", "namespaces", "", ""),
        ("GET", "/api/v1/namespaces/other", "get", "", "v1", "other", "namespaces", "", "other"),
        ("GET", "/api/v1/namespaces/other/pods", "list", "", "v1", "other", "pods", "", ""),
        ("GET", "/api/v1/namespaces/other/pods/foo", "get", "", "v1", "other", "pods", "", "foo"),
        ("HEAD", "/api/v1/namespaces/other/pods/foo", "get", "", "v1", "other", "pods", "", "foo"),
        ("GET", "/api/v1/pods", "list", "", "v1", "", "pods", "", ""),
        ("HEAD", "/api/v1/pods", "list", "", "v1", "", "pods", "", ""),
        (
            "GET",
            "/api/v1/proxy/namespaces/other/pods/foo",
            "proxy",
            "",
            "v1",
            "other",
            "pods",
            "",
            "foo",
        ),
        (
            "GET",
            "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource",
            "proxy",
            "",
            "v1",
            "other",
            "pods",
            "",
            "foo",
        ),
        ("GET", "/api/v1/watch/pods", "watch", "", "v1", "", "pods", "", ""),
        ("GET", "/api/v1/pods?watch=true", "watch", "", "v1", "", "pods", "", ""),
        ("GET", "/api/v1/pods?watch=false", "list", "", "v1", "", "pods", "", ""),
        ("GET", "/api/v1/watch/namespaces/other/pods", "watch", "", "v1", "other", "pods", "", ""),
        (
            "GET",
            "/api/v1/namespaces/other/pods?watch=1",
            "watch",
            "",
            "v1",
            "other",
            "pods",
            "",
            "",
        ),
        ("GET", "/api/v1/namespaces/other/pods?watch=0", "list", "", "v1", "other", "pods", "", ""),
        (
            "GET",
            "/api/v1/namespaces/other/pods/foo/status",
            "get",
            "",
            "v1",
            "other",
            "pods",
            "status",
            "foo",
        ),
        (
            "GET",
            "/api/v1/namespaces/other/pods/foo/proxy/subpath",
            "get",
            "",
            "v1",
            "other",
            "pods",
            "proxy",
            "foo",
        ),
        (
            "PUT",
            "/api/v1/namespaces/other/finalize",
            "update",
            "",
            "v1",
            "other",
            "namespaces",
            "finalize",
            "other",
        ),
        (
            "PUT",
            "/api/v1/namespaces/other/status",
            "update",
            "",
            "v1",
            "other",
            "namespaces",
            "status",
            "other",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/other/pods/foo",
            "patch",
            "",
            "v1",
            "other",
            "pods",
            "",
            "foo",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/other/pods/foo",
            "delete",
            "",
            "v1",
            "other",
            "pods",
            "",
            "foo",
        ),
        ("POST", "/api/v1/namespaces/other/pods", "create", "", "v1", "other", "pods", "", ""),
        ("DELETE", "/api/v1/nodes", "deletecollection", "", "v1", "", "nodes", "", ""),
        ("DELETE", "/api/v1/namespaces", "deletecollection", "", "v1", "", "namespaces", "", ""),
        (
            "DELETE",
            "/api/v1/namespaces/other/pods",
            "deletecollection",
            "",
            "v1",
            "other",
            "pods",
            "",
            "",
        ),
        (
            "DELETE",
            "/apis/extensions/v1/namespaces/other/pods",
            "deletecollection",
            "extensions",
            "v1",
            "other",
            "pods",
            "",
            "",
        ),
        (
            "POST",
            "/apis/extensions/v1/namespaces/other/pods",
            "create",
            "extensions",
            "v1",
            "other",
            "pods",
            "",
            "",
        ),
        (
            "POST",
            "/apis/extensions/v1beta3/namespaces/other/pods",
            "create",
            "extensions",
            "v1beta3",
            "other",
            "pods",
            "",
            "",
        ),
        # TestSelectorParsing
        (
            "GET",
            "/apis/g/v/resource?fieldSelector=metadata.name=name1",
            "list",
            "g",
            "v",
            "",
            "resource",
            "",
            "name1",
        ),
        (
            "GET",
            "/apis/g/v/resource?watch=true&fieldSelector=metadata.name=name1",
            "watch",
            "g",
            "v",
            "",
            "resource",
            "",
            "name1",
        ),
        (
            "GET",
            "/apis/g/v/resource?fieldSelector=foo=bar&labelSelector=baz=qux",
            "list",
            "g",
            "v",
            "",
            "resource",
            "",
            "",
        ),
        (
            "GET",
            "/apis/g/v/resource?fieldSelector=metadata.name=name1,foo",
            "list",
            "g",
            "v",
            "",
            "resource",
            "",
            "",
        ),
        (
            "GET",
            "/apis/g/v/resource?fieldSelector=metadata.name=name1,foo&watch=true",
            "watch",
            "g",
            "v",
            "",
            "resource",
            "",
            "",
        ),
        (
            "GET",
            "/apis/g/v/resource?fieldSelector=metadata.name=foo&fieldSelector=metadata.name=bar",
            "list",
            "g",
            "v",
            "",
            "resource",
            "",
            "foo",
        ),
        (
            "GET",
            "/apis/g/v/watch/resource?fieldSelector=metadata.name=foo",
            "watch",
            "g",
            "v",
            "",
            "resource",
            "",
            "",
        ),
        (
            "GET",
            "/apis/g/v/watch/resource/name?fieldSelector=metadata.name=foo",
            "watch",
            "g",
            "v",
            "",
            "resource",
            "",
            "name",
        ),
        # beyond Kubernetes' tables: sorted terms, ==, escapes, invalid names, a bad limit
        (
            "GET",
            "/api/v1/pods?fieldSelector=metadata.name%3Db,metadata.name%3Da",
            "list",
            "",
            "v1",
            "",
            "pods",
            "",
            "a",
        ),
        (
            "GET",
            "/api/v1/pods?fieldSelector=metadata.name%3D%3Dx,spec.nodeName!%3Dn",
            "list",
            "",
            "v1",
            "",
            "pods",
            "",
            "x",
        ),
        (
            "GET",
            "/api/v1/pods?fieldSelector=metadata.name!%3Dx",
            "list",
            "",
            "v1",
            "",
            "pods",
            "",
            "",
        ),
        (
            "GET",
            "/api/v1/pods?fieldSelector=metadata.name%3D..",
            "list",
            "",
            "v1",
            "",
            "pods",
            "",
            "",
        ),
        (
            "GET",
            "/api/v1/pods?fieldSelector=metadata.name%3Dx&limit=abc",
            "list",
            "",
            "v1",
            "",
            "pods",
            "",
            "",
        ),
        (
            "GET",
            "/api/v1/pods?watch=&fieldSelector=metadata.name%3Dx",
            "watch",
            "",
            "v1",
            "",
            "pods",
            "",
            "x",
        ),
        ("GET", "/api/v1/pods?watch=FALSE", "list", "", "v1", "", "pods", "", ""),
    ],
)
def test_kubernetes_request_info(
    method: str,
    url: str,
    verb: str,
    group: str,
    version: str,
    namespace: str,
    resource: str,
    sub: str,
    name: str,
) -> None:
    import urllib.parse

    from kubemux._authz.attributes import request_attributes

    parsed = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)
    attrs = request_attributes(method, parsed.path, query)
    assert attrs.resource_request
    assert (attrs.verb, attrs.api_group, attrs.api_version, attrs.namespace) == (
        verb,
        group,
        version,
        namespace,
    )
    assert (attrs.resource, attrs.subresource, attrs.name) == (resource, sub, name)


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/api/version/",
        "/apis/group/version/",
        "/badprefix/version/resource",
        "/apis/version/resource",
    ],
)
def test_kubernetes_request_info_non_resource(path: str) -> None:
    from kubemux._authz.attributes import request_attributes

    attrs = request_attributes("POST", path)
    assert (attrs.resource_request, attrs.verb, attrs.path) == (False, "post", path)


def test_request_info_selectors_travel_with_list_verbs_only() -> None:
    from kubemux._authz.attributes import request_attributes

    listing = request_attributes(
        "GET", "/api/v1/pods", {"fieldSelector": "a=b", "labelSelector": "c"}
    )
    assert (listing.field_selector, listing.label_selector) == ("a=b", "c")
    one = request_attributes("GET", "/api/v1/namespaces/n/pods/p", {"fieldSelector": "a=b"})
    assert one.field_selector == ""
    with pytest.raises(ValueError, match="unable to determine kind"):
        request_attributes("GET", "/api/v1/watch")
