"""``kubemux proxy --user-tokens`` (issue 33): each client with its own token, cached reads
authorized per user exactly as the API server would, the rest upstream with the user's
token, revocation reaching open watches, and no answer carried from one user to another."""

from __future__ import annotations

import base64
import io
import json
import random
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
import yaml

from h2_support import h2_client
from kubectl_support import kubectl_binary, kubectl_process, run_kubectl
from kubemux.cli import run
from kubemux.proxy import encode_context
from kubemux.proxy._users.audit import AuditLog
from kubemux.testing import FakeCluster, kubeconfig_dict, write_kubeconfig
from kubemux.testing._state.state import RBAC_RESOURCES
from support import TIMEOUT
from users_support import ADMIN, binding, populate, role, user_proxy, who

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={ADMIN}, rbac=True, tls=True, name="prod") as c:
        populate(c)
        yield c


def comparable(body: bytes, table: bool = False) -> Any:
    """A JSON answer, less what differs by construction: the continue token's encoding.
    A Table the proxy serves differs from FakeCluster's in ways that have nothing to do
    with users (its rows' metadata keeps no managedFields; the fake serves some resources
    as objects, not Tables; ages move): the names it holds are compared."""
    doc = json.loads(body)
    if table and doc.get("kind") != "Status":
        if doc.get("kind") == "Table":
            return [r["object"]["metadata"]["name"] for r in doc["rows"]]
        if "items" in doc:
            return [i["metadata"]["name"] for i in doc["items"]]
        return [doc["metadata"]["name"]] if "metadata" in doc else doc
    if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict):
        doc["metadata"].pop("continue", None)
    return doc


PATHS = (
    "/api/v1/namespaces/{ns}/pods",
    "/api/v1/namespaces/{ns}/pods?limit=2",
    "/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dweb",
    "/api/v1/namespaces/{ns}/pods?fieldSelector=metadata.name%3D{ns}-0",
    "/api/v1/namespaces/{ns}/pods?fieldSelector=metadata.name%3Dweb-0",
    "/api/v1/namespaces/{ns}/pods/{ns}-{i}",
    "/api/v1/namespaces/{ns}/pods/web-0",
    "/api/v1/namespaces/{ns}/pods/missing",
    "/api/v1/pods",
    "/api/v1/pods?fieldSelector=metadata.name%3Dweb-0",
    "/api/v1/namespaces/{ns}/configmaps",
    "/api/v1/namespaces/{ns}/configmaps/settings",
    "/api/v1/namespaces/{ns}/secrets/settings",
    "/api/v1/namespaces/{ns}/secrets",
    "/api/v1/configmaps",
    "/api/v1/namespaces/{ns}",
    "/api/v1/namespaces",
    "/api/v1/nodes",
    "/apis/apps/v1/namespaces/{ns}/deployments",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "/api/v1/namespaces/{ns}/foos",
    "/apis/example.com/v1/namespaces/{ns}/widgets/w",
    "/api",
    "/apis",
    "/api/v1",
    "/version",
)


async def test_differential_many_users_many_requests_no_disagreement(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """Every answer through the proxy is the API server's own for the same token: status
    and body (403 text included), for users bound in different ways, from the cache."""
    eve = cluster.add_user("eve", groups=("contractors",))
    cluster.webhook = lambda caller, req: (  # a non-RBAC authorizer allows eve a little
        getattr(caller, "name", "") == "eve"
        and getattr(req, "namespace", "") == "other"
        and getattr(req, "verb", "") in ("list", "get")
    )
    tokens = {
        "alice": cluster.add_user("alice"),
        "bob": cluster.add_user("bob", groups=("db-team",)),
        "carol": cluster.add_user("carol"),
        "dave": cluster.add_user("dave", groups=("devs",)),
        "deployer": cluster.service_account_token("web", "deployer"),
        "nobody": cluster.add_user("nobody"),
        "eve": eve,
        "admin": ADMIN,
    }
    rng = random.Random(33)
    disagreements: list[tuple[str, str, int, int]] = []
    hits = 0
    async with user_proxy(cluster, tmp_path) as (server, proxied, direct):
        for _ in range(300):
            name = rng.choice(sorted(tokens))
            ns = rng.choice(("web", "db", "other"))
            path = rng.choice(PATHS).format(ns=ns, i=rng.randrange(3))
            headers = {"Accept": TABLE} if rng.random() < 0.3 else {}
            p = proxied.with_token(tokens[name])
            d = direct.with_token(tokens[name])
            ps, ph, pb = await p.request("GET", path, headers=headers)
            ds, _, db = await d.request("GET", path, headers=headers)
            hits += ph.get("X-Kubemux-Cache") == "hit"
            table = bool(headers)
            if ps != ds or comparable(pb, table) != comparable(db, table):
                disagreements.append((name, path, ps, ds))
        stats = (await server.registry.authorizer("prod")).statistics()
    assert disagreements == []
    assert hits > 80  # a good share of answers came from the cache (the rest: 403s, discovery)
    assert stats["users"] >= 6


async def test_an_invalid_token_gets_the_api_servers_401_and_the_proxy_token_is_not_one(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with user_proxy(cluster, tmp_path) as (server, proxied, direct):
        for token in ("not-a-token", server.token, None, cluster.add_user("old", ttl=-5)):
            ps, _, pb = await proxied.with_token(token).request("GET", "/api/v1/pods")
            ds, _, db = await direct.with_token(token).request("GET", "/api/v1/pods")
            assert ps == ds == 401
            assert json.loads(pb) == json.loads(db)
        text = server.kubeconfig_text()
        assert server.token not in text
        users = yaml.safe_load(text)["users"]
        assert users == [{"name": "kubemux-proxy", "user": {}}]


async def test_writes_logs_and_impersonation_go_upstream_with_the_users_token(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    deployer = cluster.service_account_token("web", "deployer")
    alice = cluster.add_user("alice")
    cm = json.dumps({"metadata": {"name": "made"}, "data": {"a": "b"}}).encode()
    async with user_proxy(cluster, tmp_path) as (_, proxied, direct):
        cluster.clear_requests()
        status, _, _ = await proxied.with_token(deployer).request(
            "POST",
            "/api/v1/namespaces/web/configmaps",
            data=cm,
            headers={"Content-Type": "application/json"},
        )
        assert status == 201
        # the user's own read after their write sees it (their write mark)
        status, got = await proxied.with_token(deployer).get_json(
            "/api/v1/namespaces/web/configmaps/made"
        )
        assert (status, got["data"]) == (200, {"a": "b"})
        # alice may not write: the API server's 403, passed on
        ps, _, pb = await proxied.with_token(alice).request(
            "POST", "/api/v1/namespaces/web/configmaps", data=cm
        )
        ds, _, db = await direct.with_token(alice).request(
            "POST", "/api/v1/namespaces/web/configmaps", data=cm
        )
        assert (ps, json.loads(pb)) == (ds, json.loads(db))
        assert ps == 403
        # impersonation: only with the user's own token, so the API server refuses it
        ps, _, pb = await proxied.with_token(alice).request(
            "GET", "/api/v1/namespaces/web/pods", headers={"Impersonate-User": "admin"}
        )
        assert ps == 403
        assert b"cannot impersonate resource" in pb
        writes = [r for r in cluster.requests if r.method != "GET" and r.resource == "configmaps"]
        assert {r.token for r in writes} == {deployer, alice}
        impersonated = [r for r in cluster.requests if r.method == "GET" and r.token == alice]
        assert impersonated  # the impersonating read went upstream, as alice
        # the kubeconfig's credential only fills the cache
        assert {r.verb for r in cluster.requests_for(ADMIN) if r.resource == "configmaps"} <= {
            "list",
            "watch",
        }


async def test_revocation_ends_an_open_watch_and_a_new_grant_is_honoured(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    alice = cluster.add_user("alice")
    async with user_proxy(cluster, tmp_path) as (server, proxied, _):
        authz = await server.registry.authorizer("prod")
        url = proxied.base + "/api/v1/namespaces/web/pods?watch=true"
        headers = {"Authorization": f"Bearer {alice}"}
        async with proxied.session.get(url, headers=headers, ssl=proxied.ssl) as resp:
            assert resp.status == 200
            first = await resp.content.readline()
            assert json.loads(first)["type"] == "ADDED"
            cluster.delete(RBAC_RESOURCES["rolebindings"], "web", "alice")
            with anyio.fail_after(2):  # the watch ends within 2 s of the revocation
                while await resp.content.readline():
                    pass
        status, body = await proxied.with_token(alice).get_json("/api/v1/namespaces/web/pods")
        assert status == 403
        assert body["message"].startswith('pods is forbidden: User "alice" cannot list')
        version = authz.version
        rb = binding("web", "alice", "Role", "reader", who("User", "alice"))
        cluster.create(RBAC_RESOURCES["rolebindings"], rb)
        with anyio.fail_after(2):  # a new grant: honoured as soon as the informer has it
            await authz.wait_changed(version)
        status, _ = await proxied.with_token(alice).get_json("/api/v1/namespaces/web/pods")
        assert status == 200
        assert server.proxy.users.revoked == 1


async def test_no_answer_reaches_another_user_the_headlamp_6713_shapes(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """An admin's cached answers (a Secret, a Table, a watch, a page) never reach a user
    who may read only ConfigMaps: same name another resource, another query, Table vs
    JSON, watch vs list, another user's continue token."""
    cluster.create(
        RBAC_RESOURCES["roles"],
        role("web", "cm", {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}),
    )
    cluster.create(
        RBAC_RESOURCES["rolebindings"], binding("web", "cm", "Role", "cm", who("User", "cm"))
    )
    cm = cluster.add_user("cm")
    alice = cluster.add_user("alice")
    async with user_proxy(cluster, tmp_path) as (_, proxied, direct):
        admin, user = proxied.with_token(ADMIN), proxied.with_token(cm)
        shapes = [
            ("/api/v1/namespaces/web/secrets/settings", {}),
            ("/api/v1/namespaces/web/secrets", {}),
            ("/api/v1/namespaces/web/secrets", {"Accept": TABLE}),
            ("/api/v1/namespaces/web/secrets?fieldSelector=metadata.name%3Dsettings", {}),
            ("/api/v1/namespaces/web/secrets?watch=true&timeoutSeconds=1", {}),
            ("/api/v1/secrets", {"Accept": TABLE}),
        ]
        for path, headers in shapes:
            status, _, _ = await admin.request("GET", path, headers=headers)
            assert status == 200, path
            ps, _, pb = await user.request("GET", path, headers=headers)
            ds, _, db = await direct.with_token(cm).request("GET", path, headers=headers)
            assert (ps, json.loads(pb)) == (ds, json.loads(db)) and ps == 403, path
            assert b"password" not in pb
        # same name, another resource: the ConfigMap, not the Secret
        status, got = await user.get_json("/api/v1/namespaces/web/configmaps/settings")
        assert (status, got["kind"], got["data"]) == (200, "ConfigMap", {"k": "web"})
        # an admin's continue token is theirs: alice (who may list pods in web) cannot use it
        _, page = await admin.get_json("/api/v1/namespaces/web/pods?limit=1")
        token = page["metadata"]["continue"]
        status, body = await proxied.with_token(alice).get_json(
            f"/api/v1/namespaces/web/pods?limit=1&continue={token}"
        )
        assert status in (400, 410) and body["kind"] == "Status"
        assert "web-1" not in json.dumps(body)
        # alice's own pages work
        _, page = await proxied.with_token(alice).get_json("/api/v1/namespaces/web/pods?limit=2")
        status, rest = await proxied.with_token(alice).get_json(
            f"/api/v1/namespaces/web/pods?limit=2&continue={page['metadata']['continue']}"
        )
        assert status == 200 and [i["metadata"]["name"] for i in rest["items"]] == ["web-2"]


async def test_a_flood_of_bad_tokens_is_not_amplified_and_a_huge_token_is_refused(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with user_proxy(cluster, tmp_path) as (server, proxied, _):
        authz = await server.registry.authorizer("prod")
        before = authz.token_reviews_sent
        bad = proxied.with_token("bad-token")
        for _ in range(50):
            status, _, _ = await bad.request("GET", "/api/v1/pods")
            assert status == 401
        assert authz.token_reviews_sent == before + 1  # the failure is kept (briefly)
        for token in ("x" * 200_000, "é-token"):
            status, _, _ = await proxied.with_token(token).request("GET", "/api/v1/pods")
            assert status in (400, 401, 431), status
        assert authz.token_reviews_sent == before + 1  # neither ever reached a TokenReview
        assert authz.statistics()["token_answers"] <= authz.settings.max_tokens


async def test_the_audit_log_says_who_did_what_and_never_a_token(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    alice = cluster.add_user("alice")
    log = tmp_path / "audit.jsonl"
    async with user_proxy(cluster, tmp_path, audit_log=str(log)) as (server, proxied, _):
        p = proxied.with_token(alice)
        assert (await p.request("GET", "/api/v1/namespaces/web/pods"))[0] == 200
        assert (await p.request("GET", "/api/v1/namespaces/db/pods"))[0] == 403
        assert (await p.request("DELETE", "/api/v1/namespaces/web/pods/web-0"))[0] == 403
        assert (await proxied.with_token("nope").request("GET", "/api/v1/pods"))[0] == 401
        audit = server.proxy.users.audit
        with anyio.fail_after(TIMEOUT):
            await audit.wait_written(4)
    text = log.read_text()
    assert alice not in text and "nope" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    got = [(x.get("user"), x["verb"], x["decision"], x["status"]) for x in lines]
    assert got == [
        ("alice", "list", "cache", 200),
        ("alice", "list", "denied", 403),
        ("alice", "delete", "upstream", 403),
        (None, "get", "unauthenticated", 401),
    ]
    assert lines[0]["by"] == "Role/web/reader" and lines[0]["bytes"] > 100


async def test_kubectl_as_a_user_watch_ends_on_revocation_and_can_i_and_exec_go_upstream(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    kubectl = kubectl_binary()
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    alice = cluster.add_user("alice")
    async with user_proxy(cluster, tmp_path) as (server, _, _):
        config = server.kubeconfig()
        config["users"][0]["user"] = {"token": alice}  # the user adds their own token
        path = tmp_path / "alice.yaml"
        path.write_text(yaml.safe_dump(config))
        async with kubectl_process(kubectl, path, "get", "pods", "-n", "web", "-w") as proc:
            assert proc.stdout is not None
            with anyio.fail_after(TIMEOUT):
                seen = b""
                while b"web-2" not in seen:
                    seen += await proc.stdout.readline()
            cluster.delete(RBAC_RESOURCES["rolebindings"], "web", "alice")
            with anyio.fail_after(2):
                await proc.wait()
        code, _, err = await run_kubectl(kubectl, path, "get", "pods", "-n", "web")
        assert code == 1
        assert 'User "alice" cannot list resource "pods"' in err
        # kubectl auth can-i: a SelfSubjectAccessReview, upstream as alice
        code, out, _ = await run_kubectl(
            kubectl, path, "auth", "can-i", "list", "pods", "-n", "web"
        )
        assert (code, out.strip()) == (1, "no")
        rb = binding("web", "alice", "Role", "reader", who("User", "alice"))
        cluster.create(RBAC_RESOURCES["rolebindings"], rb)
        code, out, _ = await run_kubectl(
            kubectl, path, "auth", "can-i", "list", "pods", "-n", "web"
        )
        assert (code, out.strip()) == (0, "yes")
        # exec (a WebSocket upgrade) goes upstream as the user: alice may not, deployer may
        code, _, err = await run_kubectl(kubectl, path, "exec", "-n", "web", "web-0", "--", "echo")
        assert code == 1 and 'User "alice" cannot create resource "pods/exec"' in err
        deployer = cluster.service_account_token("web", "deployer")
        config["users"][0]["user"] = {"token": deployer}
        sa = tmp_path / "deployer.yaml"
        sa.write_text(yaml.safe_dump(config))
        argv = ("exec", "-n", "web", "web-0", "--", "echo", "hi")
        assert (await run_kubectl(kubectl, sa, *argv))[:2] == (0, "hi\n")
        execs = [r for r in cluster.requests if r.subresource == "exec"]
        assert {r.token for r in execs} == {alice, deployer}


async def test_nothing_is_served_as_a_user_before_the_rbac_informers_have_synced(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    alice = cluster.add_user("alice")
    cluster.fail_next(10_000, 500, path_prefix="/apis/rbac.authorization.k8s.io/v1/rolebindings")
    async with user_proxy(cluster, tmp_path, start_timeout=1.0) as (_, proxied, _):
        for token in (alice, ADMIN):
            status, headers, body = await proxied.with_token(token).request(
                "GET", "/api/v1/namespaces/web/pods"
            )
            assert status == 503, body
            assert headers["Retry-After"] == "5"
            assert b"RBAC" in body and b"web-0" not in body


async def test_a_users_request_never_presents_the_kubeconfigs_client_certificate(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """kube-apiserver takes a client certificate over a bearer token: with a kubeconfig
    that authenticates by certificate, a user's request must connect without it."""
    cert, key = cluster.issue_client_cert("kubeconfig-admin")
    config = kubeconfig_dict({"prod": cluster})
    config["users"][0]["user"] = {
        "client-certificate-data": base64.b64encode(cert).decode(),
        "client-key-data": base64.b64encode(key).decode(),
    }
    deployer = cluster.service_account_token("web", "deployer")
    alice = cluster.add_user("alice")
    cm = json.dumps({"metadata": {"name": "by-deployer"}}).encode()
    async with user_proxy(cluster, tmp_path, kubeconfig=config) as (_, proxied, _):
        status, _, _ = await proxied.with_token(deployer).request(
            "POST", "/api/v1/namespaces/web/configmaps", data=cm
        )
        assert status == 201
        status, _, _ = await proxied.with_token(alice).request(
            "DELETE", "/api/v1/namespaces/web/configmaps/by-deployer"
        )
        assert status == 403  # as alice, not as the certificate's system:masters user
        users = [r for r in cluster.requests if r.token in (deployer, alice)]
        assert users and all(r.client_cert is None for r in users)
        informers = [
            r for r in cluster.requests if r.resource == "rolebindings.rbac.authorization.k8s.io"
        ]
        assert informers and all(r.client_cert == "kubeconfig-admin" for r in informers)


async def test_upstream_streams_are_capped_per_user(cluster: FakeCluster, tmp_path: Path) -> None:
    """With 4 streams per context, one user holds at most one: another user still gets
    theirs."""
    deployer = cluster.service_account_token("web", "deployer")
    log = "/api/v1/namespaces/web/pods/web-0/log?follow=true"
    async with user_proxy(cluster, tmp_path, max_upstream_streams=4) as (server, proxied, _):
        first = proxied.with_token(deployer)
        headers = {"Authorization": f"Bearer {deployer}"}
        async with proxied.session.get(proxied.base + log, headers=headers, ssl=proxied.ssl) as r:
            assert r.status == 200
            status, resp_headers, _ = await first.request("GET", log)
            assert status == 429 and resp_headers["Retry-After"] == "1"
            admin = {"Authorization": f"Bearer {ADMIN}"}
            async with proxied.session.get(proxied.base + log, headers=admin, ssl=proxied.ssl) as a:
                assert a.status == 200
                assert server.proxy.statistics().upstream_streams == 2


async def test_the_audit_log_drops_and_counts_what_it_cannot_queue(tmp_path: Path) -> None:
    """Recording never waits: past the queue's bound a line is dropped and counted, and the
    next write says how many were."""
    log = AuditLog(tmp_path / "audit.jsonl", max_queued=2)
    for i in range(5):
        log.record(None, {"n": i})
    assert log.dropped == 3
    async with anyio.create_task_group() as tg:
        tg.start_soon(log.run)
        with anyio.fail_after(TIMEOUT):
            await log.wait_written(3 + 3)  # two lines and the note, and the three dropped
        tg.cancel_scope.cancel()
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert lines == [{"n": 0}, {"n": 1}, {"dropped": 3}]
    assert (tmp_path / "audit.jsonl").stat().st_mode & 0o777 == 0o600


async def test_the_command_with_user_tokens_and_an_audit_log(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """``kubemux proxy --user-tokens --audit-log``: OUT holds no credential, a user's token
    works, the log is written; ``--audit-log`` alone is refused."""
    kubeconfig = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    out, log = tmp_path / "proxy.yaml", tmp_path / "audit.jsonl"
    alice = cluster.add_user("alice")
    base = ["proxy", "--kubeconfig", str(kubeconfig), "--port", "0"]
    err = io.StringIO()
    assert await run([*base, "--audit-log", str(log)], stdout=io.StringIO(), stderr=err) == 1
    assert "--audit-log needs --user-tokens" in err.getvalue()
    args = [*base, "--user-tokens", "--audit-log", str(log), "--write-kubeconfig", str(out)]
    ready = anyio.Event()

    class Lines(io.StringIO):
        def write(self, text: str) -> int:
            n = super().write(text)
            if "Ctrl-C" in self.getvalue():
                ready.set()
            return n

    stdout = Lines()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: run(args, stdout=stdout, stderr=io.StringIO()))
        with anyio.fail_after(TIMEOUT):
            await ready.wait()
            doc = yaml.safe_load(out.read_text())
            assert doc["users"] == [{"name": "kubemux-proxy", "user": {}}]
            server = doc["clusters"][0]["cluster"]["server"]
            ca = base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"])
            context = ssl.create_default_context(cadata=ca.decode())
            async with aiohttp.ClientSession() as session:
                headers = {"Authorization": f"Bearer {alice}"}
                url = f"{server}/api/v1/namespaces/web/pods"
                async with session.get(url, headers=headers, ssl=context) as r:
                    assert r.status == 200
        tg.cancel_scope.cancel()
    assert "own token" in stdout.getvalue()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(x["user"], x["decision"], x["status"]) for x in lines] == [("alice", "cache", 200)]


async def test_a_403_carries_the_rbac_resolution_errors_as_the_api_servers(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    dave = cluster.add_user("dave", groups=("devs",))
    path = "/api/v1/namespaces/web/pods"
    async with user_proxy(cluster, tmp_path) as (_, proxied, direct):
        ps, pb = await proxied.with_token(dave).get_json(path)
        ds, db = await direct.with_token(dave).get_json(path)
    assert (ps, pb) == (ds, db)
    assert pb["message"] == (
        'pods is forbidden: User "dave" cannot list resource "pods" in API group "" in the '
        'namespace "web": RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found'
    )


async def test_revocation_ends_a_watch_passed_through_to_the_api_server(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A watch the cache does not serve (a Table watch with whole objects) goes upstream
    with the user's token; kube-apiserver never rechecks it, the proxy does."""
    alice = cluster.add_user("alice")
    async with user_proxy(cluster, tmp_path) as (_, proxied, _):
        url = proxied.base + "/api/v1/namespaces/web/pods?watch=true&includeObject=Object"
        headers = {"Authorization": f"Bearer {alice}", "Accept": TABLE}
        async with proxied.session.get(url, headers=headers, ssl=proxied.ssl) as resp:
            assert resp.status == 200
            assert resp.headers.get("X-Kubemux-Cache") != "hit"
            assert json.loads(await resp.content.readline())["type"] == "ADDED"
            assert cluster.open_watches_for(alice) == 1
            cluster.delete(RBAC_RESOURCES["rolebindings"], "web", "alice")
            with anyio.fail_after(2):
                while await resp.content.readline():
                    pass
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches_for(alice) == 0)


async def test_users_on_one_http2_connection_each_get_their_own_answer(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """Streams of one HTTP/2 connection carry different users: each is authorized as
    itself (the caller is per stream, never per connection)."""
    alice, bob = cluster.add_user("alice"), cluster.add_user("bob", groups=("db-team",))
    async with user_proxy(cluster, tmp_path) as (server, _, _), h2_client(server) as h2c:
        assert h2c.alpn == "h2"
        context = encode_context("prod")
        sids = {
            (who, ns): h2c.request(
                "GET",
                f"/clusters/{context}/api/v1/namespaces/{ns}/pods",
                token=False,
                headers={"authorization": f"Bearer {token}"},
            )
            for who, token in (("alice", alice), ("bob", bob))
            for ns in ("web", "db")
        }
        with anyio.fail_after(TIMEOUT):
            got = {key: (await h2c.reply(sid)).status for key, sid in sids.items()}
    assert got == {
        ("alice", "web"): 200,
        ("alice", "db"): 403,
        ("bob", "web"): 403,
        ("bob", "db"): 200,
    }


async def test_revocation_ends_a_users_watch_over_http2(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A user's watch over HTTP/2 keeps its task (it is not detached, as a watch with the
    proxy's own credential is): the revocation of its right ends it within 2 s."""
    alice = cluster.add_user("alice")
    async with user_proxy(cluster, tmp_path) as (server, _, _), h2_client(server) as h2c:
        sid = h2c.request(
            "GET",
            f"/clusters/{encode_context('prod')}/api/v1/namespaces/web/pods?watch=true",
            token=False,
            headers={"authorization": f"Bearer {alice}"},
        )
        with anyio.fail_after(TIMEOUT):
            await h2c.until(lambda: len(h2c.replies[sid].lines()) >= 1)
        assert h2c.replies[sid].status == 200
        cluster.delete(RBAC_RESOURCES["rolebindings"], "web", "alice")
        with anyio.fail_after(2):  # the watch ends within 2 s of the revocation
            await h2c.until(lambda: h2c.replies[sid].ended or h2c.replies[sid].reset is not None)
        assert server.proxy.users.revoked == 1
