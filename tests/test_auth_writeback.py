"""OIDC write-back under kubectl's lock: no lost kubectl edit, no spent refresh token lost.

Against FakeIdP (one-time refresh tokens: a spent one is refused and recorded), a real
kubectl-style writer process (tests/kubectl_writer.py: client-go's ``<file>.lock``, truncate and
write in place) and kubemux's own concurrent refreshes of many users of one file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
import yaml

from kubemux import CredentialError, WatchSettings, load_kubeconfig, parse_resource
from kubemux._auth.pool import CredentialPool
from kubemux._auth.writeback import kubeconfig_lock
from kubemux._http.client import ContextClient, open_client
from kubemux._kubeconfig.load import ContextConfig
from kubemux.testing import FakeCluster
from oidc_support import FakeIdP, kubeconfig_file, provider_config

PODS = parse_resource("pods")
WRITER = str(Path(__file__).parent / "kubectl_writer.py")


async def _list(client: ContextClient) -> None:
    with anyio.fail_after(20):
        await client.list(PODS, None, {}, WatchSettings(request_timeout=10))


def _exists(path: str | Path) -> bool:
    return os.path.exists(path)


def _touch(path: str) -> None:
    with open(path, "w"):
        pass


def _locked(path: Path) -> bool:
    """Is client-go's lock file of ``path`` there?"""
    return os.path.exists(f"{path}.lock")


def _contexts(path: Path) -> dict[str, ContextConfig]:
    return dict(load_kubeconfig([str(path)]).contexts)


async def _keep_listing(client: ContextClient, done: anyio.Event) -> None:
    """Requests until ``done``: each one asks the provider, which refreshes when due."""
    while not done.is_set():
        await _list(client)
        await anyio.sleep(0.01)  # pacing, not synchronisation


async def test_a_kubectl_writer_loses_no_edit_and_no_refresh_token(tmp_path: Path) -> None:
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=0.5) as idp:
        users = {f"u{i}": {"auth-provider": idp.provider(chain=f"u{i}-")} for i in range(3)}
        path = kubeconfig_file(tmp_path / "config", cluster, users, {u: u for u in users})
        configs = _contexts(path)
        result = tmp_path / "writer.json"
        done = anyio.Event()
        pool, other = CredentialPool(), CredentialPool()  # "other": a second kubemux process
        async with anyio.create_task_group() as tg:

            async def client(
                config: ContextConfig,
                pool: CredentialPool,
                *,
                task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
            ) -> None:
                async with open_client(config, credentials=pool) as c:
                    await _list(c)
                    task_status.started()
                    await _keep_listing(c, done)

            with anyio.fail_after(30):  # every client up (and refreshed once) before kubectl
                for name in users:
                    await tg.start(client, configs[name], pool)
                await tg.start(client, configs["u0"], other)
            before = len(idp.spent)
            writer = await anyio.open_process(
                [sys.executable, WRITER, str(path), "3", str(result), "20"],
                stdout=None,
                stderr=None,
            )
            async with writer:
                with anyio.fail_after(60):  # 3 s, or as long as 20 edits take
                    await writer.wait()
            done.set()
        assert writer.returncode == 0
        summary = json.loads(result.read_text())
        assert summary["edits"] >= 20, summary
        names = {c["name"] for c in yaml.safe_load(path.read_text())["contexts"]}
        lost = [i for i in range(summary["edits"]) if f"edit-{i}" not in names]
        assert lost == [], f"{len(lost)} of {summary['edits']} kubectl edits lost"
        assert idp.refused == [], "a refresh presented a refresh token already spent"
        assert len(idp.spent) - before >= 3, idp.spent  # refreshes happened while kubectl wrote
        for name in users:
            assert provider_config(path, name)["refresh-token"] == idp.newest[f"{name}-"]
        assert not _locked(path)


async def test_eight_users_of_one_file_never_present_a_spent_refresh_token(
    tmp_path: Path,
) -> None:
    # a laptop waking up: every id-token expired, 1 s tokens, 8 users of one kubeconfig
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=1.0) as idp:
        users = {f"u{i}": {"auth-provider": idp.provider(chain=f"u{i}-")} for i in range(8)}
        path = kubeconfig_file(tmp_path / "config", cluster, users, {u: u for u in users})
        configs = _contexts(path)
        done = anyio.Event()
        pool = CredentialPool()
        async with anyio.create_task_group() as tg:

            async def client(config: ContextConfig) -> None:
                async with open_client(config, credentials=pool) as c:
                    await _keep_listing(c, done)

            for name in users:
                tg.start_soon(client, configs[name])
            await anyio.sleep(5)  # the scenario's duration, not a synchronisation
            done.set()
        assert idp.refused == [], f"{len(idp.refused)} refreshes presented a spent token"
        assert len(idp.spent) >= 16, len(idp.spent)  # 8 initial, then at least one more each
        stale = [
            n for n in users if provider_config(path, n)["refresh-token"] != idp.newest[f"{n}-"]
        ]
        assert stale == [], f"{len(stale)} of 8 users ended with an old refresh token"
        assert _contexts(path).keys() == users.keys()


async def test_a_stale_lock_is_waited_for_then_nothing_is_spent(tmp_path: Path) -> None:
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=3600) as idp:
        provider = idp.provider()
        path = kubeconfig_file(
            tmp_path / "config", cluster, {"u": {"auth-provider": provider}}, {"a": "u"}
        )
        lock = f"{path}.lock"
        _touch(lock)  # a kubectl that crashed while holding it
        pool = CredentialPool(kubeconfig_lock_timeout=0.3)
        with pytest.raises(CredentialError, match=r"not spent.*config\.lock exists") as caught:
            async with open_client(_contexts(path)["a"], credentials=pool):
                pass
        assert "remove the lock file" in str(caught.value)
        assert idp.spent == []
        assert _exists(lock)  # never broken: it is someone else's
        os.unlink(lock)
        async with open_client(_contexts(path)["a"], credentials=pool) as client:
            await _list(client)
        assert idp.spent == ["r0"] and not _locked(path)


@pytest.mark.parametrize(
    "content",
    [b"users: [\n  - name: u\n", b"users: 5\n", b"", b"kind: Other\n"],
    ids=["bad-yaml", "bad-schema", "empty", "not-a-config"],
)
async def test_a_file_broken_at_refresh_time_is_not_spent_against(
    tmp_path: Path, content: bytes
) -> None:
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=3600) as idp:
        provider = idp.provider()
        path = kubeconfig_file(
            tmp_path / "config", cluster, {"u": {"auth-provider": provider}}, {"a": "u"}
        )
        config = _contexts(path)["a"]
        path.write_bytes(content)
        with pytest.raises(CredentialError, match="not spent") as caught:
            async with open_client(config):
                pass
        assert str(path) in str(caught.value)
        assert idp.spent == []
        assert path.read_bytes() == content
        assert not _locked(path)


_SECRET = "SECRET-VALUE"


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"id_token": "a.b.c", "refresh_token": {"k": _SECRET}}, "refresh_token that is a mapping"),
        ({"id_token": "a.b.c", "refresh_token": 5}, "refresh_token that is a number"),
        ({"id_token": "a.b.c", "refresh_token": [_SECRET]}, "refresh_token that is a list"),
        ({"id_token": "a.b.c", "refresh_token": f"{_SECRET}\n"}, "refresh_token with a line break"),
        ({"id_token": f"{_SECRET}\nX-Evil: 1", "refresh_token": "n"}, "id_token with a line break"),
        (
            {"id_token": f"{_SECRET}\x00", "refresh_token": "n"},
            "id_token with a line break or a control",
        ),
        ({"id_token": f"{_SECRET}\x1b[2J"}, "id_token with a line break or a control"),
        ({"id_token": f"{_SECRET}\u00e9", "refresh_token": "n"}, "id_token with non-ASCII"),
        ({"id_token": 7, "refresh_token": "n"}, "id_token that is a number"),
        ({"id_token": "", "refresh_token": "n"}, "empty id_token"),
        ({"refresh_token": "n"}, "has no id_token"),
        ([_SECRET], "is not a JSON object"),
        (b"[" * 200_000, "not JSON"),
        (b'{"id_token": "' + b"x" * (1 << 20) + b'"}', "larger than 1048576 bytes"),
    ],
    ids=[
        "refresh-object",
        "refresh-number",
        "refresh-list",
        "refresh-newline",
        "id-newline",
        "id-nul",
        "id-escape",
        "id-non-ascii",
        "id-number",
        "id-empty",
        "id-missing",
        "not-object",
        "deep",
        "huge",
    ],
)
async def test_a_bad_identity_provider_answer_is_refused_and_nothing_written(
    tmp_path: Path, answer: Any, problem: str
) -> None:
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=3600) as idp:
        users = {"u": {"auth-provider": idp.provider()}, "other": {"token": "x"}}
        path = kubeconfig_file(tmp_path / "config", cluster, users, {"a": "u", "b": "other"})
        before = path.read_bytes()
        idp.answer = answer
        with pytest.raises(CredentialError) as caught:
            async with open_client(_contexts(path)["a"]):
                pass
        message = str(caught.value)
        assert message.startswith(f"OIDC provider {idp.url}"), message
        assert problem in message, message
        assert _SECRET not in message and "xxxx" not in message
        assert path.read_bytes() == before  # nothing written
        assert set(_contexts(path)) == {"a", "b"}  # the file still loads, every context
        assert not _locked(path)


async def test_a_refresh_cancelled_after_spending_still_saves_the_successor(
    tmp_path: Path,
) -> None:
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=3600) as idp:
        path = kubeconfig_file(
            tmp_path / "config", cluster, {"u": {"auth-provider": idp.provider()}}, {"a": "u"}
        )
        config = _contexts(path)["a"]
        idp.hold = anyio.Event()
        scope = anyio.CancelScope()

        async def start() -> None:
            with scope:
                async with open_client(config):
                    pass

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(start)
                await idp.waiting.wait()  # the refresh token is on its way to the IdP
                scope.cancel()
                idp.hold.set()
        assert idp.spent == ["r0"]
        assert provider_config(path, "u")["refresh-token"] == idp.newest[""]
        assert not _locked(path)


async def test_the_lock_is_named_after_the_path_kubectl_uses(tmp_path: Path) -> None:
    # a symlinked kubeconfig: kubectl locks <link>.lock, the name in $KUBECONFIG
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=3600) as idp:
        real = kubeconfig_file(
            tmp_path / "real", cluster, {"u": {"auth-provider": idp.provider()}}, {"a": "u"}
        )
        link = tmp_path / "config"
        link.symlink_to(real)
        _touch(f"{link}.lock")
        pool = CredentialPool(kubeconfig_lock_timeout=0.2)
        with pytest.raises(CredentialError, match="not spent"):
            async with open_client(_contexts(link)["a"], credentials=pool):
                pass
        assert idp.spent == []
        os.unlink(f"{link}.lock")
        async with open_client(_contexts(link)["a"], credentials=pool) as client:
            await _list(client)
        assert link.is_symlink()  # written through the link, which stays a link
        assert provider_config(real, "u")["refresh-token"] == idp.newest[""]


def _kubectl_132() -> str | None:
    found = shutil.which("kubectl")
    if found is None:
        return None
    real = os.path.join(os.path.dirname(os.path.realpath(found)), "kubectl.1.32")
    return real if os.path.exists(real) else None


async def test_kubectl_honours_the_lock_and_reads_what_was_written(tmp_path: Path) -> None:
    kubectl = _kubectl_132()
    if kubectl is None:
        pytest.skip("kubectl 1.32 is not installed")
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=3600) as idp:
        real = kubeconfig_file(
            tmp_path / "real", cluster, {"u": {"auth-provider": idp.provider()}}, {"a": "u"}
        )
        link = tmp_path / "config"
        link.symlink_to(real)
        env = {**os.environ, "KUBECONFIG": str(link)}

        async def kubectl_run(*args: str) -> subprocess.CompletedProcess[bytes]:
            with anyio.fail_after(30):
                return await anyio.run_process([kubectl, *args], env=env, check=False)

        async with kubeconfig_lock(str(link)):  # kubemux holds it: kubectl must not write
            done = await kubectl_run("config", "set-context", "edit", "--cluster=c")
            assert done.returncode == 1
            assert f"open {link}.lock: file exists" in done.stderr.decode()
        done = await kubectl_run("config", "set-context", "edit", "--cluster=c")
        assert done.returncode == 0, done.stderr
        async with open_client(_contexts(link)["a"]) as client:
            await _list(client)
        view = await kubectl_run("config", "view", "--raw", "-o", "json")
        assert view.returncode == 0, view.stderr
        doc = json.loads(view.stdout)
        saved = doc["users"][0]["user"]["auth-provider"]["config"]
        assert saved["refresh-token"] == idp.newest[""] and idp.spent == ["r0"]
        assert {c["name"] for c in doc["contexts"]} == {"a", "edit"}  # kubectl's edit kept


async def test_a_successor_that_could_not_be_saved_is_kept_and_saved_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the disk is full when the first answer comes back: the refresh token is spent, so the
    # new one is kept in memory, used for the next refresh, and saved then
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=0.5) as idp:
        path = kubeconfig_file(
            tmp_path / "config", cluster, {"u": {"auth-provider": idp.provider()}}, {"a": "u"}
        )
        real_fsync = os.fsync

        def full(fd: int) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fsync", full)
        async with open_client(_contexts(path)["a"]) as client:
            await _list(client)
            assert provider_config(path, "u")["refresh-token"] == "r0"  # not saved
            assert "could not be saved" in caplog.text and "No space left" in caplog.text
            monkeypatch.setattr(os, "fsync", real_fsync)
            with anyio.fail_after(20):
                while len(idp.spent) < 2:
                    await _list(client)
                    await anyio.sleep(0.05)  # pacing: the id-token expires in 0.5 s
        assert idp.refused == []  # the successor, not the spent r0, was presented
        assert provider_config(path, "u")["refresh-token"] == idp.newest[""]
        assert not _locked(path)


async def test_a_hard_linked_kubeconfig_is_written_in_place(tmp_path: Path) -> None:
    # a rename would split the two names: write as client-go does (truncate, write)
    async with FakeCluster(tokens=set()) as cluster, FakeIdP(cluster, ttl=3600) as idp:
        path = kubeconfig_file(
            tmp_path / "config", cluster, {"u": {"auth-provider": idp.provider()}}, {"a": "u"}
        )
        other = tmp_path / "other-name"
        os.link(path, other)
        inode = os.stat(path).st_ino
        async with open_client(_contexts(path)["a"]) as client:
            await _list(client)
        assert os.stat(path).st_ino == inode and os.stat(other).st_ino == inode
        assert provider_config(other, "u")["refresh-token"] == idp.newest[""] == "r1"
