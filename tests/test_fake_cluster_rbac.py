"""FakeCluster's RBAC (issue 33): user tokens governed by Roles and bindings as kube-apiserver
governs them, TokenReview, SubjectAccessReview, SelfSubjectAccessReview, impersonation, the
aggregation controller; its decisions checked against ``kubectl auth can-i --as``."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubectl_support import run_kubectl
from kubemux.testing import FakeCluster, write_kubeconfig
from kubemux.testing._state.state import RBAC_RESOURCES

RBAC = "rbac.authorization.k8s.io"


def role(namespace: str, name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "rules": list(rules)}


def binding(
    namespace: str, name: str, kind: str, role_name: str, *subjects: dict[str, str]
) -> dict[str, Any]:
    meta = {"namespace": namespace, "name": name} if namespace else {"name": name}
    return {
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role_name},
        "subjects": list(subjects),
    }


def user(name: str) -> dict[str, str]:
    return {"apiGroup": RBAC, "kind": "User", "name": name}


def group(name: str) -> dict[str, str]:
    return {"apiGroup": RBAC, "kind": "Group", "name": name}


PODS_READ = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={"admin"}, rbac=True, tls=True, name="rbac") as c:
        c.create(RBAC_RESOURCES["roles"], role("web", "reader", PODS_READ))
        c.create(
            RBAC_RESOURCES["rolebindings"], binding("web", "alice", "Role", "reader", user("alice"))
        )
        c.create(
            RBAC_RESOURCES["rolebindings"],
            binding("web", "broken", "ClusterRole", "gone", group("devs")),
        )
        c.create(
            RBAC_RESOURCES["clusterrolebindings"],
            binding("", "viewers", "ClusterRole", "view", group("viewers")),
        )
        yield c


async def call(
    cluster: FakeCluster, token: str, method: str, path: str, body: Any = None, **headers: str
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method,
            cluster.server + path,
            json=body,
            headers={"Authorization": f"Bearer {token}", **headers},
            ssl=cluster.client_ssl_context(),
        ) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


async def test_a_user_token_is_governed_by_rbac(cluster: FakeCluster) -> None:
    alice = cluster.add_user("alice", groups=("devs",))
    assert (await call(cluster, alice, "GET", "/api/v1/namespaces/web/pods"))[0] == 200
    status, body = await call(cluster, alice, "GET", "/api/v1/namespaces/db/pods")
    assert status == 403
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods is forbidden: User "alice" cannot list resource "pods" in API group "" '
        'in the namespace "db"',
        "reason": "Forbidden",
        "details": {"kind": "pods"},
        "code": 403,
    }
    # a denial in "web" carries the error of the binding to a missing ClusterRole
    status, body = await call(cluster, alice, "GET", "/api/v1/namespaces/web/secrets/s1")
    assert (status, body["message"]) == (
        403,
        (
            'secrets "s1" is forbidden: User "alice" cannot get resource "secrets" in API group "" '
            'in the namespace "web": RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found'
        ),
    )
    # authorization comes before routing: no 404 for what does not exist
    status, body = await call(cluster, alice, "GET", "/apis/example.com/v1/namespaces/db/widgets")
    assert status == 403 and body["details"] == {"group": "example.com", "kind": "widgets"}
    # pods does not grant pods/log; a watch of one name is a request for that name
    assert (await call(cluster, alice, "GET", "/api/v1/namespaces/web/pods/p/log"))[0] == 403
    status, _ = await call(
        cluster, alice, "GET", "/api/v1/namespaces/db/pods?fieldSelector=metadata.name%3Dp"
    )
    assert status == 403
    # discovery is open to every authenticated user (system:discovery)
    assert (await call(cluster, alice, "GET", "/apis"))[0] == 200
    # the admin token stays an admin
    assert (await call(cluster, "admin", "GET", "/api/v1/namespaces/db/pods"))[0] == 200


async def test_the_aggregated_view_role_follows_labels_both_ways(cluster: FakeCluster) -> None:
    viewer = cluster.add_user("vera", groups=("viewers",))
    path = "/apis/example.com/v1/widgets"
    assert (await call(cluster, viewer, "GET", "/api/v1/namespaces/db/pods"))[0] == 200
    assert (await call(cluster, viewer, "GET", path))[0] == 403
    extra = {
        "metadata": {"name": "widget-viewer", "labels": {f"{RBAC}/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["list"]}],
    }
    cluster.create(RBAC_RESOURCES["clusterroles"], extra)
    view = cluster.get(RBAC_RESOURCES["clusterroles"], None, "view")
    assert view is not None and extra["rules"][0] in view["rules"]
    assert (await call(cluster, viewer, "GET", path))[0] == 404  # allowed: then not served
    extra["metadata"]["labels"] = {}
    cluster.update(RBAC_RESOURCES["clusterroles"], extra)
    view = cluster.get(RBAC_RESOURCES["clusterroles"], None, "view")
    assert view is not None and extra["rules"][0] not in view["rules"]
    assert (await call(cluster, viewer, "GET", path))[0] == 403
    # edit aggregates view (view is labelled aggregate-to-edit), admin aggregates edit
    admin = cluster.get(RBAC_RESOURCES["clusterroles"], None, "admin")
    assert admin is not None and PODS_READ["resources"][0] in str(admin["rules"])


async def test_token_review(cluster: FakeCluster) -> None:
    alice = cluster.add_user("alice", groups=("devs",), uid="u-1", extra={"scopes": ["a"]})
    sa = cluster.service_account_token("web", "deployer")
    expired = cluster.add_user("old", ttl=-1)
    path = "/apis/authentication.k8s.io/v1/tokenreviews"

    async def review(token: str) -> dict[str, Any]:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        status, answer = await call(cluster, "admin", "POST", path, body)
        assert status == 201 and answer["kind"] == "TokenReview"
        return dict(answer["status"])

    assert await review(alice) == {
        "authenticated": True,
        "user": {
            "username": "alice",
            "uid": "u-1",
            "groups": ["devs", "system:authenticated"],
            "extra": {"scopes": ["a"]},
        },
        "audiences": ["https://kubernetes.default.svc.cluster.local"],
    }
    assert (await review(sa))["user"]["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:web",
        "system:authenticated",
    ]
    assert await review("nonsense") == {"user": {}}
    assert "error" in await review(expired)
    assert (await review("admin"))["user"]["groups"] == ["system:masters", "system:authenticated"]
    assert (await call(cluster, expired, "GET", "/api"))[0] == 401
    # a user may not review tokens (system:auth-delegator is not theirs)
    body = {"spec": {"token": sa}}
    assert (await call(cluster, alice, "POST", path, body))[0] == 403
    cluster.revoke_token(alice)
    assert await review(alice) == {"user": {}}


async def test_subject_access_reviews_and_the_webhook_switch(cluster: FakeCluster) -> None:
    path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

    async def sar(spec: dict[str, Any]) -> tuple[int, Any]:
        return await call(cluster, "admin", "POST", path, {"spec": spec})

    attrs = {"verb": "list", "resource": "pods", "namespace": "web"}
    status, body = await sar({"user": "alice", "resourceAttributes": attrs})
    assert status == 201
    assert body["status"] == {
        "allowed": True,
        "reason": 'RBAC: allowed by RoleBinding "alice/web" of Role "reader" to User "alice"',
    }
    _, body = await sar({"user": "bob", "groups": ["devs"], "resourceAttributes": attrs})
    assert body["status"] == {
        "allowed": False,
        "reason": 'RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found',
    }
    nonresource = {
        "user": "bob",
        "groups": ["system:authenticated"],
        "nonResourceAttributes": {"verb": "get", "path": "/version"},
    }
    assert (await sar(nonresource))[1]["status"]["allowed"] is True
    assert (await sar({"resourceAttributes": attrs}))[0] == 422
    assert (await sar({"user": "bob"}))[0] == 422
    # the webhook: allows what RBAC does not, seen by reviews and requests alike
    cluster.webhook = lambda caller, request: caller.name == "bob" and request.resource == "pods"
    _, body = await sar({"user": "bob", "resourceAttributes": attrs})
    assert body["status"]["allowed"] is True
    bob = cluster.add_user("bob")
    assert (await call(cluster, bob, "GET", "/api/v1/namespaces/db/pods"))[0] == 200
    cluster.webhook = None
    assert (await call(cluster, bob, "GET", "/api/v1/namespaces/db/pods"))[0] == 403
    # a self review: the caller's own answer
    ssar = {"spec": {"resourceAttributes": attrs}}
    alice = cluster.add_user("alice")
    status, body = await call(
        cluster, alice, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", ssar
    )
    assert (status, body["status"]["allowed"]) == (201, True)


async def test_impersonation(cluster: FakeCluster) -> None:
    as_alice = {"Impersonate-User": "alice"}
    assert (await call(cluster, "admin", "GET", "/api/v1/namespaces/web/pods", **as_alice))[
        0
    ] == 200
    assert (await call(cluster, "admin", "GET", "/api/v1/namespaces/db/pods", **as_alice))[0] == 403
    bob = cluster.add_user("bob")
    status, body = await call(cluster, bob, "GET", "/api/v1/namespaces/web/pods", **as_alice)
    assert (status, body["message"]) == (
        403,
        (
            'users "alice" is forbidden: User "bob" cannot impersonate resource "users" in API group "" '
            "at the cluster scope"
        ),
    )


def _kubectl_133() -> str | None:
    found = shutil.which("kubectl")
    if not found:
        return None
    pinned = os.path.join(os.path.dirname(os.path.realpath(found)), "kubectl.1.33")
    return pinned if os.access(pinned, os.X_OK) else None


CAN_I = [
    (who, verb, resource, namespace)
    for who, (verb, resource), namespace in itertools.product(
        [
            ("alice",),
            ("alice", "devs"),
            ("bob", "viewers"),
            ("system:serviceaccount:web:deployer",),
        ],
        [("list", "pods"), ("get", "secrets"), ("delete", "pods"), ("list", "deployments")],
        ["web", "db"],
    )
]


async def test_decisions_match_kubectl_auth_can_i(cluster: FakeCluster, tmp_path: Path) -> None:
    """``kubectl auth can-i --as`` (1.33: SelfSubjectAccessReview in protobuf, impersonated)
    says yes exactly where the fake serves the same request to that user's own token."""
    kubectl = _kubectl_133()
    if kubectl is None:
        pytest.skip("kubectl 1.33 is not installed")
    cluster.create(
        RBAC_RESOURCES["rolebindings"],
        binding(
            "web", "deployer", "ClusterRole", "edit", {"kind": "ServiceAccount", "name": "deployer"}
        ),
    )
    kubeconfig = write_kubeconfig(tmp_path / "config", {"rbac": cluster})
    paths = {
        "pods": "/api/v1/namespaces/{ns}/pods",
        "secrets": "/api/v1/namespaces/{ns}/secrets/s",
        "deployments": "/apis/apps/v1/namespaces/{ns}/deployments",
    }
    methods = {"list": "GET", "get": "GET", "delete": "DELETE"}
    disagreements = []
    for who, verb, resource, namespace in CAN_I:
        name, *groups = who
        args = ["auth", "can-i", verb, resource, "-n", namespace, "--as", name]
        for g in groups:
            args += ["--as-group", g]
        _code, out, err = await run_kubectl(kubectl, kubeconfig, *args)
        assert out.strip().split(" ")[0] in ("yes", "no"), (args, out, err)
        said = out.strip().startswith("yes")
        if groups or not name.startswith("system:serviceaccount:"):
            token = cluster.add_user(name, groups=groups)
        else:
            token = cluster.service_account_token("web", "deployer")
        path = paths[resource].format(ns=namespace)
        if verb == "delete":
            path += "/x"
        status, _ = await call(cluster, token, methods[verb], path)
        if said != (status != 403):
            disagreements.append((who, verb, resource, namespace, out.strip(), status))
    assert disagreements == []
