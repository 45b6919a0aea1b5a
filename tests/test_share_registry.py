"""Shared watches wired into the registry (issue 13): ``WatcherRegistry(share=...)``.

In-process registries and real replica processes (tests/share_registry_replica.py, each
with its own WatcherRegistry) against one FakeCluster and a real redis-server. Skipped
without redis-server, unless CI=true.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from kubemux import WatcherRegistry
from kubemux._cache.table import FALLBACK_COLUMNS, TableStore
from kubemux._informer.informer import InformerStatus
from kubemux._settings import Backoff, WatchSettings
from kubemux.share import Redis
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from share_support import STARTUP, RedisServer, Replica
from support import wait_until

pytest.importorskip("redis")

HERE = Path(__file__).resolve().parent
REPLICA = HERE / "share_registry_replica.py"
FAST = WatchSettings(backoff=Backoff(initial_delay=0.05, max_delay=0.5))
# seconds for a registry replica process to start, discover and sync: more than 20 s with
# three of them on a 2-core machine at load 12 (process start, not what is tested)
REGISTRY_STARTUP = 2 * STARTUP


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={"tok-a"}, bookmark_period=0.5) as c:
        c.restrict("tok-a", user="alice")
        c.restrict("tok-a2", user="alice")  # the same user, another (rotated) token
        c.restrict("tok-a3", user="alice")
        c.restrict("tok-b", user="bob")
        c.create_many("pods", (make_pod(f"web-{i}", size=300) for i in range(50)))
        yield c


def engine(redis: RedisServer, **kwargs: Any) -> Redis:
    return Redis(redis.url, prefix="t", lease_ttl=1.5, acquire_period=0.25, **kwargs)


def lists(cluster: FakeCluster, plural: str = "pods") -> int:
    """LISTs (plain or streaming) of one resource the cluster received."""
    return sum(
        1
        for r in cluster.requests
        if r.path.endswith("/" + plural)
        and (not r.is_watch or r.query.get("sendInitialEvents") == "true")
    )


def truth(cluster: FakeCluster, plural: str = "pods") -> dict[str, str]:
    return {
        f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o["metadata"][
            "resourceVersion"
        ]
        for o in cluster.objects(plural)
    }


def informer(registry: WatcherRegistry, context: str, resource: str = "pods") -> InformerStatus:
    (st,) = [i for i in registry.status().contexts[context].informers if i.resource == resource]
    return st


def redis_objects(redis: RedisServer) -> bytes:
    """Every object hash's content, raw."""
    keys = redis.command("KEYS", "t:*:objs").split(b"\r\n")
    return b"".join(redis.command("HGETALL", k.decode()) for k in keys if k.startswith(b"t:"))


def lease_keys(redis: RedisServer) -> bytes:
    return redis.command("KEYS", "t:*:lease")


# ---------------------------------------------------------------------- in process
async def test_roles_lag_and_stale_in_status_and_follow_only(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    lead = WatcherRegistry.from_kubeconfig(
        str(kubeconfig), settings=FAST, share=engine(redis_server)
    )
    follow = WatcherRegistry.from_kubeconfig(
        str(kubeconfig), settings=FAST, share=engine(redis_server), share_lead=False
    )
    async with lead:
        store = await lead.watch("fake", "pods")
        assert len(store) == 50
        st = informer(lead, "fake")
        assert (st.share_role, st.share_lag, st.stale_since) == ("leader", None, None)
        assert st.state == "watching"
        async with follow:
            fstore = await follow.watch("fake", "pods")
            assert informer(follow, "fake").share_role == "follower"
            await cluster.wait_for(lambda: cluster.open_watches == 1)
            assert lists(cluster) == 1
            cluster.create("pods", make_pod("late"))
            await wait_until(
                lambda: fstore.get("default", "late") is not None, registry=follow, poll=0.05
            )
            fst = informer(follow, "fake")
            assert fst.share_lag is not None and 0 <= fst.share_lag < 5
            assert fst.stale_since is None and fst.objects == 51 and fst.has_synced
            assert (
                follow.status().to_json()["contexts"][0]["informers"][0]["share_role"] == "follower"
            )
            version = follow.status_version
            await lead.stop_watcher("fake")  # nobody leads now; the follower may not
            with anyio.fail_after(5):  # turning stale is a status change
                while informer(follow, "fake").stale_since is None:
                    version = await follow.wait_status_change(version)
            assert informer(follow, "fake").share_role == "follower"
            assert cluster.open_watches == 0
            assert fstore.get("default", "late") is not None  # keeps serving what it had


async def test_secrets_stay_local_and_the_review_fallback(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with FakeCluster(tokens={"tok"}, self_subject_review=False) as c:
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": {}}
        c.create("secrets", {**secret, "metadata": {"name": "s1", "namespace": "default"}})
        c.create("pods", make_pod("p1"))
        kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": c})
        registry = WatcherRegistry.from_kubeconfig(
            str(kubeconfig), settings=FAST, share=engine(redis_server)
        )
        async with registry:
            await registry.watch("fake", "secrets")
            await registry.watch("fake", "pods")  # without the review API: shared anyway
            assert informer(registry, "fake", "secrets").share_role == "local"
            assert informer(registry, "fake", "pods").share_role == "leader"
            assert lease_keys(redis_server).startswith(b"*1\r\n")  # pods only
            assert b"s1" not in redis_server.command("KEYS", "*")
            await wait_until(lambda: b"p1" in redis_objects(redis_server))
            assert b"s1" not in redis_objects(redis_server)
        posts = [r.path for r in c.requests if r.method == "POST"]
        assert posts == [  # as kubectl auth whoami, every version, once per generation
            f"/apis/authentication.k8s.io/{v}/selfsubjectreviews"
            for v in ("v1", "v1beta1", "v1alpha1")
        ]


async def test_idle_context_releases_its_leadership(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    registry = WatcherRegistry.from_kubeconfig(
        str(kubeconfig), settings=FAST, share=engine(redis_server), idle_timeout=0.5
    )
    async with registry:
        await registry.watch("fake", "pods")
        assert lease_keys(redis_server).startswith(b"*1\r\n")
        await wait_until(
            lambda: not registry.live_contexts, registry=registry, poll=0.05, timeout=10
        )
        assert lease_keys(redis_server) == b"*0\r\n"  # released, not left to expire
        assert cluster.open_watches == 0


def test_a_registry_without_share_imports_no_redis(tmp_path: Path) -> None:
    script = """
import sys, anyio
from kubemux import WatcherRegistry
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
async def main():
    async with FakeCluster(tokens={"t"}) as c:
        c.create("pods", make_pod("p"))
        path = write_kubeconfig(sys.argv[1], {"fake": c})
        async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
            assert len(await registry.watch("fake", "pods")) == 1
            print(registry.status().contexts["fake"].informers[0].share_role)
    print("redis" in sys.modules, "kubemux.share._redis" in sys.modules)
anyio.run(main)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "config")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert out == ["None", "False", "True"]  # the engine's module, never its client


# ---------------------------------------------------------------------- replica processes
def replica(name: str, redis: RedisServer, kubeconfig: Path, *extra: str) -> Replica:
    return Replica(name, [redis.url, str(kubeconfig), "pods", *extra], script=REPLICA)


def roles(r: Replica, context: str) -> str | None:
    """The replica's last reported share role of ``context``'s pods (None before)."""
    seen = [e["roles"].get(context) for e in r.events if e["op"] == "roles"]
    return seen[-1] if seen else None


def generation(r: Replica, context: str) -> int | None:
    seen = [e["generations"].get(context) for e in r.events if e["op"] == "roles"]
    return seen[-1] if seen else None


async def converge(
    cluster: FakeCluster,
    reps: list[Replica],
    context: str,
    timeout: float = 5.0,  # noqa: ASYNC109
) -> None:
    """Until every replica's store of ``context`` equals the server's pods."""
    with anyio.fail_after(timeout):
        while True:
            want = truth(cluster)
            dumps = [await r.dump() for r in reps]
            if all(d["stores"].get(context) == want for d in dumps):
                return
            await anyio.sleep(0.1)


async def test_three_replicas_one_watch_and_failover_without_list(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    reps = [replica(f"r{i}", redis_server, kubeconfig) for i in range(3)]
    async with anyio.create_task_group() as tg:
        try:
            for r in reps:
                await r.start(tg)
            for r in reps:
                await r.wait(
                    lambda r=r: roles(r, "fake") in ("leader", "follower"), REGISTRY_STARTUP
                )
            assert sorted(roles(r, "fake") or "" for r in reps) == [
                "follower",
                "follower",
                "leader",
            ]
            await cluster.wait_for(lambda: cluster.open_watches == 1)
            assert lists(cluster) == 1
            await converge(cluster, reps, "fake")

            leader = next(r for r in reps if roles(r, "fake") == "leader")
            others = [r for r in reps if r is not leader]
            leader.signal(signal.SIGKILL)
            killed = time.monotonic()
            cluster.create("pods", make_pod("after-kill"))
            await others[0].wait(lambda: any(roles(r, "fake") == "leader" for r in others), 10)
            assert time.monotonic() - killed <= 5.0
            await cluster.wait_for(lambda: cluster.open_watches == 1)
            assert lists(cluster) == 1  # the new leader WATCHes from the last version
            cluster.delete("pods", "default", "web-1")
            await converge(cluster, others, "fake")
        finally:
            for r in reps:
                await r.close()


async def test_table_view_failover_resumes_the_table_watch_without_list(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    reps = [replica(f"r{i}", redis_server, kubeconfig, "--table") for i in range(3)]
    async with anyio.create_task_group() as tg:
        try:
            for r in reps:
                await r.start(tg)
            for r in reps:
                await r.wait(
                    lambda r=r: roles(r, "fake") in ("leader", "follower"), REGISTRY_STARTUP
                )
            assert sorted(roles(r, "fake") or "" for r in reps) == [
                "follower",
                "follower",
                "leader",
            ]
            await cluster.wait_for(lambda: cluster.open_watches == 1)
            assert table_requests(cluster) == (1, 1) and lists(cluster) == 1
            await converge(cluster, reps, "fake")
            dumps = [await r.dump() for r in reps]
            assert [d["columns"]["fake"] for d in dumps] == [
                ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node",
                 "Readiness Gates"],
            ] * 3  # fmt: skip

            leader = next(r for r in reps if roles(r, "fake") == "leader")
            others = [r for r in reps if r is not leader]
            leader.signal(signal.SIGKILL)
            cluster.create("pods", make_pod("after-kill"))
            await others[0].wait(lambda: any(roles(r, "fake") == "leader" for r in others), 10)
            await cluster.wait_for(
                lambda: table_requests(cluster)[1] == 2 and cluster.open_watches == 1
            )
            # the new leader WATCHes the table from the last published version: no LIST
            assert table_requests(cluster) == (1, 2) and lists(cluster) == 1
            watch = [r for r in cluster.requests if r.is_watch][-1]
            assert watch.query.get("includeObject") == "Metadata"
            assert watch.query.get("resourceVersion") not in (None, "", "0")
            cluster.delete("pods", "default", "web-1")
            await converge(cluster, others, "fake")
            for r in others:
                assert (await r.dump())["columns"] == dumps[0]["columns"]
        finally:
            for r in reps:
                await r.close()


async def test_identities_context_names_and_token_rotation(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    both = write_kubeconfig(
        tmp_path / "both",
        {
            "alice": FakeContext(cluster=cluster, token="tok-a"),
            "bob": FakeContext(cluster=cluster, token="tok-b"),
        },
    )
    renamed = tmp_path / "renamed"
    write_kubeconfig(renamed, {"prod-as-alice": FakeContext(cluster=cluster, token="tok-a2")})
    reps = [
        replica("r0", redis_server, both),
        replica("r1", redis_server, both),
        replica("r2", redis_server, renamed),
    ]
    async with anyio.create_task_group() as tg:
        try:
            for r in reps:
                await r.start(tg)
            for r in reps[:2]:
                for ctx in ("alice", "bob"):
                    await r.wait(
                        lambda r=r, c=ctx: roles(r, c) in ("leader", "follower"), REGISTRY_STARTUP
                    )
            await reps[2].wait(
                lambda: roles(reps[2], "prod-as-alice") is not None, REGISTRY_STARTUP
            )
            await reps[2].wait(
                lambda: roles(reps[2], "prod-as-alice") in ("leader", "follower"), 20
            )
            # two identities: one watch each; the renamed context shares alice's
            await cluster.wait_for(lambda: cluster.open_watches == 2)
            assert cluster.open_watches_for("tok-a") + cluster.open_watches_for("tok-a2") == 1
            assert cluster.open_watches_for("tok-b") == 1
            assert lists(cluster) == 2
            await converge(cluster, reps[2:], "prod-as-alice")

            # the token rotated (same user): a new generation, the same share key
            gen = generation(reps[2], "prod-as-alice")
            write_kubeconfig(
                renamed, {"prod-as-alice": FakeContext(cluster=cluster, token="tok-a3")}
            )
            await reps[2].wait(
                lambda: (
                    generation(reps[2], "prod-as-alice") != gen
                    and roles(reps[2], "prod-as-alice") in ("leader", "follower")
                ),
                20,
            )
            await cluster.wait_for(lambda: cluster.open_watches == 2, timeout=10)
            assert lists(cluster) == 2  # no key moved: nobody had to LIST again
            cluster.create("pods", make_pod("rotated"))
            await converge(cluster, reps[:2], "alice")
            await converge(cluster, reps[:2], "bob")
            await converge(cluster, reps[2:], "prod-as-alice")
        finally:
            for r in reps:
                await r.close()


async def test_relay_command_leads_and_a_follow_only_registry_follows(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    relay = await anyio.open_process(
        [
            sys.executable, "-m", "kubemux.cli", "relay",
            "--share", redis_server.url, "--prefix", "t",
            "--kubeconfig", str(kubeconfig), "--resource", "pods",
        ],
        env=env,
    )  # fmt: skip
    try:
        await cluster.wait_for(lambda: cluster.open_watches == 1, timeout=20)
        registry = WatcherRegistry.from_kubeconfig(
            str(kubeconfig), settings=FAST, share=Redis(redis_server.url, prefix="t"),
            share_lead=False,
        )  # fmt: skip
        async with registry:
            store = await registry.watch("fake", "pods")
            assert informer(registry, "fake").share_role == "follower"
            assert len(store) == 50 and cluster.open_watches == 1 and lists(cluster) == 1
            relay.send_signal(signal.SIGTERM)
            with anyio.fail_after(10):
                assert await relay.wait() == 0
            assert relay.stdout is not None
            out = b"".join([chunk async for chunk in relay.stdout]).decode()
            assert "kubemux relay: leading pods for 1 contexts" in out
            assert "kubemux relay: stopped" in out
            await cluster.wait_for(lambda: cluster.open_watches == 0)
            assert lease_keys(redis_server) == b"*0\r\n"  # released on exit
    finally:
        with anyio.move_on_after(5, shield=True):
            if relay.returncode is None:
                relay.kill()
            await relay.wait()
            await relay.aclose()


async def test_shared_watches_example(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    import importlib.util

    path = HERE.parent / "examples" / "shared_watches.py"
    spec = importlib.util.spec_from_file_location("shared_watches_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    lead = WatcherRegistry.from_kubeconfig(
        str(kubeconfig), share=Redis(redis_server.url), autowatch=["pods"]
    )
    async with lead:
        await lead.watch("fake", "pods")  # this one leads: the example's replica follows
        assert await example.main(redis_server.url, str(kubeconfig), once=True) == {
            "fake": "follower"
        }
    await cluster.wait_for(lambda: cluster.open_watches == 0)


async def test_fake_cluster_self_subject_review_and_the_identity(tmp_path: Path) -> None:
    from kubemux._errors import ResourceNotFound
    from kubemux._http.client import open_client
    from kubemux._kubeconfig.load import load_kubeconfig
    from kubemux.share._connector import _identity

    async with (
        FakeCluster(tokens={"plain"}) as c,
        FakeCluster(tokens={"plain"}, self_subject_review=False) as old,
    ):
        c.restrict("tok-a", user="alice")
        path = write_kubeconfig(
            tmp_path / "config",
            {
                "a": FakeContext(cluster=c, token="tok-a"),
                "p": FakeContext(cluster=c, token="plain"),
                "old": FakeContext(cluster=old, token="plain"),
                "old-renamed": FakeContext(cluster=old, token="plain"),
            },
        )
        contexts = load_kubeconfig(str(path)).contexts
        found = {}
        for name, cfg in contexts.items():
            async with open_client(cfg) as client:
                found[name] = await _identity(client, cfg, b"salt")
                if name == "old":
                    with pytest.raises(ResourceNotFound):
                        await client.post_json(
                            "/apis/authentication.k8s.io/v1/selfsubjectreviews", {}
                        )
        assert found["a"] == 'user:{"user":"alice","groups":["system:authenticated"]}'
        assert found["p"].startswith('user:{"user":"token-')
        assert "plain" not in found["p"]
        assert found["old"].startswith("credential:")  # more in test_share_identity.py
        assert found["old"] == found["old-renamed"]  # context and entry names do not count


# ---------------------------------------------------------------------- table views
def table_requests(cluster: FakeCluster, plural: str = "pods") -> tuple[int, int]:
    """(LISTs, WATCHes) in the Table format of one resource the cluster received."""
    table = [
        r
        for r in cluster.requests
        if r.path.endswith("/" + plural) and r.query.get("includeObject") == "Metadata"
    ]
    return sum(not r.is_watch for r in table), sum(r.is_watch for r in table)


def cells(table: Any) -> list[tuple[str, str, tuple[Any, ...]]]:
    return [(r.namespace, r.name, r.cells) for r in table.rows()]


def meta_columns(redis: RedisServer) -> list[bytes]:
    """The ``columns`` field of every slot's meta hash (one per table view)."""
    keys = redis.command("KEYS", "t:*:meta").split(b"\r\n")
    found = [redis.command("HGET", k.decode(), "columns") for k in keys if k.startswith(b"t:")]
    return [f for f in found if not f.startswith(b"$-1")]


@pytest.fixture
async def tls_cluster() -> AsyncIterator[FakeCluster]:
    """As ``cluster``, over TLS (kubectl sends no token over plain HTTP)."""
    async with FakeCluster(tokens={"tok-a"}, tls=True, bookmark_period=0.5) as c:
        c.create_many("pods", (make_pod(f"web-{i}", size=300) for i in range(50)))
        yield c


async def test_table_views_are_shared_with_their_columns(
    redis_server: RedisServer, tls_cluster: FakeCluster, tmp_path: Path
) -> None:
    from test_fake_cluster_kubectl import KUBECTL, kubectl_result

    cluster = tls_cluster
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    lead = WatcherRegistry.from_kubeconfig(
        str(kubeconfig), settings=FAST, share=engine(redis_server)
    )
    follow = WatcherRegistry.from_kubeconfig(
        str(kubeconfig), settings=FAST, share=engine(redis_server)
    )
    async with lead, follow:
        ltable = await lead.table("fake", "pods")
        ftable = await follow.table("fake", "pods")
        assert isinstance(ltable, TableStore) and isinstance(ftable, TableStore)
        assert informer(lead, "fake").share_role == "leader"
        assert informer(follow, "fake").share_role == "follower"
        await cluster.wait_for(lambda: cluster.open_watches == 1)
        assert table_requests(cluster) == (1, 1)  # one table LIST and WATCH for both
        assert lists(cluster) == 1
        assert len(ltable.columns) > 2 and not ftable.is_fallback
        assert ftable.columns == ltable.columns
        assert len(ftable) == 50 and cells(ftable) == cells(ltable)
        (meta,) = meta_columns(redis_server)
        assert b'"name":"Restarts"' in meta and b'"priority":1' in meta
        if KUBECTL != "kubectl":  # kubectl 1.32 prints the same header
            code, out, err = await kubectl_result(kubeconfig, "get", "pods", "-A")
            assert code == 0, err
            header = out.splitlines()[0].split()
            assert header == ["NAMESPACE"] + [c.name.upper() for c in ftable.columns[:5]]
            assert all(c.priority == 0 for c in ftable.columns[:5])

        cluster.create("pods", make_pod("late"))
        await wait_until(
            lambda: ftable.row("default", "late") is not None, registry=follow, poll=0.05
        )
        assert ftable.row("default", "late") == ltable.row("default", "late")
        cluster.delete("pods", "default", "web-3")
        await wait_until(lambda: ftable.row("default", "web-3") is None, registry=follow, poll=0.05)
        assert cells(ftable) == cells(ltable)
        assert cluster.open_watches == 1 and table_requests(cluster) == (1, 1)

        # the object view of the same resource is another key: its own watch
        store = await follow.watch("fake", "pods")
        assert len(store) == 50
        await cluster.wait_for(lambda: cluster.open_watches == 2)
        assert lease_keys(redis_server).startswith(b"*2\r\n")
        assert table_requests(cluster) == (1, 1)


async def test_followers_get_new_printer_columns_after_the_leader_relists(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    columns = [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]
    cluster.add_crd("example.com", "widgets", "Widget", printer_columns=columns)
    cluster.create("widgets.example.com", {"metadata": {"name": "w1"}, "spec": {"size": 3}})
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    lead = WatcherRegistry.from_kubeconfig(
        str(kubeconfig), settings=FAST, share=engine(redis_server)
    )
    follow = WatcherRegistry.from_kubeconfig(
        str(kubeconfig), settings=FAST, share=engine(redis_server), share_lead=False
    )
    async with lead, follow:
        ltable = await lead.table("fake", "widgets")
        ftable = await follow.table("fake", "widgets")
        assert isinstance(ftable, TableStore)
        assert informer(follow, "fake", "widgets.example.com").share_role == "follower"
        assert [(c.name, c.type) for c in ftable.columns] == [
            ("Name", "string"),
            ("Size", "integer"),
        ]
        assert ftable.columns == ltable.columns and cells(ftable) == [("default", "w1", ("w1", 3))]
        rows = follow.subscribe("widgets", ["fake"], view="table", snapshot=False)
        crd = cluster.get("customresourcedefinitions", None, "widgets.example.com")
        assert crd is not None
        crd["spec"]["versions"][0]["additionalPrinterColumns"] = [
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
        ]
        async with rows:
            cluster.update("customresourcedefinitions", crd)
            cluster.drop_watches()  # the next watch's first event carries the new columns
            cluster.create(
                "widgets.example.com",
                {"metadata": {"name": "w2"}, "spec": {"size": 5, "color": "red"}},
            )
            # the follower's subscribers see the new row, cut to the new columns (the
            # relist swaps w1's row in unannounced: its resourceVersion did not change)
            with anyio.fail_after(10):
                change = await rows.__anext__()
            assert (change.type, change.name) == ("ADDED", "w2")
            assert change.object is not None and change.object["cells"] == ["w2", 5, "red"]
            assert [c.name for c in ftable.columns] == ["Name", "Size", "Color"]
        await wait_until(
            lambda: (
                [c.name for c in ftable.columns] == ["Name", "Size", "Color"]
                and len(ftable) == 2
                and all(len(r.cells) == 3 for r in ftable.rows())
            ),
            registry=follow,
            poll=0.05,
            timeout=10,
        )
        assert ftable.columns == ltable.columns
        assert cells(ftable) == [
            ("default", "w1", ("w1", 3, None)),
            ("default", "w2", ("w2", 5, "red")),
        ]
        assert informer(follow, "fake", "widgets.example.com").share_role == "follower"
        assert any(b'"name":"Color"' in m for m in meta_columns(redis_server))
        assert table_requests(cluster, "widgets")[0] == 2  # the leader relisted once

        # columns change again and no row announces it (a relist after a 410, no
        # resourceVersion moved): the new columns still reach the followers
        crd = cluster.get("customresourcedefinitions", None, "widgets.example.com")
        assert crd is not None
        crd["spec"]["versions"][0]["additionalPrinterColumns"] = [
            {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
        ]
        cluster.update("customresourcedefinitions", crd)
        cluster.compact()  # the leader's next watch gets a 410: it relists
        cluster.drop_watches()
        await wait_until(
            lambda: (
                [c.name for c in ftable.columns] == ["Name", "Color"]
                and cells(ftable)
                == [("default", "w1", ("w1", None)), ("default", "w2", ("w2", "red"))]
            ),
            registry=follow,
            poll=0.05,
            timeout=10,
        )
        assert ftable.columns == ltable.columns
        assert table_requests(cluster, "widgets")[0] == 3


async def test_dashboard_like_registries_autowatch_one_shared_table(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    regs = [
        WatcherRegistry.from_kubeconfig(
            str(kubeconfig),
            settings=FAST,
            autowatch=["pods"],
            autowatch_view="table",
            share=engine(redis_server),
        )
        for _ in range(2)
    ]
    async with regs[0], regs[1]:
        for reg in regs:
            await wait_until(
                lambda reg=reg: reg.store("fake", "pods", view="table") is not None,
                registry=reg,
                poll=0.05,
            )
        tables = [reg.store("fake", "pods", view="table") for reg in regs]
        assert all(isinstance(t, TableStore) and len(t) == 50 for t in tables)
        assert sorted(informer(reg, "fake").share_role or "" for reg in regs) == [
            "follower",
            "leader",
        ]
        await cluster.wait_for(lambda: cluster.open_watches == 1)
        assert table_requests(cluster) == (1, 1) and lists(cluster) == 1
        a, b = tables
        assert isinstance(a, TableStore) and isinstance(b, TableStore)
        assert a.columns == b.columns and cells(a) == cells(b)
        assert all(reg.store("fake", "pods") is None for reg in regs)  # no object view


async def test_a_shared_table_of_a_server_without_table_support_falls_back(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with FakeCluster(tokens={"tok"}, table_format=False) as old:
        old.create_many("pods", (make_pod(f"p-{i}") for i in range(3)))
        kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": old})
        regs = [
            WatcherRegistry.from_kubeconfig(
                str(kubeconfig), settings=FAST, share=engine(redis_server)
            )
            for _ in range(2)
        ]
        async with regs[0], regs[1]:
            lt = await regs[0].table("fake", "pods")
            ft = await regs[1].table("fake", "pods")
            assert isinstance(lt, TableStore) and isinstance(ft, TableStore)
            assert informer(regs[1], "fake").share_role == "follower"
            assert lt.is_fallback and ft.is_fallback and ft.columns == FALLBACK_COLUMNS
            assert len(ft) == 3 and cells(ft) == cells(lt)
            await old.wait_for(lambda: old.open_watches == 1)
            assert lists(old) == 1
