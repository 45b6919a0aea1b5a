"""Credentials that expire: exec plugins, token files, OIDC, in-cluster, against FakeCluster."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
import yaml

from kubemux import (
    CredentialError,
    KubeconfigError,
    Unauthorized,
    WatchSettings,
    load_kubeconfig,
    parse_resource,
)
from kubemux._auth.exec import ExecProvider
from kubemux._auth.pool import CredentialPool, credential_insensitive, in_cluster_config
from kubemux._http.client import ContextClient, open_client
from kubemux._kubeconfig.load import ContextConfig
from kubemux.testing import FakeCluster, sign_token
from oidc_support import FakeIdP
from support import wait_until

PLUGIN = str(Path(__file__).parent / "plugins" / "exec_plugin.py")
PODS = parse_resource("pods")
KEY = "test-signing-key"


async def _list(client: ContextClient) -> bytes:
    with anyio.fail_after(20):
        return bytes(await client.list(PODS, None, {}, WatchSettings(request_timeout=10)))


def _runs(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _exec_user(log: Path, api: str = "v1", **env: str) -> dict[str, Any]:
    items = [
        {"name": "KMX_PLUGIN_LOG", "value": str(log)},
        {"name": "KMX_PLUGIN_KEY", "value": KEY},
    ]
    items += [{"name": f"KMX_PLUGIN_{k.upper()}", "value": v} for k, v in env.items()]
    return {
        "exec": {
            "apiVersion": f"client.authentication.k8s.io/{api}",
            "command": sys.executable,
            "args": [PLUGIN],
            "env": items,
            "interactiveMode": "Never",
            "provideClusterInfo": True,
        }
    }


def _kubeconfig(
    path: Path, cluster: FakeCluster, users: dict[str, dict[str, Any]], contexts: dict[str, str]
) -> Path:
    entry: dict[str, Any] = {"server": cluster.server}
    if cluster.ca_file:
        entry["certificate-authority"] = cluster.ca_file
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": entry}],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [
            {"name": n, "context": {"cluster": "c", "user": u}} for n, u in contexts.items()
        ],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _contexts(path: Path) -> dict[str, ContextConfig]:
    return dict(load_kubeconfig([str(path)]).contexts)


# ---------------------------------------------------------------------- FakeCluster auth
async def test_fake_cluster_signed_tokens_expire_rotate_and_revoke() -> None:
    async with (
        FakeCluster(signing_key=KEY, newest_only=True) as cluster,
        aiohttp.ClientSession() as s,
    ):
        if True:

            async def status(token: str) -> int:
                headers = {"Authorization": f"Bearer {token}"}
                async with s.get(cluster.server + "/api/v1/pods", headers=headers) as r:
                    return r.status

            old = cluster.sign_token("alice", ttl=60)
            assert await status(old) == 200
            assert await status(sign_token("other-key", "alice", 60)) == 401
            assert await status(cluster.sign_token("alice", ttl=-1)) == 401  # expired
            new = cluster.sign_token("alice", ttl=60)
            assert await status(new) == 200
            assert await status(old) == 401  # only the newest
            cluster.revoke("alice")
            assert await status(new) == 401
            assert await status(cluster.sign_token("alice", ttl=60)) == 200
            assert cluster.unauthorized == 4


async def test_fake_cluster_client_certificates_authenticate_by_common_name(
    tmp_path: Path,
) -> None:
    async with FakeCluster(tls=True, tokens={"t"}) as cluster:
        cert, key = cluster.issue_client_cert("bob")
        (tmp_path / "c").write_bytes(cert)
        (tmp_path / "k").write_bytes(key)
        ctx = cluster.client_ssl_context()
        assert ctx is not None
        ctx.load_cert_chain(tmp_path / "c", tmp_path / "k")
        plain = cluster.client_ssl_context()
        url = cluster.server + "/api/v1/pods"
        async with aiohttp.ClientSession() as s:
            async with s.get(url, ssl=plain) as r:
                assert r.status == 401
            async with s.get(url, ssl=ctx) as r:
                assert r.status == 200
            cluster.revoke("bob")
            async with s.get(url, ssl=ctx) as r:
                assert r.status == 401


# ---------------------------------------------------------------------- exec plugins
async def test_exec_plugin_runs_once_without_stdin_with_exec_info(tmp_path: Path) -> None:
    log = tmp_path / "runs"
    async with FakeCluster(signing_key=KEY) as cluster:
        path = _kubeconfig(
            tmp_path / "config", cluster, {"u": _exec_user(log)}, {"a": "u", "b": "u"}
        )
        ctx = _contexts(path)
        pool = CredentialPool()
        async with (
            open_client(ctx["a"], credentials=pool) as a,
            open_client(ctx["b"], credentials=pool) as b,
        ):
            assert len(pool) == 1
            await _list(a)
            await _list(b)
            status = a.credential_status()
            assert status is not None and status.kind == "exec" and status.refreshes == 1
            assert "sign" not in repr(status) and KEY not in repr(status)
        assert len(pool) == 0
    runs = _runs(log)
    assert len(runs) == 1
    info = runs[0]["info"]
    assert info["apiVersion"] == "client.authentication.k8s.io/v1"
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == cluster.server
    assert runs[0]["stdin_tty"] is False


async def test_ten_requests_hitting_401_together_run_the_plugin_once(tmp_path: Path) -> None:
    log = tmp_path / "runs"
    async with FakeCluster(signing_key=KEY) as cluster:
        path = _kubeconfig(
            tmp_path / "config", cluster, {"u": _exec_user(log, "v1beta1")}, {"a": "u"}
        )
        async with open_client(_contexts(path)["a"]) as client:
            await _list(client)
            cluster.revoke("plugin-user")
            cluster.clear_requests()
            async with anyio.create_task_group() as tg:
                for _ in range(10):
                    tg.start_soon(_list, client)
            assert len(_runs(log)) == 2
            # each request: at most one 401, then a retry with the new token
            assert sum(1 for r in cluster.requests if r.path == "/api/v1/pods") <= 20
            status = client.credential_status()
            assert status is not None and status.refreshes == 2 and status.last_error is None


async def test_exec_token_is_refreshed_before_it_expires(tmp_path: Path) -> None:
    log = tmp_path / "runs"
    async with FakeCluster(signing_key=KEY, newest_only=True) as cluster:
        path = _kubeconfig(
            tmp_path / "config", cluster, {"u": _exec_user(log, ttl="2")}, {"a": "u"}
        )
        async with open_client(_contexts(path)["a"]) as client:
            await _list(client)
            status = client.credential_status()
            assert status is not None and status.expires_at is not None
            with anyio.fail_after(5):
                # the wall clock passing the expiry: there is nothing to wait on
                while time.time() < status.expires_at:  # noqa: ASYNC110
                    await anyio.sleep(0.1)
            await _list(client)
        assert len(_runs(log)) == 2
        assert cluster.unauthorized == 0


async def test_a_token_the_server_rejects_is_reported_and_cleared_on_success(
    tmp_path: Path,
) -> None:
    log = tmp_path / "runs"
    async with FakeCluster(tokens={"good"}) as cluster:
        user = _exec_user(log, token="bad")
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u"})
        async with open_client(_contexts(path)["a"]) as client:
            with pytest.raises(Unauthorized, match=r"exec plugin .* returned a token the server"):
                await _list(client)
            status = client.credential_status()
            assert status is not None and status.last_error is not None
            assert "returned a token the server rejects" in status.last_error
            assert "bad" not in status.last_error
            with pytest.raises(Unauthorized):  # backing off: the plugin is not run again
                await _list(client)
            assert len(_runs(log)) == 2
            cluster.tokens.add("bad")
            await _list(client)
            status = client.credential_status()
            assert status is not None and status.last_error is None


async def test_plugin_failure_keeps_stderr_in_the_message(tmp_path: Path) -> None:
    log = tmp_path / "runs"
    async with FakeCluster(signing_key=KEY) as cluster:
        user = _exec_user(log, fail="login required: run aws sso login")
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u"})
        with pytest.raises(CredentialError, match="exit code 1: login required"):
            async with open_client(_contexts(path)["a"]):
                pass


async def test_a_hanging_plugin_is_killed_on_timeout_and_on_cancellation(tmp_path: Path) -> None:
    log = tmp_path / "runs"
    async with FakeCluster(signing_key=KEY) as cluster:
        path = _kubeconfig(
            tmp_path / "config", cluster, {"u": _exec_user(log, hang="60")}, {"a": "u"}
        )
        cfg = _contexts(path)["a"]
        with pytest.raises(CredentialError, match=r"did not answer within 0\.5 s"):
            async with open_client(cfg, credentials=CredentialPool(exec_timeout=0.5)):
                pass
        # loaded, the plugin may not even have logged its run within 0.5 s: found by its
        # environment instead of its pid
        assert _survivors(log) == [] and _zombie_children() == []
        logged = len(_runs(log))
        async with anyio.create_task_group() as tg:

            async def start() -> None:
                async with open_client(cfg):
                    pass

            tg.start_soon(start)
            await wait_until(lambda: len(_runs(log)) > logged)  # another process writes it
            tg.cancel_scope.cancel()
        assert _gone(_runs(log)[logged]["pid"])


async def test_a_call_cancelled_while_the_plugin_starts_kills_its_process_group(
    tmp_path: Path,
) -> None:
    """Cancelled at each turn of the event loop from before the spawn to after it: the
    cancellation once landed while asyncio still connected the new process's pipes (the
    plugin already running), before the provider held the process: asyncio killed only
    the direct child, without waiting, and a wrapper's plugin lived on."""
    log = tmp_path / "runs"
    user = _exec_user(log, hang="60")["exec"]
    user["command"] = "sh"
    user["args"] = ["-c", f"'{sys.executable}' '{PLUGIN}'; true"]  # the plugin: a grandchild
    try:
        for turns in range(16):
            provider = ExecProvider(user, cluster=None)
            async with anyio.create_task_group() as tg:
                tg.start_soon(provider.current)
                for _ in range(turns):
                    await anyio.lowlevel.checkpoint()
                tg.cancel_scope.cancel()
            assert _zombie_children() == [], turns  # each one it started was waited for
            await wait_until(lambda: not _survivors(log))  # killed with its group
    finally:
        for pid in _survivors(log):
            os.kill(pid, signal.SIGKILL)


def _survivors(log: Path) -> list[int]:
    """Live processes started for ``log`` (the plugins and their wrappers of one test),
    found by their environment: whether or not they got as far as logging their run."""
    mark = f"KMX_PLUGIN_LOG={log}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if mark in handle.read().split(b"\0"):
                    pids.append(int(entry))
        except (OSError, ValueError):
            continue  # not a process, gone meanwhile, or another user's
    return pids


def _zombie_children() -> list[int]:
    """This process's children that ended and were never waited for."""
    zombies = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            zombies.append(int(entry))
    return zombies


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_interactive_mode_always_is_refused(tmp_path: Path) -> None:
    async with FakeCluster(signing_key=KEY) as cluster:
        user = _exec_user(tmp_path / "runs")
        user["exec"]["interactiveMode"] = "Always"
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u"})
        with pytest.raises(KubeconfigError, match="no terminal"):
            async with open_client(_contexts(path)["a"]):
                pass


async def test_contexts_sharing_an_exec_certificate_user_do_not_race(tmp_path: Path) -> None:
    log = tmp_path / "runs"
    async with FakeCluster(tls=True, signing_key=KEY) as cluster:
        cert, key = cluster.issue_client_cert("carol")
        (tmp_path / "cert").write_bytes(cert)
        (tmp_path / "key").write_bytes(key)
        user = _exec_user(log, cert=str(tmp_path / "cert"), certkey=str(tmp_path / "key"))
        user["exec"]["env"] = [e for e in user["exec"]["env"] if e["name"] != "KMX_PLUGIN_KEY"]
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u", "b": "u"})
        ctx = _contexts(path)
        pool = CredentialPool()
        async with (
            open_client(ctx["a"], credentials=pool) as a,
            open_client(ctx["b"], credentials=pool) as b,
        ):
            await _list(a)
            await _list(b)
            assert len(_runs(log)) == 1
            # the certificate is revoked; the plugin now hands out a new one
            cluster.revoke("carol")
            cert, key = cluster.issue_client_cert("carol")
            (tmp_path / "cert").write_bytes(cert)
            (tmp_path / "key").write_bytes(key)
            await _list(a)
            await _list(b)
            assert len(_runs(log)) == 2
            assert cluster.unauthorized == 1


# ---------------------------------------------------------------------- token files
async def test_token_file_is_reread_after_a_401_without_restarting(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("one\n")
    async with FakeCluster(tokens={"one"}) as cluster:
        path = _kubeconfig(
            tmp_path / "config", cluster, {"u": {"tokenFile": str(token_file)}}, {"a": "u"}
        )
        async with open_client(_contexts(path)["a"]) as client:
            await _list(client)
            token_file.write_text("two\n")
            cluster.tokens.clear()
            cluster.tokens.add("two")
            cluster.clear_requests()
            await _list(client)
            assert [r.token for r in cluster.requests] == ["one", "two"]
            status = client.credential_status()
            assert status is not None and status.kind == "token-file" and status.refreshes == 2


async def test_token_file_is_reread_once_its_period_passed(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("one")
    async with FakeCluster(tokens={"one", "two"}) as cluster:
        path = _kubeconfig(
            tmp_path / "config", cluster, {"u": {"tokenFile": str(token_file)}}, {"a": "u"}
        )
        pool = CredentialPool(token_file_period=0.0)
        async with open_client(_contexts(path)["a"], credentials=pool) as client:
            token_file.write_text("two")
            cluster.clear_requests()
            await _list(client)
            assert [r.token for r in cluster.requests] == ["two"]


# ---------------------------------------------------------------------- OIDC
async def test_oidc_refresh_writes_back_and_keeps_the_rest_of_the_file(tmp_path: Path) -> None:
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=3600) as idp:
        provider = idp.provider(**{"client-secret": "s3cret"})
        expired = provider["config"]["id-token"]
        users = {"oidc": {"auth-provider": provider}, "other": {"token": "x"}}
        path = _kubeconfig(tmp_path / "config", cluster, users, {"a": "oidc", "b": "other"})
        before = _contexts(path)["a"]
        async with open_client(before) as client:
            await _list(client)
            status = client.credential_status()
            assert status is not None and status.kind == "oidc" and status.last_error is None
        assert idp.spent == ["r0"]
        doc = yaml.safe_load(path.read_text())
        saved = doc["users"][0]["user"]["auth-provider"]["config"]
        assert saved["refresh-token"] == "r1" and saved["id-token"] != expired
        assert saved["client-secret"] == "s3cret"
        assert doc["users"][1] == {"name": "other", "user": {"token": "x"}}
        # only credential material changed: the credential-insensitive view is the same
        after = yaml.safe_load(path.read_text())["users"][0]["user"]
        assert credential_insensitive(after) == credential_insensitive(users["oidc"])
        # a second client reads the saved id-token instead of spending r1
        async with open_client(_contexts(path)["a"]) as client:
            await _list(client)
        assert idp.spent == ["r0"]


async def test_oidc_never_spends_a_refresh_token_it_cannot_save(tmp_path: Path) -> None:
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=3600) as idp:
        provider = idp.provider()
        path = _kubeconfig(
            tmp_path / "config", cluster, {"u": {"auth-provider": provider}}, {"a": "u"}
        )
        cfg = _contexts(path)["a"]
        path.unlink()  # the file it came from is gone: nowhere to save a successor
        with pytest.raises(CredentialError, match="not spent"):
            async with open_client(cfg):
                pass
        assert idp.spent == []


async def test_oidc_idp_tls_is_verified(tmp_path: Path) -> None:
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=3600) as idp:
        provider = idp.provider(trusted=False)
        path = _kubeconfig(
            tmp_path / "config", cluster, {"u": {"auth-provider": provider}}, {"a": "u"}
        )
        with pytest.raises(
            CredentialError, match=r"discovery document failed: .*CERTIFICATE_VERIFY"
        ):
            async with open_client(_contexts(path)["a"]):
                pass
        assert idp.spent == []


@pytest.mark.parametrize(
    ("name", "hint"), [("gcp", "gke-gcloud-auth-plugin"), ("azure", "kubelogin")]
)
async def test_removed_auth_providers_name_their_replacement(
    tmp_path: Path, name: str, hint: str
) -> None:
    # the kubeconfig loader refuses them (the context is invalid, with the hint); the
    # credential pool would refuse them the same way for a ContextConfig built otherwise
    async with FakeCluster() as cluster:
        user = {"auth-provider": {"name": name, "config": {}}}
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u"})
        snapshot = load_kubeconfig([str(path)])
        assert "a" not in snapshot.contexts
        assert hint in snapshot.invalid["a"]


# ---------------------------------------------------------------------- in-cluster
async def test_in_cluster_context_uses_the_rotating_token_file(tmp_path: Path) -> None:
    async with FakeCluster(tokens={"sa-1"}) as cluster:
        root = tmp_path / "sa"
        root.mkdir()
        (root / "token").write_text("sa-1")
        (root / "namespace").write_text("kube-system\n")
        assert in_cluster_config(str(root), environ={}) is None
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(cluster.port)}
        cfg = in_cluster_config(str(root), environ=env)
        assert cfg is not None and cfg.name == "in-cluster" and cfg.namespace == "kube-system"
        # FakeCluster serves plain HTTP here; a pod's API server is HTTPS with root/ca.crt
        cfg = ContextConfig.from_dict(
            "in-cluster",
            {
                **cfg.client_config(),
                "clusters": [{"name": "in-cluster", "cluster": {"server": cluster.server}}],
            },
        )
        async with open_client(cfg) as client:
            await _list(client)
            (root / "token").write_text("sa-2")
            cluster.tokens.add("sa-2")
            cluster.tokens.discard("sa-1")
            await _list(client)
            status = client.credential_status()
            assert status is not None and status.kind == "token-file" and status.refreshes == 2


# ---------------------------------------------------------------------- kubectl agrees
def _kubectl_132() -> str | None:
    found = shutil.which("kubectl")
    if found is None:
        return None
    real = os.path.join(os.path.dirname(os.path.realpath(found)), "kubectl.1.32")
    return real if os.path.exists(real) else None


@pytest.mark.skipif(_kubectl_132() is None, reason="kubectl 1.32 not installed")
async def test_kubectl_runs_the_same_plugin_with_the_same_exec_info(tmp_path: Path) -> None:
    kubectl = _kubectl_132()
    assert kubectl is not None
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    async with FakeCluster(tls=True, signing_key=KEY, newest_only=True) as cluster:
        cluster.create("pods", {"metadata": {"name": "web-1"}})
        for log in (ours, theirs):
            path = _kubeconfig(
                tmp_path / f"config-{log.name}",
                cluster,
                {"u": _exec_user(log, ttl="60")},
                {"a": "u"},
            )
        async with open_client(_contexts(tmp_path / "config-ours")["a"]) as client:
            assert b"web-1" in await _list(client)
        for _ in range(2):  # each kubectl process runs the plugin once, with a newer token
            with anyio.fail_after(60):
                result = await anyio.run_process(
                    [
                        kubectl,
                        "--kubeconfig",
                        str(path),
                        "--context",
                        "a",
                        "get",
                        "pods",
                        "-o",
                        "name",
                    ],
                    check=False,
                )
            assert result.returncode == 0, result.stderr.decode()[-500:]
            assert result.stdout.decode().strip() == "pod/web-1"
        # a new client of ours runs the plugin again, as kubectl does per process
        async with open_client(_contexts(tmp_path / "config-ours")["a"]) as client:
            assert b"web-1" in await _list(client)
    assert len(_runs(theirs)) == 2
    assert len(_runs(ours)) == 2
    mine, kubectls = _runs(ours)[0]["info"], _runs(theirs)[0]["info"]
    assert mine["apiVersion"] == kubectls["apiVersion"]
    assert mine["spec"]["interactive"] == kubectls["spec"]["interactive"] is False
    assert mine["spec"]["cluster"]["server"] == kubectls["spec"]["cluster"]["server"]
    assert (
        mine["spec"]["cluster"]["certificate-authority-data"]
        == (kubectls["spec"]["cluster"]["certificate-authority-data"])
    )
    assert mine["spec"]["cluster"] == kubectls["spec"]["cluster"]


@pytest.mark.skipif(_kubectl_132() is None, reason="kubectl 1.32 not installed")
async def test_kubectl_reruns_the_plugin_after_revocation_and_expiry(tmp_path: Path) -> None:
    kubectl = _kubectl_132()
    assert kubectl is not None
    log = tmp_path / "runs"
    ours = tmp_path / "ours"
    counts: dict[str, int] = {}

    async def kubectl_side(cluster: FakeCluster) -> None:
        path = _kubeconfig(
            tmp_path / "config", cluster, {"u": _exec_user(log, ttl="4")}, {"a": "u"}
        )
        argv = [
            *(kubectl, "--kubeconfig", str(path), "--context", "a"),
            *("wait", "--for=delete", "pod/web-1", "--timeout=60s"),
        ]
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def run() -> None:
                result.append(await anyio.run_process(argv, check=False))

            tg.start_soon(run)
            with anyio.fail_after(30):
                await cluster.wait_for(lambda: cluster.open_watches == 1, timeout=30)
                cluster.revoke("plugin-user")
                cluster.drop_watches()
                await cluster.wait_for(
                    lambda: len(_runs(log)) >= 2 and cluster.open_watches == 1, timeout=30
                )
                counts["kubectl revoked"] = cluster.unauthorized
                expiry = _runs(log)[-1]["time"] + 4
                while time.time() < expiry:  # noqa: ASYNC110 - the wall clock passing the expiry
                    await anyio.sleep(0.1)
                cluster.drop_watches()
                await cluster.wait_for(
                    lambda: len(_runs(log)) >= 3 and cluster.open_watches == 1, timeout=30
                )
                cluster.delete("pods", "default", "web-1")
        assert result[0].returncode == 0, result[0].stderr.decode()[-800:]
        counts["kubectl"] = cluster.unauthorized

    async def kubemux_side(cluster: FakeCluster) -> None:
        path = _kubeconfig(
            tmp_path / "ours.yaml", cluster, {"u": _exec_user(ours, ttl="4")}, {"a": "u"}
        )
        async with open_client(_contexts(path)["a"]) as client:
            await _list(client)
            cluster.revoke("plugin-user")
            await _list(client)
            counts["ours revoked"] = cluster.unauthorized
            with anyio.fail_after(10):
                while time.time() < _runs(ours)[-1]["time"] + 4:  # noqa: ASYNC110 - wall clock
                    await anyio.sleep(0.1)
            await _list(client)
        counts["ours"] = cluster.unauthorized

    # kubemux against a cluster of its own, the same plugin: both wait out a 4 s expiry at once
    async with (
        FakeCluster(tls=True, signing_key=KEY, newest_only=True) as cluster,
        FakeCluster(tls=True, signing_key=KEY, newest_only=True) as our_cluster,
        anyio.create_task_group() as tg,
    ):
        cluster.create("pods", {"metadata": {"name": "web-1"}})
        our_cluster.create("pods", {"metadata": {"name": "web-1"}})
        tg.start_soon(kubectl_side, cluster)
        tg.start_soon(kubemux_side, our_cluster)
    # kubectl: one run at start, one after the revocation (after one 401), one at expiry
    assert len(_runs(log)) == 3
    assert counts["kubectl revoked"] == 1 and counts["kubectl"] == 1
    # kubemux: the same runs, no more 401s
    assert len(_runs(ours)) == 3
    assert counts["ours revoked"] == 1 and counts["ours"] == 1


async def test_a_socks4_proxy_is_refused_clearly(tmp_path: Path) -> None:
    # socks5 works (tests/test_socks.py); kubectl, too, speaks no SOCKS4
    async with FakeCluster() as cluster:
        path = _kubeconfig(tmp_path / "config", cluster, {"u": {}}, {"a": "u"})
        doc = yaml.safe_load(path.read_text())
        doc["clusters"][0]["cluster"]["proxy-url"] = "socks4://user:pw@127.0.0.1:1080"
        path.write_text(yaml.safe_dump(doc))
        snapshot = load_kubeconfig([str(path)])
        assert "a" not in snapshot.contexts
        assert "socks" in snapshot.invalid["a"] and "pw" not in snapshot.invalid["a"]


async def test_oidc_refuses_to_spend_when_the_file_lacks_the_entry(tmp_path: Path) -> None:
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=3600) as idp:
        provider = idp.provider()
        path = _kubeconfig(
            tmp_path / "config", cluster, {"u": {"auth-provider": provider}}, {"a": "u"}
        )
        cfg = _contexts(path)["a"]
        doc = yaml.safe_load(path.read_text())
        doc["users"][0]["name"] = "renamed"
        path.write_text(yaml.safe_dump(doc))
        with pytest.raises(CredentialError, match="not spent"):
            async with open_client(cfg):
                pass
        assert idp.spent == []


@pytest.mark.parametrize("material", ["token", "certificate"])
async def test_a_refreshed_credential_keeps_informers_caches_and_resource_versions(
    tmp_path: Path, material: str
) -> None:
    from kubemux import WatcherRegistry

    log = tmp_path / "runs"
    async with FakeCluster(tls=True, signing_key=KEY, newest_only=True) as cluster:
        for i in range(3):
            cluster.create("pods", {"metadata": {"name": f"p-{i}"}})
        if material == "certificate":
            cert, key = cluster.issue_client_cert("plugin-user")
            (tmp_path / "cert").write_bytes(cert)
            (tmp_path / "key").write_bytes(key)
            user = _exec_user(log, cert=str(tmp_path / "cert"), certkey=str(tmp_path / "key"))
            user["exec"]["env"] = [e for e in user["exec"]["env"] if e["name"] != "KMX_PLUGIN_KEY"]
        else:
            user = _exec_user(log)
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u"})
        async with WatcherRegistry.from_kubeconfig([str(path)], follow=False) as registry:
            with anyio.fail_after(20):
                store = await registry.watch("a", "pods")
            generation = registry.status().contexts["a"].generation
            kinds: list[str] = []
            async with registry.subscribe(resource="pods") as changes:
                await cluster.wait_for(lambda: cluster.open_watches == 1, timeout=20)
                cluster.revoke("plugin-user")
                if material == "certificate":
                    cert, key = cluster.issue_client_cert("plugin-user")
                    (tmp_path / "cert").write_bytes(cert)
                    (tmp_path / "key").write_bytes(key)
                cluster.drop_watches()
                await cluster.wait_for(lambda: len(_runs(log)) == 2, timeout=20)
                cluster.create("pods", {"metadata": {"name": "after"}})
                with anyio.fail_after(20):
                    async for change in changes:
                        kinds.append(change.type)
                        if change.type == "ADDED" and change.name == "after":
                            break
            status = registry.status().contexts["a"]
            assert status.generation == generation and status.state == "running"
            assert "RESET" not in kinds
            assert sum(i.relists for i in status.informers) == 0
            assert {o["metadata"]["name"] for o in store.list()} == {"p-0", "p-1", "p-2", "after"}
        assert len(_runs(log)) == 2
        assert cluster.unauthorized >= 1  # the revoked credential was refused, then replaced


_V1 = "client.authentication.k8s.io/v1"


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("not json", "not JSON"),
        (json.dumps({"kind": "Other", "apiVersion": _V1}), "did not print an ExecCredential"),
        (
            json.dumps({"kind": "ExecCredential", "apiVersion": _V1 + "beta1", "status": {}}),
            "answered with apiVersion",
        ),
        (json.dumps({"kind": "ExecCredential", "apiVersion": _V1}), "has no status"),
        (
            json.dumps({"kind": "ExecCredential", "apiVersion": _V1, "status": {}}),
            "neither a token nor a certificate",
        ),
        (
            json.dumps(
                {
                    "kind": "ExecCredential",
                    "apiVersion": _V1,
                    "status": {"token": "t", "expirationTimestamp": "tomorrow\x1b[2J"},
                }
            ),
            r"expirationTimestamp 'tomorrow\\\\x1b\[2J' is not an RFC 3339 time",
        ),
        (
            json.dumps(
                {"kind": "ExecCredential", "apiVersion": _V1, "status": {"clientKeyData": "k"}}
            ),
            "come together",
        ),
    ],
)
async def test_bad_plugin_output_is_a_clear_error(
    tmp_path: Path, output: str, message: str
) -> None:
    async with FakeCluster(signing_key=KEY) as cluster:
        user = {
            "exec": {
                "apiVersion": _V1,
                "command": sys.executable,
                "args": ["-c", f"import sys; sys.stdout.write({output!r})"],
                "interactiveMode": "Never",
            }
        }
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u"})
        with pytest.raises(CredentialError, match=message) as info:
            async with open_client(_contexts(path)["a"]):
                pass
        assert "\x1b" not in str(info.value)


@pytest.mark.parametrize(
    "config",
    [
        {"client-id": 123, "id-token": "x"},
        {"id-token": 5},
        {"idp-certificate-authority-data": 7},
        {"idp-certificate-authority-data": "not base64!"},
        {"refresh-token": ["a"]},
    ],
)
async def test_odd_oidc_entries_are_kubeconfig_errors(
    tmp_path: Path, config: dict[str, Any]
) -> None:
    async with FakeCluster(tokens=set()) as cluster:
        user = {"auth-provider": {"name": "oidc", "config": config}}
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u"})
        with pytest.raises((KubeconfigError, CredentialError)):
            async with open_client(_contexts(path)["a"]):
                pass


async def test_a_missing_plugin_shows_its_install_hint(tmp_path: Path) -> None:
    async with FakeCluster(signing_key=KEY) as cluster:
        user = {
            "exec": {
                "apiVersion": _V1,
                "command": "kubemux-no-such-plugin",
                "interactiveMode": "IfAvailable",
                "installHint": "install it with: pip install no-such-plugin",
            }
        }
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u"})
        with pytest.raises(CredentialError, match=r"could not be started.*pip install no-such"):
            async with open_client(_contexts(path)["a"]):
                pass


@pytest.mark.parametrize(("cluster_info", "providers", "runs"), [(False, 1, 1), (True, 2, 2)])
async def test_one_provider_per_user_across_clusters_unless_the_plugin_sees_the_cluster(
    tmp_path: Path, cluster_info: bool, providers: int, runs: int
) -> None:
    log = tmp_path / "runs"
    async with FakeCluster(signing_key=KEY) as one, FakeCluster(signing_key=KEY) as two:
        user = _exec_user(log)
        user["exec"]["provideClusterInfo"] = cluster_info
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "one", "cluster": {"server": one.server}},
                {"name": "two", "cluster": {"server": two.server}},
            ],
            "users": [{"name": "u", "user": user}],
            "contexts": [
                {"name": "a", "context": {"cluster": "one", "user": "u"}},
                {"name": "b", "context": {"cluster": "two", "user": "u"}},
            ],
        }
        path = tmp_path / "config"
        path.write_text(yaml.safe_dump(doc))
        ctx = _contexts(path)
        pool = CredentialPool()
        async with (
            open_client(ctx["a"], credentials=pool) as a,
            open_client(ctx["b"], credentials=pool) as b,
        ):
            assert len(pool) == providers
            await _list(a)
            await _list(b)
            assert len(pool.status()) == providers
    assert len(_runs(log)) == runs


async def test_a_rotated_token_file_keeps_informers_caches(tmp_path: Path) -> None:
    from kubemux import WatcherRegistry

    token_file = tmp_path / "token"
    token_file.write_text("sa-1")
    async with FakeCluster(tokens={"sa-1"}) as cluster:
        cluster.create("pods", {"metadata": {"name": "p-0"}})
        user = {"tokenFile": str(token_file)}
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u"})
        async with WatcherRegistry.from_kubeconfig([str(path)], follow=True) as registry:
            with anyio.fail_after(20):
                store = await registry.watch("a", "pods")
            generation = registry.status().contexts["a"].generation
            kinds: list[str] = []
            async with registry.subscribe(resource="pods") as changes:
                await cluster.wait_for(lambda: cluster.open_watches == 1, timeout=20)
                token_file.write_text("sa-2")
                cluster.tokens.clear()
                cluster.tokens.add("sa-2")
                cluster.drop_watches()
                await cluster.wait_for(lambda: cluster.open_watches_for("sa-2") == 1, timeout=20)
                cluster.create("pods", {"metadata": {"name": "after"}})
                with anyio.fail_after(20):
                    async for change in changes:
                        kinds.append(change.type)
                        if change.type == "ADDED" and change.name == "after":
                            break
            status = registry.status().contexts["a"]
            assert status.generation == generation and status.state == "running"
            assert "RESET" not in kinds
            assert sum(i.relists for i in status.informers) == 0
            assert {o["metadata"]["name"] for o in store.list()} == {"p-0", "after"}
        assert cluster.unauthorized == 1


async def test_a_wrapped_plugin_is_killed_with_its_children(tmp_path: Path) -> None:
    log = tmp_path / "runs"
    async with FakeCluster(signing_key=KEY) as cluster:
        user = _exec_user(log, hang="60")
        user["exec"]["command"] = "sh"
        user["exec"]["args"] = ["-c", f"'{sys.executable}' '{PLUGIN}'; true"]
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u"})
        with pytest.raises(CredentialError, match="did not answer"):
            async with open_client(
                _contexts(path)["a"], credentials=CredentialPool(exec_timeout=1)
            ):
                pass
        child = _runs(log)[0]["pid"]
        await wait_until(lambda: _gone(child))  # an unrelated process: polled


async def test_a_failed_refresh_ahead_of_expiry_keeps_the_working_credential(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("one")
    async with FakeCluster(tokens={"one"}) as cluster:
        user = {"tokenFile": str(token_file)}
        path = _kubeconfig(tmp_path / "config", cluster, {"u": user}, {"a": "u"})
        pool = CredentialPool(token_file_period=0.0)
        async with open_client(_contexts(path)["a"], credentials=pool) as client:
            token_file.unlink()  # mid-rotation, say
            cluster.clear_requests()
            await _list(client)
            assert [r.token for r in cluster.requests] == ["one"]
            await _list(client)  # not retried on every request
            status = client.credential_status()
            assert status is not None and status.refreshes == 1
            assert status.last_error is not None and "cannot read it" in status.last_error
        assert len(cluster.requests) == 2
