"""Many users, one cache (issue 33): what authorization costs per user.

Prints three tables, each with its peer measured in the same run:

1. a check with a built permission set (kubemux._authz.permissions) against the reference
   evaluation (kube-apiserver's algorithm: visit every ClusterRoleBinding, then the
   namespace's RoleBindings), for a namespace-limited user, a cluster-wide reader, a denial
   and ``system:masters``; target: <= 10 us p50 added per cached read;
2. building a set (first check of a user, or after an RBAC change) against the reference
   evaluation of one request;
3. the memory of 1,000 users x 10 contexts' permission sets (tracemalloc), and of the RBAC
   objects they are built from.

The policy is shaped like a shared cluster: Kubernetes' view/edit/admin-like ClusterRoles,
``--namespaces`` namespaces each with a team RoleBinding and a user's own, a few cluster-wide
readers, the ``system:authenticated`` bindings every cluster has.

    python bench/users.py [--users 1000] [--contexts 10] [--namespaces 200]

and the proxy's rows (bench/_users_proxy.py; ``--no-proxy`` skips them):

4. a cached 100-item LIST for a namespace-limited user through ``kubemux proxy
   --user-tokens`` against the same LIST in single-identity mode (target <= 1.3x);
5. what the user mode adds per cached read (target <= 10 us p50);
6. SubjectAccessReviews per 1,000 reads (target 0 where RBAC allows).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import table

from kubemux._authz.attributes import Attributes
from kubemux._authz.caches import ExpiringCache, token_key
from kubemux._authz.permissions import PermissionCache
from kubemux._authz.rbac import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    ROLE_BINDINGS,
    RbacPolicy,
)
from kubemux._authz.user import User

RBAC = "rbac.authorization.k8s.io"
CORE_READ = [
    "pods",
    "pods/log",
    "services",
    "endpoints",
    "configmaps",
    "persistentvolumeclaims",
    "replicationcontrollers",
    "serviceaccounts",
    "events",
    "limitranges",
    "resourcequotas",
]
APPS = ["deployments", "deployments/scale", "replicasets", "statefulsets", "daemonsets"]
BATCH = ["jobs", "cronjobs"]
NETWORKING = ["ingresses", "networkpolicies"]
READ = ["get", "list", "watch"]
WRITE = ["create", "delete", "deletecollection", "patch", "update"]


def _rules(verbs: list[str]) -> list[dict[str, Any]]:
    return [
        {"apiGroups": [""], "resources": CORE_READ, "verbs": verbs},
        {"apiGroups": ["apps"], "resources": APPS, "verbs": verbs},
        {"apiGroups": ["batch"], "resources": BATCH, "verbs": verbs},
        {"apiGroups": ["networking.k8s.io"], "resources": NETWORKING, "verbs": verbs},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": verbs},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": verbs},
    ]


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "rules": rules}


def _binding(ns: str, name: str, role: str, *subjects: tuple[str, str]) -> dict[str, Any]:
    meta = {"namespace": ns, "name": name} if ns else {"name": name}
    return {
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": RBAC, "kind": k, "name": n} for k, n in subjects],
    }


def shared_cluster(users: int, namespaces: int) -> RbacPolicy:
    """A policy like a shared cluster's (see the module docstring)."""
    policy = RbacPolicy()
    policy.replace(
        CLUSTER_ROLES,
        [
            _cluster_role("view", _rules(READ)),
            _cluster_role(
                "edit",
                [
                    *_rules(READ + WRITE),
                    {
                        "apiGroups": [""],
                        "resources": ["secrets", "pods/exec", "pods/attach"],
                        "verbs": READ + WRITE,
                    },
                ],
            ),
            _cluster_role(
                "admin",
                [
                    *_rules(READ + WRITE),
                    {
                        "apiGroups": [RBAC],
                        "resources": ["roles", "rolebindings"],
                        "verbs": READ + WRITE,
                    },
                ],
            ),
            _cluster_role(
                "system:basic-user",
                [
                    {
                        "apiGroups": ["authorization.k8s.io"],
                        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                        "verbs": ["create"],
                    }
                ],
            ),
            _cluster_role(
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
                    }
                ],
            ),
        ],
    )
    teams = max(1, namespaces // 10)
    policy.replace(
        ROLE_BINDINGS,
        [
            _binding(f"ns-{n}", "team-edit", "edit", ("Group", f"team-{n % teams}"))
            for n in range(namespaces)
        ]
        + [
            _binding(f"ns-{u % namespaces}", f"user-{u}-admin", "admin", ("User", f"user-{u}"))
            for u in range(users)
        ],
    )
    policy.replace(
        CLUSTER_ROLE_BINDINGS,
        [
            _binding(
                "", "system:basic-user", "system:basic-user", ("Group", "system:authenticated")
            ),
            _binding("", "system:discovery", "system:discovery", ("Group", "system:authenticated")),
        ]
        + [_binding("", f"reader-{u}", "view", ("User", f"user-{u}")) for u in range(0, users, 50)],
    )
    return policy


def user(i: int, namespaces: int) -> User:
    teams = max(1, namespaces // 10)
    return User(f"user-{i}", groups=(f"team-{i % teams}", "system:authenticated"))


def per_call(
    fn: Callable[[], object], *, calls: int = 2000, rounds: int = 25
) -> tuple[float, float]:
    """p50 and p90 of microseconds per call over ``rounds`` rounds of ``calls`` calls."""
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter_ns() - start) / calls / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.9) - 1]


def check_table(policy: RbacPolicy, namespaces: int) -> str:
    cache = PermissionCache(policy)
    alice = user(1, namespaces)  # edits its team's namespaces, admin in its own
    reader = user(50, namespaces)  # a cluster-wide reader as well
    root = User("root", groups=("system:masters", "system:authenticated"))
    team_ns = f"ns-{1 % max(1, namespaces // 10)}"
    cases = [
        (
            "namespace-limited: list pods in its namespace",
            alice,
            Attributes(verb="list", resource="pods", namespace=team_ns),
        ),
        (
            "namespace-limited: get deployments/scale",
            alice,
            Attributes(
                verb="get",
                resource="deployments",
                api_group="apps",
                subresource="scale",
                namespace=team_ns,
                name="web",
            ),
        ),
        (
            "cluster-wide reader: watch pods, all namespaces",
            reader,
            Attributes(verb="watch", resource="pods"),
        ),
        ("denied: list secrets cluster-wide", alice, Attributes(verb="list", resource="secrets")),
        (
            "system:masters: delete nodes",
            root,
            Attributes(verb="delete", resource="nodes", name="n"),
        ),
    ]
    rows = []
    for label, who, attrs in cases:
        assert cache.decide(who, attrs).allowed == (
            who.is_privileged or policy.explain(who, attrs).allowed
        ), label
        fast, fast90 = per_call(lambda who=who, attrs=attrs: cache.decide(who, attrs))
        ref, _ = per_call(
            lambda who=who, attrs=attrs: policy.explain(who, attrs), calls=20, rounds=9
        )
        rows.append([label, f"{fast:.2f}", f"{fast90:.2f}", f"{ref:.1f}", f"{ref / fast:.0f}x"])
    return table(
        "1. a check with a built permission set (us per check) vs the reference evaluation",
        ["request", "set p50", "set p90", "reference p50", "ratio"],
        rows,
    )


def build_table(policy: RbacPolicy, users: int, namespaces: int) -> str:
    attrs = Attributes(verb="list", resource="pods", namespace="ns-1")
    who = [user(i, namespaces) for i in range(users)]
    cache = PermissionCache(policy)
    start = time.perf_counter()
    for u in who:
        cache.permissions(u)
    first = (time.perf_counter() - start) / users * 1e6
    # an RBAC change: every set is stale, the role indexes are kept
    policy.put(ROLE_BINDINGS, _binding("ns-0", "extra", "view", ("User", "nobody")))
    start = time.perf_counter()
    for u in who:
        cache.permissions(u)
    rebuilt = (time.perf_counter() - start) / users * 1e6
    ref, _ = per_call(lambda: policy.explain(who[1], attrs), calls=20, rounds=9)
    rows = [
        [f"first set of each of {users} users", f"{first:.1f}", f"{first / ref:.1f}"],
        ["rebuilt after a RoleBinding changed", f"{rebuilt:.1f}", f"{rebuilt / ref:.1f}"],
        ["peer: one reference evaluation", f"{ref:.1f}", "1.0"],
    ]
    return table(
        "2. building a permission set (us per user) vs one reference evaluation",
        ["what", "us", "x reference"],
        rows,
    )


def memory_table(users: int, contexts: int, namespaces: int) -> str:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.take_snapshot()
    policies = [shared_cluster(users, namespaces) for _ in range(contexts)]
    gc.collect()
    after_policies = tracemalloc.take_snapshot()
    caches = [PermissionCache(p) for p in policies]
    who = [user(i, namespaces) for i in range(users)]
    for cache in caches:
        for u in who:
            cache.permissions(u)
    gc.collect()
    after_sets = tracemalloc.take_snapshot()
    # each context's TokenReview answers: one User per token, under the token's hash
    token_caches: list[ExpiringCache[bytes, object]] = []
    for _ in range(contexts):
        tokens: ExpiringCache[bytes, object] = ExpiringCache(users * 2)
        for i in range(users):
            answer = User(f"user-{i}", f"uid-{i:08d}", (f"team-{i % 10}", "system:authenticated"))
            tokens.put(token_key(f"token-{i}-" + "x" * 900), answer, 120.0)
        token_caches.append(tokens)
    gc.collect()
    after_tokens = tracemalloc.take_snapshot()
    tracemalloc.stop()

    def diff(a: tracemalloc.Snapshot, b: tracemalloc.Snapshot) -> float:
        return sum(s.size_diff for s in b.compare_to(a, "filename")) / 2**20

    objects = diff(base, after_policies)
    sets = diff(after_policies, after_sets)
    reviews = diff(after_sets, after_tokens)
    distinct = sum(len(c._interned) for c in caches)
    rows = [
        [f"RBAC objects, {contexts} contexts (parsed)", f"{objects:.1f}", ""],
        [
            f"permission sets, {users} users x {contexts} contexts",
            f"{sets:.1f}",
            f"{sets * 2**20 / (users * contexts):.0f} B/user-context, {distinct} distinct sets",
        ],
    ]
    rows.append(
        [
            f"TokenReview answers, {users} users x {contexts} contexts",
            f"{reviews:.1f}",
            f"{reviews * 2**20 / (users * contexts):.0f} B/user-context",
        ]
    )
    del caches, policies, token_caches
    return table(
        "3. memory (MiB, tracemalloc)",
        ["what", "MiB", "note"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--contexts", type=int, default=10)
    parser.add_argument("--namespaces", type=int, default=200)
    parser.add_argument("--no-proxy", action="store_true", help="skip the proxy's rows")
    parser.add_argument("--rounds", type=int, default=25, help="proxy LIST rounds of 20")
    parser.add_argument("--reads", type=int, default=1000, help="reads per SAR row")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs\n")
    policy = shared_cluster(args.users, args.namespaces)
    print(check_table(policy, args.namespaces), end="\n\n")
    print(build_table(policy, args.users, args.namespaces), end="\n\n")
    print(memory_table(args.users, args.contexts, args.namespaces))
    if not args.no_proxy:
        import anyio
        from _users_proxy import proxy_tables

        with tempfile.TemporaryDirectory() as tmp:
            tables = anyio.run(proxy_tables, args.rounds, args.reads, Path(tmp))
        print("\n" + tables)


if __name__ == "__main__":
    main()
