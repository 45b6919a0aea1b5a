"""Exec plugins that do not finish: each error names the plugin, says what it was doing and
that its process group was killed (tests/plugins/stuck_plugin.py, real processes)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from kubemux import CredentialError, StartTimeout, WatcherRegistry, load_kubeconfig
from kubemux._auth.pool import CredentialPool
from kubemux._http.client import open_client
from kubemux.testing import FakeCluster
from oidc_support import kubeconfig_file

STUCK = str(Path(__file__).parent / "plugins" / "stuck_plugin.py")
SECRETS = ("SECRET-ARG", "SECRET-ENV")


def _user(tmp_path: Path, mode: str) -> dict[str, Any]:
    # a wrapper named like a real plugin (exec keeps the process group and the pid)
    wrapper = tmp_path / "stuck-plugin"
    wrapper.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{STUCK}' \"$@\"\n")
    wrapper.chmod(0o755)
    env = {"STUCK_MODE": mode, "STUCK_PID": str(tmp_path / "pid"), "STUCK_SECRET": SECRETS[1]}
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(wrapper),
            "args": [f"--token={SECRETS[0]}"],
            "env": [{"name": k, "value": v} for k, v in env.items()],
            "interactiveMode": "Never",
        }
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie not yet reaped counts as gone
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return False


def _pid(tmp_path: Path) -> int | None:
    try:
        text = (tmp_path / "pid").read_text()
    except FileNotFoundError:
        return None
    return int(text) if text else None


async def _gone(pid: int) -> None:
    with anyio.fail_after(10):
        while _alive(pid):  # noqa: ASYNC110 - another process: nothing to wait on but the OS
            await anyio.sleep(0.02)


def _check_message(message: str, *parts: str) -> None:
    assert message.startswith("exec plugin stuck-plugin "), message
    for part in parts:
        assert part in message, message
    assert "its process group was killed" in message, message
    assert not any(secret in message for secret in SECRETS), message


async def _fails(tmp_path: Path, mode: str, **pool: Any) -> str:
    async with FakeCluster(tokens={"t"}) as cluster:
        path = kubeconfig_file(
            tmp_path / "config", cluster, {"u": _user(tmp_path, mode)}, {"a": "u"}
        )
        config = load_kubeconfig([str(path)]).contexts["a"]
        started = time.monotonic()
        with anyio.fail_after(30), pytest.raises(CredentialError) as caught:
            async with open_client(config, credentials=CredentialPool(**pool)):
                pass
        assert time.monotonic() - started < 20  # well before the 60 s exec limit
        return str(caught.value)


async def test_a_background_child_holding_stdout_is_named_and_killed(tmp_path: Path) -> None:
    message = await _fails(tmp_path, "background")
    _check_message(
        message,
        "exited with code 0, but its output was still open 2 s later (",
        "bytes of output read; does a process it started in the background hold its stdout?",
    )
    child = _pid(tmp_path)
    assert child is not None
    await _gone(child)  # the child was in the plugin's process group


async def test_a_plugin_flooding_stdout_is_cut_at_one_mebibyte(tmp_path: Path) -> None:
    message = await _fails(tmp_path, "flood")
    _check_message(message, "printed more than 1048576 bytes on stdout")


async def test_a_plugin_flooding_stderr_is_cut_too(tmp_path: Path) -> None:
    message = await _fails(tmp_path, "flood-stderr")
    _check_message(message, "wrote more than 1048576 bytes on stderr")
    assert len(message) < 5000  # only the tail of stderr is kept


async def test_a_silent_plugin_times_out_saying_what_it_waited_for(tmp_path: Path) -> None:
    message = await _fails(tmp_path, "silent", exec_timeout=1)
    _check_message(message, "did not answer within 1 s: waiting for the end of its output (0 bytes")
    pid = _pid(tmp_path)
    if pid is not None:  # on a loaded machine it may not have got that far
        await _gone(pid)


async def test_the_start_limit_names_the_hung_plugin(tmp_path: Path) -> None:
    async with FakeCluster(tokens={"t"}) as cluster:
        path = kubeconfig_file(
            tmp_path / "config", cluster, {"u": _user(tmp_path, "silent")}, {"a": "u"}
        )
        async with WatcherRegistry.from_kubeconfig(str(path), start_timeout=2) as registry:
            with anyio.fail_after(30), pytest.raises(StartTimeout) as caught:
                await registry.watch("a", "pods")
        message = str(caught.value)
        assert message.startswith("context 'a' did not start within 2s: exec plugin stuck-plugin")
        assert "was stopped after 2 s, waiting for the end of its output (0 bytes" in message
        assert caught.value.detail is not None and "stuck-plugin" in caught.value.detail
        _check_message(message.split(": ", 1)[1])
        pid = _pid(tmp_path)
        if pid is not None:
            await _gone(pid)
