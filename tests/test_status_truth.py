"""status() tells the truth (DESIGN invariant 13, issue 21): a context that works is not shown
as failing, an error that no longer holds is not shown as current, a skipped object says why.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from kubemux import (
    Backoff,
    ContextNotFound,
    Forbidden,
    InvalidContext,
    KubeconfigError,
    KubemuxError,
    MultiStore,
    MultiTableStore,
    Unauthorized,
    WatcherRegistry,
    WatchSettings,
)
from kubemux.cli import run
from kubemux.dashboard.views import status_payload
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from support import TIMEOUT, wait_until

NO_WINDOW = Backoff(initial_delay=0.0, max_delay=0.0, jitter=False)  # retry at once, if at all
FAST = WatchSettings(
    backoff=Backoff(initial_delay=0.02, max_delay=0.1),
    min_healthy_watch=0.0,
    response_timeout=0.5,
    read_timeout=0.5,
)


def _cluster_wide(cluster: FakeCluster) -> int:
    return sum(1 for r in cluster.requests if r.path == "/api/v1/pods")


@pytest.fixture
async def limited(tmp_path: Path) -> Any:
    """A cluster whose user ``jane`` may read pods only in ``team-a``; a kubeconfig for her."""
    async with FakeCluster(tokens={"admin"}, bookmark_period=0.1, name="rbac") as c:
        for ns in ("team-a", "team-b"):
            c.create("pods", make_pod(f"{ns}-pod", ns))
        c.restrict("jane", user="jane", namespaces=["team-a"])
        ctx = FakeContext(cluster=c, token="jane", namespace="team-a")
        yield c, write_kubeconfig(tmp_path / "config", {"limited": ctx})


# ------------------------------------------------------------------ 1. the namespace fallback
async def test_a_namespace_fallback_is_running_with_a_note_and_never_retried(limited: Any) -> None:
    cluster, path = limited
    async with WatcherRegistry.from_kubeconfig(str(path), start_backoff=NO_WINDOW) as reg:
        with anyio.fail_after(TIMEOUT):
            store = await reg.watch("limited", "pods")
        assert isinstance(store, MultiStore) and store.scope == ("team-a",)
        status = reg.status().contexts["limited"]
        assert status.state == "running", status
        assert status.last_error is None and status.retry_in is None
        assert "forbidden" in status.notes["pods"] and "watching team-a" in status.notes["pods"]
        assert [i.namespace for i in status.informers] == ["team-a"]
        assert _cluster_wide(cluster) == 1
        with anyio.fail_after(TIMEOUT):
            assert isinstance(await reg.table("limited", "pods"), MultiTableStore)
        assert _cluster_wide(cluster) == 2  # the table view is an informer of its own
        assert reg.status().contexts["limited"].state == "running"
        with anyio.fail_after(TIMEOUT):
            for _ in range(5):  # no backoff window at all: only the remembered fallback
                assert isinstance(await reg.watch("limited", "pods"), MultiStore)
                assert isinstance(await reg.table("limited", "pods"), MultiTableStore)
        assert _cluster_wide(cluster) == 2
        assert reg.store("limited", "pods") is not None  # the union, as store() names it


async def test_an_autowatched_resource_falls_back_once_and_shows_running(limited: Any) -> None:
    cluster, path = limited
    backoff = Backoff(initial_delay=0.02, max_delay=0.05, jitter=False)
    registry = WatcherRegistry.from_kubeconfig(
        str(path), autowatch=["pods"], autowatch_view="table", start_backoff=backoff
    )
    async with registry as reg:

        def running() -> bool:
            st = reg.status().contexts["limited"]
            return st.state == "running" and any(i.has_synced for i in st.informers)

        await wait_until(running, registry=reg)
        status = reg.status().contexts["limited"]
        assert status.last_error is None and status.retry_in is None, status
        assert "watching team-a" in status.notes["pods"]
        assert [(i.namespace, i.view) for i in status.informers] == [("team-a", "table")]
        # with a 20-50 ms backoff a retry loop would have made several requests by now;
        # give it a few bookmark periods (100 ms each) to show itself
        with anyio.move_on_after(0.5):
            await cluster.wait_for(lambda: _cluster_wide(cluster) > 1, timeout=TIMEOUT)
        assert _cluster_wide(cluster) == 1
        with anyio.fail_after(TIMEOUT):
            table = await reg.table("limited", "pods")
        assert isinstance(table, MultiTableStore) and [r.name for r in table.rows()] == [
            "team-a-pod"
        ]
        assert reg.store("limited", "pods", view="table") is table


# ------------------------------------------------------------------ 2. errors that no longer hold
def _informer(reg: WatcherRegistry, context: str = "c") -> Any:
    (status,) = reg.status().contexts[context].informers
    return status


async def _recovered(reg: WatcherRegistry, cluster: FakeCluster, store: Any) -> None:
    """The informer watches again with no error shown, and changes flow."""

    def clean() -> bool:
        st = reg.status().contexts["c"]
        return (
            st.state == "running"
            and st.last_error is None
            and _informer(reg).last_error is None
            and _informer(reg).state == "watching"
        )

    await wait_until(clean, registry=reg)
    cluster.create("pods", make_pod("after-recovery"))
    with anyio.fail_after(TIMEOUT):
        await cluster.wait_for(lambda: store.get("default", "after-recovery") is not None)


async def test_a_401_is_cleared_once_the_refreshed_credential_works(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("one\n")
    async with FakeCluster(tokens={"one"}) as cluster:
        cluster.create("pods", make_pod("web-1"))
        ctx = FakeContext(cluster=cluster, token_file=str(token_file))
        path = write_kubeconfig(tmp_path / "config", {"c": ctx})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
            with anyio.fail_after(TIMEOUT):
                store = await reg.watch("c", "pods")
            cluster.tokens.clear()  # the token stops working, the file still holds it
            cluster.tokens.add("two")
            cluster.drop_watches()
            await wait_until(lambda: "401" in (_informer(reg).last_error or ""), registry=reg)
            token_file.write_text("two\n")  # the credential is refreshed (re-read after a 401)
            await _recovered(reg, cluster, store)


@pytest.mark.parametrize("fault", ["5xx", "timeout", "410 then a failed relist"])
async def test_an_error_is_cleared_when_the_informer_recovers(tmp_path: Path, fault: str) -> None:
    async with FakeCluster(bookmark_period=0.1) as cluster:
        cluster.create("pods", make_pod("web-1"))
        path = write_kubeconfig(tmp_path / "config", {"c": cluster})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
            with anyio.fail_after(TIMEOUT):
                store = await reg.watch("c", "pods")
                await cluster.wait_for(lambda: cluster.open_watches == 1)
            if fault == "5xx":
                cluster.fail_next(2, 503, reason="ServiceUnavailable", watch=True)
                cluster.drop_watches()
            elif fault == "timeout":
                cluster.stall()  # the open watch goes quiet, new requests hang
                cluster.drop_watches()
            else:
                cluster.fail_next(1, 500)  # the relist after the 410 fails once
                cluster.compact()
            await wait_until(lambda: _informer(reg).last_error is not None, registry=reg)
            if fault == "timeout":
                cluster.unstall()
            await _recovered(reg, cluster, store)


async def test_a_401_of_another_informer_is_cleared_when_the_context_works_again(
    tmp_path: Path,
) -> None:
    async with FakeCluster() as cluster:
        cluster.create("pods", make_pod("web-1"))
        path = write_kubeconfig(tmp_path / "config", {"c": cluster})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
            cluster.fail_next(3, 401, reason="Unauthorized", path_prefix="/api/v1/services")
            with anyio.fail_after(TIMEOUT), pytest.raises(Unauthorized):
                await reg.watch("c", "services")
            assert reg.status().contexts["c"].state == "backing off"
            with anyio.fail_after(TIMEOUT):
                await reg.watch("c", "pods")  # the credential works: the 401 no longer holds
            status = reg.status().contexts["c"]
            assert status.state == "running" and status.last_error is None, status
            assert status.retry_in is None
            cluster.fail_next(
                1, 403, reason="Forbidden", path_prefix="/api/v1/namespaces/default/configmaps"
            )
            with anyio.fail_after(TIMEOUT), pytest.raises(Forbidden):
                await reg.watch("c", "configmaps", "default")
            with anyio.fail_after(TIMEOUT):
                await reg.watch("c", "pods", "default")  # a 403 is about its resource: kept
            assert "403" in (reg.status().contexts["c"].last_error or "")


async def test_a_discovery_failure_leaves_nothing_behind_once_discovery_works(
    tmp_path: Path,
) -> None:
    async with FakeCluster() as cluster:
        cluster.add_crd("example.com", "widgets", "Widget")
        path = write_kubeconfig(tmp_path / "config", {"c": cluster})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
            cluster.fail_next(10, 503, reason="ServiceUnavailable", path_prefix="/api")
            with anyio.fail_after(TIMEOUT), pytest.raises(KubemuxError):
                await reg.watch("c", "widgets")  # a short name needs discovery
            with anyio.fail_after(TIMEOUT):
                while True:  # discovery answers again once the faults are used up
                    try:
                        await reg.watch("c", "widgets")
                        break
                    except KubemuxError:
                        await cluster.wait_for(lambda: True)
            status = reg.status().contexts["c"]
            assert status.state == "running" and status.last_error is None, status


# ------------------------------------------------------------------ 3. a skipped object says why
async def test_a_transform_that_raises_leaves_its_reason_in_status(tmp_path: Path) -> None:
    def picky(obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name.startswith("bad"):
            raise ValueError(f"see https://admin:hunter2@example.com/ about {name} " + "x" * 1000)
        return obj

    async with FakeCluster() as cluster:
        cluster.create("pods", make_pod("good"))
        cluster.create("pods", make_pod("bad-1"))
        cluster.create("secrets", {"metadata": {"name": "bad-s"}, "data": {"k": "djE="}})
        path = write_kubeconfig(tmp_path / "config", {"c": cluster})
        registry = WatcherRegistry.from_kubeconfig(
            str(path), settings=FAST, transforms={"pods": picky, "secrets": picky}
        )
        async with registry as reg:
            with anyio.fail_after(TIMEOUT):
                store = await reg.watch("c", "pods")
            assert store.get("default", "bad-1") is None and store.get("default", "good")
            (st,) = reg.status().contexts["c"].informers
            assert st.skipped_lines == 1 and st.last_skip is not None
            assert "the transform raised ValueError" in st.last_skip and "bad-1" in st.last_skip
            assert "hunter2" not in st.last_skip and len(st.last_skip) <= 300
            assert st.last_skip_at is not None and st.last_skip_at > 0
            cluster.create("pods", make_pod("bad-2"))  # from the watch: the latest reason
            await wait_until(lambda: "bad-2" in (_informer(reg).last_skip or ""), poll=0.02)
            with anyio.fail_after(TIMEOUT):
                await reg.watch("c", "secrets")
            secrets = next(
                i for i in reg.status().contexts["c"].informers if i.resource == "secrets"
            )
            assert secrets.last_skip is not None and "raised ValueError" in secrets.last_skip
            assert "bad-s" not in secrets.last_skip  # a Secret's message is withheld
            doc = reg.status().to_json()["contexts"][0]["informers"]
            assert {i["resource"]: bool(i["last_skip"]) for i in doc} == {
                "pods": True,
                "secrets": True,
            }
            page = status_payload(reg.status())["contexts"][0]["informers"]  # the dashboard's
            assert all(i["last_skip"] and "hunter2" not in i["last_skip"] for i in page)


async def test_no_skip_no_reason(tmp_path: Path, fake_cluster: FakeCluster) -> None:
    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster})
    async with WatcherRegistry.from_kubeconfig(str(path)) as reg:
        with anyio.fail_after(TIMEOUT):
            await reg.watch("c", "pods")
        assert _informer(reg).last_skip is None and _informer(reg).last_skip_at is None


# ------------------------------------------------------------------ 4. an invalid context
INVALID = """apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: az
  user: {auth-provider: {name: azure, config: {tenant-id: t}}}
- name: gc
  user: {auth-provider: {name: gcp}}
- name: ok
  user: {token: s3cret}
contexts:
- name: azure
  context: {cluster: c, user: az}
- name: gcp
  context: {cluster: c, user: gc}
- name: no-cluster
  context: {cluster: gone, user: ok}
- name: no-user
  context: {cluster: c, user: nobody}
- name: fine
  context: {cluster: c, user: ok}
"""


@pytest.mark.parametrize(
    ("context", "why"),
    [
        ("azure", r"user 'az': auth-provider 'azure' was removed .*kubelogin"),
        ("gcp", r"user 'gc': auth-provider 'gcp' was removed .*gke-gcloud-auth-plugin"),
        ("no-cluster", r"cluster 'gone' not found"),
        ("no-user", r"user 'nobody' not found"),
    ],
)
async def test_watching_an_invalid_context_names_the_file_the_entry_and_why(
    tmp_path: Path, context: str, why: str
) -> None:
    path = tmp_path / "config"
    path.write_text(INVALID)
    async with WatcherRegistry.from_kubeconfig(str(path)) as reg:
        assert context in reg.status().invalid_contexts and context not in reg.contexts
        with anyio.fail_after(TIMEOUT), pytest.raises(InvalidContext, match=why) as info:
            await reg.watch(context, "pods")
        error = info.value
        assert isinstance(error, KubeconfigError) and not isinstance(error, ContextNotFound)
        assert error.context == context and error.path == str(path)
        assert str(path) in str(error) and "s3cret" not in str(error)
        with pytest.raises(InvalidContext):
            await reg.resources(context)
        with pytest.raises(ContextNotFound):  # one the kubeconfig does not define at all
            await reg.watch("nowhere", "pods")


async def test_all_contexts_commands_name_the_contexts_they_skip_once(tmp_path: Path) -> None:
    async with FakeCluster() as cluster:
        cluster.create("pods", make_pod("web-1"))
        good = write_kubeconfig(tmp_path / "good", {"fine": cluster})
        bad = tmp_path / "bad"
        bad.write_text(INVALID.replace("- name: fine\n  context: {cluster: c, user: ok}\n", ""))
        kubeconfig = f"{good}{os.pathsep}{bad}"
        for argv in (
            ["get", "pods", "--all-contexts"],
            ["watch", "pods", "--all-contexts", "--duration", "0.3"],
        ):
            out, err = io.StringIO(), io.StringIO()
            with anyio.fail_after(TIMEOUT):
                code = await run([*argv, "--kubeconfig", kubeconfig], stdout=out, stderr=err)
            assert code == 0, err.getvalue()
            assert "web-1" in out.getvalue()
            lines = err.getvalue().splitlines()
            skipped = sorted(line.split("'")[1] for line in lines if "skipping context" in line)
            assert skipped == ["azure", "gcp", "no-cluster", "no-user"], lines
            assert any(str(bad) in line and "kubelogin" in line for line in lines)
            assert "s3cret" not in err.getvalue()
        out, err = io.StringIO(), io.StringIO()
        with anyio.fail_after(TIMEOUT):
            code = await run(
                ["get", "pods", "--context", "azure", "--kubeconfig", kubeconfig],
                stdout=out,
                stderr=err,
            )
        assert (
            code == 1 and "cannot be used" in err.getvalue() and "not found" not in err.getvalue()
        )


# ------------------------------------------------------------------ 5. a CRD that comes back
def _widget(name: str) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}}


def _widget_requests(cluster: FakeCluster) -> int:
    return sum(1 for r in cluster.requests if "/widgets" in r.path)


@pytest.mark.parametrize("may_read_crds", [True, False])
async def test_a_crd_created_again_is_noticed_within_seconds_without_a_request_loop(
    tmp_path: Path, may_read_crds: bool
) -> None:
    async with FakeCluster(tokens={"admin"}) as cluster:
        cluster.add_crd("example.com", "widgets", "Widget")
        cluster.create("widgets.example.com", _widget("w-1"))
        if not may_read_crds:  # widgets (and discovery, always open), nothing else
            cluster.restrict("admin", user="u", resources=["widgets.example.com"])
        path = write_kubeconfig(tmp_path / "config", {"c": cluster})
        async with WatcherRegistry.from_kubeconfig(str(path)) as reg:  # gone_retry: 60 s
            with anyio.fail_after(TIMEOUT):
                store = await reg.watch("c", "widgets")
            cluster.delete_crd("widgets.example.com")
            await wait_until(lambda: _informer(reg).state == "error", registry=reg)
            assert "no longer serves widgets.example.com" in (_informer(reg).last_error or "")
            before = _widget_requests(cluster)
            async with reg.subscribe("widgets", ["c"], snapshot=False) as changes:
                cluster.add_crd("example.com", "widgets", "Widget")
                cluster.create("widgets.example.com", _widget("w-2"))
                started = anyio.current_time()
                with anyio.fail_after(10):  # noticed within 10 s, not gone_retry's 60
                    async for change in changes:
                        if change.name == "w-2":
                            break
                took = anyio.current_time() - started
            assert store.get("default", "w-2") is not None
            # one LIST (and its WATCH), maybe one early look: no loop
            assert _widget_requests(cluster) - before <= 4, cluster.requests[-10:]
            await wait_until(lambda: _informer(reg).last_error is None, registry=reg)
            if may_read_crds:
                assert took < 2.0  # the CRD watch tells at once
                watched = [r for r in cluster.requests if "customresourcedefinitions" in r.path]
                assert watched and all(
                    r.query.get("fieldSelector") == "metadata.name=widgets.example.com"
                    for r in watched
                )
            else:
                discovery = [r for r in cluster.requests if r.path in ("/api", "/apis")]
                assert len(discovery) <= 2 * (took / 5 + 3)  # one look per 5 s, two requests


async def test_a_watch_that_closed_at_once_stays_the_error_until_the_next_one_outlives_the_rule(
    tmp_path: Path,
) -> None:
    # the health rule: a watch that ends sooner than min_healthy_watch is a failure. The next
    # watch answering does not prove it wrong (the last one answered too): only living longer does
    rule = 2.0
    settings = WatchSettings(
        backoff=Backoff(initial_delay=0.0, max_delay=0.0, jitter=False),
        min_healthy_watch=rule,
        response_timeout=0.5,
    )
    async with FakeCluster() as cluster:
        cluster.create("pods", make_pod("web-1"))
        path = write_kubeconfig(tmp_path / "config", {"c": cluster})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=settings) as reg:
            with anyio.fail_after(TIMEOUT):
                await reg.watch("c", "pods")

            def dropped_young() -> bool:  # each drop of a watch younger than the rule is one
                if _informer(reg).last_error is not None:
                    return True
                cluster.end_watches()  # a clean end, as the server's timeoutSeconds gives
                return False

            await wait_until(dropped_young, poll=0.05)
            assert "closed at once" in _informer(reg).last_error
            await wait_until(lambda: cluster.open_watches == 1, poll=0.01)
            reopened = anyio.current_time()
            # answered, but younger than the rule: the error still holds
            assert _informer(reg).last_error is not None
            await wait_until(lambda: _informer(reg).last_error is None, registry=reg)
            assert anyio.current_time() - reopened >= rule * 0.9  # cleared by the clock, no sooner
            assert reg.status().contexts["c"].state == "running"
