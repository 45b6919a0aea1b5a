"""Whose watch a replica joins (issue 18, point 2): the identity in a share key.

The identity is who the API server says the credentials are (a ``SelfSubjectReview``,
``authentication.k8s.io`` v1, v1beta1 or v1alpha1); where no version answers, a salted
digest of the credential actually sent, never a kubeconfig entry, a token-file path or an
exec command line. Real FakeClusters, real replica processes (tests/share_registry_replica.py)
and a real redis-server. Skipped without redis-server, unless CI=true.
"""

from __future__ import annotations

import base64
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from kubemux import WatcherRegistry
from kubemux._http.client import open_client
from kubemux._kubeconfig.load import ContextConfig, load_kubeconfig
from kubemux._settings import Backoff, WatchSettings
from kubemux.share import Redis
from kubemux.share._connector import _identity
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from kubemux.testing._cluster.kubeconfig_writer import kubeconfig_dict
from share_support import RedisServer, Replica

pytest.importorskip("redis")

HERE = Path(__file__).resolve().parent
REPLICA = HERE / "share_registry_replica.py"
PLUGIN = str(HERE / "plugins" / "gate_exec.py")
FAST = WatchSettings(backoff=Backoff(initial_delay=0.05, max_delay=0.5))
REVIEWS = [
    f"/apis/authentication.k8s.io/{v}/selfsubjectreviews" for v in ("v1", "v1beta1", "v1alpha1")
]


async def identity_of(cfg: ContextConfig, salt: bytes = b"salt") -> str | None:
    async with open_client(cfg) as client:
        return await _identity(client, cfg, salt)


def contexts(path: Path, doc: dict[str, Any]) -> dict[str, ContextConfig]:
    path.write_text(yaml.safe_dump(doc))
    return dict(load_kubeconfig(str(path)).contexts)


def user_of(doc: dict[str, Any], context: str) -> dict[str, Any]:
    (entry,) = [u for u in doc["users"] if u["name"] == f"{context}-user"]
    body: dict[str, Any] = entry["user"]
    return body


def reviews(cluster: FakeCluster) -> list[str]:
    return [r.path for r in cluster.requests if r.method == "POST"]


# ---------------------------------------------------------------------- in process
@pytest.mark.parametrize(
    ("served", "asked"),
    [(("v1",), 1), (("v1beta1",), 2), (("v1alpha1",), 3), (True, 1)],
)
async def test_each_review_version_is_tried_until_one_answers(
    tmp_path: Path, served: Any, asked: int
) -> None:
    async with FakeCluster(tokens={"t"}, self_subject_review=served) as c:
        c.restrict("tok-a", user="alice")
        path = write_kubeconfig(tmp_path / "config", {"a": FakeContext(cluster=c, token="tok-a")})
        cfg = load_kubeconfig(str(path)).contexts["a"]
        assert await identity_of(cfg) == 'user:{"user":"alice","groups":["system:authenticated"]}'
        assert reviews(c) == REVIEWS[:asked]  # in kubectl's order, no further


async def test_the_review_answers_per_credential(tmp_path: Path) -> None:
    async with FakeCluster(tls=True, tokens={"static"}, signing_key="k") as c:
        cert, key = c.issue_client_cert("carol")
        doc = kubeconfig_dict(
            {
                "signed": FakeContext(cluster=c, token=c.sign_token("bob")),
                "static": FakeContext(cluster=c, token="static"),
                "cert": FakeContext(cluster=c, token="unused"),
            }
        )
        cert_user = user_of(doc, "cert")
        cert_user.clear()
        cert_user["client-certificate-data"] = base64.b64encode(cert).decode()
        cert_user["client-key-data"] = base64.b64encode(key).decode()
        found = {n: await identity_of(cfg) for n, cfg in contexts(tmp_path / "c", doc).items()}
        assert found["signed"] == 'user:{"user":"bob","groups":["system:authenticated"]}'
        assert found["cert"] == 'user:{"user":"carol","groups":["system:authenticated"]}'
        assert found["static"] is not None and found["static"].startswith('user:{"user":"token-')
        assert "static" not in found["static"].removeprefix('user:{"user":"token-')


async def test_without_a_review_the_identity_is_a_digest_of_what_is_sent(tmp_path: Path) -> None:
    async with FakeCluster(tokens={"tok-1", "tok-2"}, self_subject_review=False) as c:
        token = tmp_path / "token"
        token.write_text("tok-1")
        ctx = FakeContext(cluster=c, token_file=str(token))
        path = write_kubeconfig(tmp_path / "config", {"a": ctx})
        cfg = load_kubeconfig(str(path)).contexts["a"]
        first = await identity_of(cfg)
        assert first is not None and first.startswith("credential:")
        assert reviews(c) == REVIEWS  # every version asked first
        assert "tok-1" not in first and str(token) not in first
        assert await identity_of(cfg) == first  # the same credential: the same key
        assert await identity_of(cfg, b"another salt") != first

        token.write_text("tok-2")  # the same path (every pod's in-cluster context) ...
        second = await identity_of(cfg)
        assert second is not None and second != first  # ... another credential, another key

        # what is sent counts, not how it was got: a static token, an exec plugin's output
        # and a file at another path holding the same token are one identity
        other = tmp_path / "elsewhere"
        other.write_text("tok-2")
        doc = kubeconfig_dict(
            {
                "file": FakeContext(cluster=c, token_file=str(other)),
                "static": FakeContext(cluster=c, token="tok-2"),
                "exec": FakeContext(cluster=c, token="unused"),
                "exec-1": FakeContext(cluster=c, token="unused"),
            }
        )
        for name, sent in (("exec", "tok-2"), ("exec-1", "tok-1")):
            user = user_of(doc, name)
            user.clear()
            user["exec"] = {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": [PLUGIN],
                "env": [{"name": "GATE_TOKEN", "value": sent}],
                "interactiveMode": "Never",
            }
        found = {n: await identity_of(x) for n, x in contexts(tmp_path / "c2", doc).items()}
        assert found["file"] == found["static"] == found["exec"] == second
        assert found["exec-1"] == first  # the same command line, another output: another key


async def test_a_client_certificate_is_an_identity_and_nothing_is_none(tmp_path: Path) -> None:
    async with (
        FakeCluster(tls=True, tokens={"t"}, self_subject_review=False) as c,
        FakeCluster(tokens=None, self_subject_review=False) as open_cluster,
    ):
        doc = kubeconfig_dict(
            {n: FakeContext(cluster=c, token="unused") for n in ("dave", "erin", "dave-again")}
            | {"anonymous": FakeContext(cluster=open_cluster)}
        )
        certs = {n: c.issue_client_cert(n.removesuffix("-again")) for n in ("dave", "erin")}
        for name in ("dave", "erin", "dave-again"):
            cert, key = certs[name.removesuffix("-again")]
            user = user_of(doc, name)
            user.clear()
            user["client-certificate-data"] = base64.b64encode(cert).decode()
            user["client-key-data"] = base64.b64encode(key).decode()
        user_of(doc, "anonymous").clear()
        found = {n: await identity_of(x) for n, x in contexts(tmp_path / "c", doc).items()}
        assert found["dave"] is not None and found["dave"].startswith("credential:")
        assert found["dave"] == found["dave-again"] != found["erin"]
        assert found["anonymous"] is None  # nothing tells who it is: not shared


async def test_a_context_sending_no_credential_is_not_shared(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with FakeCluster(tokens=None, self_subject_review=False) as c:
        c.create("pods", make_pod("p1"))
        doc = kubeconfig_dict({"open": FakeContext(cluster=c)})
        user_of(doc, "open").clear()
        path = tmp_path / "config"
        path.write_text(yaml.safe_dump(doc))
        share = Redis(redis_server.url, prefix="t", lease_ttl=1.5, acquire_period=0.25)
        one = WatcherRegistry.from_kubeconfig(str(path), settings=FAST, share=share)
        two = WatcherRegistry.from_kubeconfig(str(path), settings=FAST, share=share)
        async with one, two:
            for registry in (one, two):
                assert len(await registry.watch("open", "pods")) == 1
                (st,) = registry.status().contexts["open"].informers
                assert st.share_role == "local" and st.has_synced
            await c.wait_for(lambda: c.open_watches == 2)  # each its own
            assert redis_server.command("KEYS", "*") == b"*0\r\n"


def test_the_identity_salt_is_shared_and_never_shown(redis_server: RedisServer) -> None:
    url = redis_server.url
    default = Redis(url).identity_salt
    assert default == Redis(url).identity_salt  # replicas agree without configuration
    assert default != Redis(url, prefix="other").identity_salt
    assert default != Redis(url.replace("/0", "/1")).identity_salt
    password = url.replace("redis://", "redis://:hunter2@")
    assert Redis(password).identity_salt == default  # a password is not part of it
    explicit = Redis(url, identity_salt="s3cret")
    assert explicit.identity_salt not in (default, b"s3cret")
    assert "s3cret" not in repr(explicit)
    keyed = Redis(url, secret_key=bytes(32))
    assert keyed.identity_salt not in (default, explicit.identity_salt)
    with pytest.raises(ValueError, match="identity_salt"):
        Redis(url, identity_salt="")


# ---------------------------------------------------------------------- replica processes
@pytest.fixture
async def limited() -> AsyncIterator[FakeCluster]:
    """A cluster without the review API: an admin token, and one limited to ``team``."""
    async with FakeCluster(
        tokens={"admin-tok"}, tls=True, self_subject_review=False, bookmark_period=0.5
    ) as c:
        c.restrict("team-tok", user="team-bot", namespaces=["team"])
        c.create("pods", make_pod("kube-apiserver", "kube-system"))
        c.create("pods", make_pod("app", "team"))
        yield c


def last(r: Replica, what: str, context: str) -> Any:
    seen = [e[what].get(context) for e in r.events if e["op"] == "roles"]
    return seen[-1] if seen else None


async def check_no_sharing_across_credentials(
    cluster: FakeCluster, admin: Replica, admin2: Replica, team: Replica, context: str
) -> None:
    """The admin replicas share one watch; the team replica never joins it: its own LIST
    is forbidden, and it sees no pod of kube-system."""
    async with anyio.create_task_group() as tg:
        try:
            await admin.start(tg)
            await admin.wait(lambda: last(admin, "roles", context) == "leader", 30)
            await admin2.start(tg)  # the same credential: follows the admin's watch
            await admin2.wait(lambda: last(admin2, "roles", context) == "follower", 30)
            await team.start(tg)
            await team.wait(
                lambda: (
                    "forbidden" in (last(team, "errors", context) or "")
                    or last(team, "roles", context) is not None
                ),
                30,
            )
            assert last(team, "roles", context) is None, "the team replica joined a slot"
            assert re.search(r"cannot (list|watch) resource", last(team, "errors", context))
            stores = (await team.dump())["stores"]
            assert not stores.get(context)  # nothing of kube-system, nothing at all
            assert all("kube-system" not in e.get("stores", {}).get(context, {})
                       for e in team.events if e["op"] == "dump")  # fmt: skip
            dump = await admin2.dump()
            assert set(dump["stores"][context]) == {"kube-system/kube-apiserver", "team/app"}
            assert cluster.open_watches_for("admin-tok") == 1  # admins: one watch between two
            assert cluster.open_watches_for("team-tok") == 0
        finally:
            for r in (admin, admin2, team):
                await r.close()


def service_account(pod: Path, token: str, ca: Path) -> Path:
    """A pod's folder with its service-account mount in ``sa``."""
    sa = pod / "sa"
    sa.mkdir(parents=True)
    (sa / "token").write_text(token)
    (sa / "ca.crt").write_bytes(ca.read_bytes())
    return pod


async def test_in_cluster_pods_with_other_tokens_never_share_a_watch(
    redis_server: RedisServer, limited: FakeCluster, tmp_path: Path
) -> None:
    """Every pod's in-cluster context names the same token and CA paths: the path
    /proc/self/cwd/sa resolves to each replica's own folder, as a pod's mount does."""
    assert limited.ca_file is not None
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(limited.port)}
    reps = []
    for name, token in (("admin", "admin-tok"), ("admin2", "admin-tok"), ("team", "team-tok")):
        pod = service_account(tmp_path / name, token, Path(limited.ca_file))
        args = [redis_server.url, "-", "pods", "--in-cluster", "/proc/self/cwd/sa"]
        reps.append(Replica(name, args, script=REPLICA, cwd=pod, env=env))
    await check_no_sharing_across_credentials(limited, *reps, "in-cluster")


async def test_exec_plugins_whose_output_differs_never_share_a_watch(
    redis_server: RedisServer, limited: FakeCluster, tmp_path: Path
) -> None:
    """One kubeconfig, one exec command line; the plugin's token comes from each replica's
    environment (a cloud login, a VPN profile)."""
    doc = kubeconfig_dict({"prod": FakeContext(cluster=limited, token="unused")})
    user = user_of(doc, "prod")
    user.clear()
    user["exec"] = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [PLUGIN],
        "interactiveMode": "Never",
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc))
    args = [redis_server.url, str(path), "pods"]
    reps = [
        Replica(name, args, script=REPLICA, env={"GATE_TOKEN": token})
        for name, token in (("admin", "admin-tok"), ("admin2", "admin-tok"), ("team", "team-tok"))
    ]
    await check_no_sharing_across_credentials(limited, *reps, "prod")
