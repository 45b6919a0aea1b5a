"""The RBAC objects every cluster starts with (a subset of kube-apiserver's bootstrap policy).

``cluster-admin`` (bound to ``system:masters``); ``system:basic-user`` (self reviews),
``system:discovery`` and ``system:public-info-viewer`` (discovery, health, version) bound to
``system:authenticated``; and the aggregated ``admin``, ``edit``, ``view`` with the
``system:aggregate-to-*`` roles that feed them through their labels, so aggregation works
as in a real cluster (a ClusterRole labelled ``rbac.authorization.k8s.io/aggregate-to-view:
"true"`` adds its rules to ``view``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["bootstrap_policy"]

_RBAC = "rbac.authorization.k8s.io"
_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_NAMESPACED_READ = [
    {
        "apiGroups": [""],
        "resources": [
            "pods",
            "pods/log",
            "pods/status",
            "services",
            "endpoints",
            "configmaps",
            "persistentvolumeclaims",
            "replicationcontrollers",
            "serviceaccounts",
            "events",
        ],
        "verbs": _READ,
    },
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": _READ},
    {
        "apiGroups": ["apps"],
        "resources": [
            "deployments",
            "deployments/scale",
            "replicasets",
            "statefulsets",
            "daemonsets",
        ],
        "verbs": _READ,
    },
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": _READ},
    {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": _READ},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": _READ},
]
_NAMESPACED_WRITE = [
    {
        "apiGroups": [""],
        "resources": [
            "pods",
            "pods/exec",
            "pods/attach",
            "pods/portforward",
            "services",
            "configmaps",
            "secrets",
            "persistentvolumeclaims",
            "serviceaccounts",
        ],
        "verbs": _WRITE,
    },
    {"apiGroups": [""], "resources": ["secrets"], "verbs": _READ},
    {
        "apiGroups": ["apps"],
        "resources": [
            "deployments",
            "deployments/scale",
            "replicasets",
            "statefulsets",
            "daemonsets",
        ],
        "verbs": _WRITE,
    },
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": _WRITE},
]


def _role(
    name: str, rules: list[Any], labels: dict[str, str] | None = None, aggregate: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults", **(labels or {})},
    }
    role: dict[str, Any] = {"metadata": meta, "rules": rules}
    if aggregate is not None:
        role["aggregationRule"] = {
            "clusterRoleSelectors": [{"matchLabels": {f"{_RBAC}/aggregate-to-{aggregate}": "true"}}]
        }
    return role


def _binding(name: str, role: str, *groups: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
        "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": _RBAC, "kind": "Group", "name": g} for g in groups],
    }


def bootstrap_policy() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ClusterRoles, ClusterRoleBindings) a fresh cluster has."""
    to = f"{_RBAC}/aggregate-to-"
    roles = [
        _role(
            "cluster-admin",
            [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ],
        ),
        _role(
            "system:basic-user",
            [
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["authentication.k8s.io"],
                    "resources": ["selfsubjectreviews"],
                    "verbs": ["create"],
                },
            ],
        ),
        _role(
            "system:discovery",
            [
                {
                    "nonResourceURLs": [
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ],
                    "verbs": ["get"],
                },
            ],
        ),
        _role(
            "system:public-info-viewer",
            [
                {
                    "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                    "verbs": ["get"],
                },
            ],
        ),
        _role("admin", [], aggregate="admin"),
        _role("edit", [], {to + "admin": "true"}, aggregate="edit"),
        _role("view", [], {to + "edit": "true"}, aggregate="view"),
        _role(
            "system:aggregate-to-admin",
            [
                {
                    "apiGroups": [_RBAC],
                    "resources": ["roles", "rolebindings"],
                    "verbs": _READ + _WRITE,
                },
            ],
            {to + "admin": "true"},
        ),
        _role("system:aggregate-to-edit", _NAMESPACED_WRITE, {to + "edit": "true"}),
        _role("system:aggregate-to-view", _NAMESPACED_READ, {to + "view": "true"}),
    ]
    bindings = [
        _binding("cluster-admin", "cluster-admin", "system:masters"),
        _binding("system:basic-user", "system:basic-user", "system:authenticated"),
        _binding("system:discovery", "system:discovery", "system:authenticated"),
        _binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            "system:authenticated",
            "system:unauthenticated",
        ),
    ]
    return roles, bindings
