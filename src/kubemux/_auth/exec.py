"""Exec credential plugins (``client.authentication.k8s.io/v1`` and ``v1beta1``)."""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from typing import Any, Final

import anyio
import anyio.abc
import anyio.lowlevel

from .._errors import CredentialError, KubeconfigError
from .._redact import redact_text, terminal_safe
from .._runtime import fd_exhaustion, too_many_open_files
from .provider import Credential, CredentialProvider, note_interrupted

__all__ = ["EXEC_TIMEOUT", "ExecProvider"]

EXEC_TIMEOUT: Final = 60.0  # seconds an exec plugin may run
_STDERR_LIMIT: Final = 4096  # bytes of a plugin's stderr kept for the error message
_STDOUT_LIMIT: Final = 1 << 20  # bytes of stdout read at most (an ExecCredential is a few KB)
_STDERR_TOTAL: Final = 1 << 20  # bytes of stderr read at most (its last 4 KiB are kept)
_EXIT_GRACE: Final = 2.0  # seconds the output may stay open after the plugin exited
_EXEC_API_VERSIONS: Final = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
)


class ExecProvider(CredentialProvider):
    """``user.exec``: a client-go credential plugin (``client.authentication.k8s.io``).

    Runs without stdin and never interactively (there is no terminal), with
    ``KUBERNETES_EXEC_INFO`` set as client-go sets it, in its own process group, which is
    killed when the plugin does not finish: after ``timeout`` seconds, past 1 MiB of stdout
    (or of stderr), when its stdout is still open 2 s after it exited (a background child
    holding the pipe), and when the call is cancelled. The error names the plugin by its
    command's basename only (its arguments and environment may hold secrets), says what it
    was doing (waiting for the end of its output, how many bytes were read) and that its
    process group was killed; its stderr (the last 4 KiB, redacted) is appended.
    """

    kind = "exec"

    def __init__(
        self,
        spec: Mapping[str, Any],
        *,
        cluster: Mapping[str, Any] | None,
        timeout: float = EXEC_TIMEOUT,
        where: str = "",
    ) -> None:
        command = spec.get("command")
        if not isinstance(command, str) or not command:
            raise KubeconfigError(f"{where}: exec needs a command")
        super().__init__(f"exec plugin {os.path.basename(command)}")
        self.command = command
        args = spec.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise KubeconfigError(f"{where}: exec args must be a list of strings")
        self.args: list[str] = args
        self.api_version = spec.get("apiVersion")
        if self.api_version not in _EXEC_API_VERSIONS:
            raise KubeconfigError(
                f"{where}: exec apiVersion {self.api_version!r} is not supported "
                f"(use one of {', '.join(_EXEC_API_VERSIONS)})"
            )
        mode = spec.get("interactiveMode") or "IfAvailable"
        if mode not in ("Never", "IfAvailable", "Always"):
            raise KubeconfigError(f"{where}: exec interactiveMode {mode!r} is not valid")
        if mode == "Always":
            raise KubeconfigError(
                f"{where}: exec plugin {os.path.basename(command)} needs interactiveMode "
                "Always, but kubemux has no terminal to offer it"
            )
        self.env: dict[str, str] = {}
        for item in spec.get("env") or ():
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise KubeconfigError(f"{where}: exec env entries need a name and a value")
            self.env[item["name"]] = str(item.get("value", ""))
        self.timeout = timeout
        info: dict[str, Any] = {"interactive": False}
        if spec.get("provideClusterInfo") and cluster is not None:
            info["cluster"] = _exec_cluster_info(cluster)
        self.exec_info = json.dumps(
            {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": info},
            separators=(",", ":"),
        )
        hint = spec.get("installHint")
        self.install_hint = terminal_safe(hint.strip()[:500]) if isinstance(hint, str) else ""
        self.runs = 0

    async def _fetch(self) -> Credential:
        env = dict(os.environ)
        env.update(self.env)
        env["KUBERNETES_EXEC_INFO"] = self.exec_info
        self.runs += 1
        started = time.time()
        run = _PluginRun()
        try:
            out, err, code = await _run_plugin([self.command, *self.args], env, self.timeout, run)
        except _PluginStopped as exc:
            raise CredentialError(f"{self.source} {exc}{_stderr_tail(run.err)}") from None
        except OSError as exc:
            errno_ = fd_exhaustion(exc)
            if errno_ is not None:  # no descriptor left for its pipes: say so, not "not found"
                error = too_many_open_files(self.source, "could not be started", errno_)
                raise CredentialError(str(error)) from exc
            hint = f"; {self.install_hint}" if self.install_hint else ""
            raise CredentialError(f"{self.source} could not be started: {exc}{hint}") from exc
        except anyio.get_cancelled_exc_class():
            # a caller's time limit (the context's start_timeout) or a stop: say what the
            # plugin was doing, for the caller's error (the process group is gone already)
            if run.pid is not None:
                note_interrupted(
                    f"{self.source} was stopped after {time.time() - started:.0f} s, "
                    f"{run.doing()}; {run.killed_text()}{_stderr_tail(run.err)}"
                )
            raise
        if code != 0:
            raise CredentialError(f"{self.source} failed with exit code {code}{_stderr_tail(err)}")
        return self._parse(out, err, started)

    def _parse(self, out: bytes, err: bytes, started: float) -> Credential:
        try:
            doc = json.loads(out)
        except ValueError:
            raise CredentialError(
                f"{self.source} printed something that is not JSON{_stderr_tail(err)}"
            ) from None
        if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
            raise CredentialError(f"{self.source} did not print an ExecCredential")
        if doc.get("apiVersion") != self.api_version:
            raise CredentialError(
                f"{self.source} answered with apiVersion {doc.get('apiVersion')!r}, "
                f"not the {self.api_version!r} it was asked for"
            )
        status = doc.get("status")
        if not isinstance(status, dict):
            raise CredentialError(f"{self.source}: its ExecCredential has no status")
        token = status.get("token")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if token is not None and not isinstance(token, str):
            raise CredentialError(f"{self.source}: status.token is not a string")
        if bool(cert) != bool(key) or not all(isinstance(v, str | None) for v in (cert, key)):
            raise CredentialError(
                f"{self.source}: clientCertificateData and clientKeyData come together"
            )
        if not token and not cert:
            raise CredentialError(f"{self.source} returned neither a token nor a certificate")
        expires_at = None
        stamp = status.get("expirationTimestamp")
        if stamp:
            expires_at = _parse_time(stamp)
            if expires_at is None:
                raise CredentialError(
                    f"{self.source}: expirationTimestamp {terminal_safe(str(stamp)[:40])!r} "
                    "is not an RFC 3339 time"
                )
        return Credential(
            token=token or None,
            cert_pem=cert.encode() if cert else None,
            key_pem=key.encode() if key else None,
            expires_at=expires_at,
            obtained_at=started,
        )


class _PluginStopped(Exception):
    """The plugin was killed before it finished (the message says why, for the error)."""


class _PluginRun:
    """What one plugin run is doing, for the error when it has to be stopped."""

    __slots__ = ("code", "err", "killed", "out_bytes", "pid")

    def __init__(self) -> None:
        self.pid: int | None = None
        self.out_bytes = 0  # stdout bytes read so far
        self.err = bytearray()  # the tail of stderr
        self.code: int | None = None  # exit code, once the plugin exited
        self.killed: bool | None = None  # None: not signalled; False: the group was gone

    def read(self) -> str:
        if self.code is None:
            return f"{self.out_bytes} bytes of output read"
        return (
            f"{self.out_bytes} bytes of output read; does a process it started in the "
            "background hold its stdout?"
        )

    def doing(self) -> str:
        if self.code is None:
            return f"waiting for the end of its output ({self.read()})"
        return f"waiting for the end of its output after it exited with code {self.code} ({self.read()})"

    def killed_text(self) -> str:
        if self.killed is False:
            return "its process group had already ended"
        return "its process group was killed"


async def _run_plugin(
    argv: list[str],
    env: dict[str, str],
    timeout: float,  # noqa: ASYNC109 - a subprocess time limit, enforced inside
    run: _PluginRun,
) -> tuple[bytes, bytes, int]:
    """Run a plugin with no stdin; its stdout, the tail of its stderr, its exit code.

    It runs in its own process group, killed whole (SIGKILL) when the plugin does not finish:
    after ``timeout`` seconds, when its stdout passes ``_STDOUT_LIMIT`` bytes or its stderr
    ``_STDERR_TOTAL``, when its output is still open ``_EXIT_GRACE`` seconds after it exited
    (a background child holding the pipe), and on cancellation.

    Raises:
        _PluginStopped: it was killed for one of those reasons (the message says which).
        OSError: it could not be started.
    """
    await anyio.lowlevel.checkpoint_if_cancelled()
    # Shielded: the process runs before open_process returns (asyncio still connects its
    # pipes), and a cancellation landing then would leave it to asyncio, which kills the
    # direct child only and does not wait. Bounded: connecting pipes waits for nothing but
    # the event loop. The cancellation arrives at the next checkpoint, in the try below.
    with anyio.CancelScope(shield=True):
        # its own process group, so that a wrapper's children (sh -c ..., a shim) die with it
        process = await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    run.pid = process.pid
    out = bytearray()
    stopped: list[str] = []  # why the task group below was cancelled

    out_done, err_done = anyio.Event(), anyio.Event()

    async def read_out(stream: anyio.abc.ByteReceiveStream, scope: anyio.CancelScope) -> None:
        async for chunk in stream:
            out.extend(chunk)
            run.out_bytes = len(out)
            if len(out) > _STDOUT_LIMIT:
                stopped.append(f"printed more than {_STDOUT_LIMIT} bytes on stdout")
                scope.cancel()
                return
        out_done.set()

    async def read_err(stream: anyio.abc.ByteReceiveStream, scope: anyio.CancelScope) -> None:
        total = 0
        async for chunk in stream:
            total += len(chunk)
            run.err.extend(chunk)
            if len(run.err) > _STDERR_LIMIT:
                del run.err[: len(run.err) - _STDERR_LIMIT]  # keep the tail
            if total > _STDERR_TOTAL:
                stopped.append(f"wrote more than {_STDERR_TOTAL} bytes on stderr")
                scope.cancel()
                return
        err_done.set()

    try:
        with anyio.move_on_after(timeout) as limit:
            async with anyio.create_task_group() as tg:
                assert process.stdout is not None and process.stderr is not None
                tg.start_soon(read_out, process.stdout, tg.cancel_scope)
                tg.start_soon(read_err, process.stderr, tg.cancel_scope)
                run.code = await process.wait()
                # it exited: its output ends now, unless something else holds the pipes
                with anyio.move_on_after(_EXIT_GRACE) as grace:
                    await out_done.wait()
                    await err_done.wait()
                if grace.cancelled_caught:
                    stopped.append(
                        f"exited with code {run.code}, but its output was still open "
                        f"{_EXIT_GRACE:g} s later ({run.read()})"
                    )
                    tg.cancel_scope.cancel()
        if limit.cancelled_caught:
            stopped.append(f"did not answer within {timeout:g} s: {run.doing()}")
        if stopped:
            run.killed = _kill_group(process)
            raise _PluginStopped(f"{stopped[0]}; {run.killed_text()}")
        assert run.code is not None
        return bytes(out), bytes(run.err), run.code
    except BaseException:
        if run.killed is None:
            run.killed = _kill_group(process)
        with anyio.move_on_after(2.0, shield=True):
            await process.wait()
        raise
    finally:
        with anyio.move_on_after(2.0, shield=True):
            await process.aclose()


def _kill_group(process: anyio.abc.Process) -> bool:
    """SIGKILL the plugin's process group; False when it had ended already."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    return True


def _stderr_tail(err: bytes | bytearray) -> str:
    text = err.decode("utf-8", "replace").strip()
    if not text:
        return ""
    return ": " + terminal_safe(redact_text(text[-_STDERR_LIMIT:]), newlines=False)


def _exec_cluster_info(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """The ``spec.cluster`` client-go passes with ``provideClusterInfo: true``."""
    info: dict[str, Any] = {"server": cluster.get("server", "")}
    for key, out in (
        ("tls-server-name", "tls-server-name"),
        ("insecure-skip-tls-verify", "insecure-skip-tls-verify"),
        ("proxy-url", "proxy-url"),
        ("disable-compression", "disable-compression"),
    ):
        if cluster.get(key):
            info[out] = cluster[key]
    ca = cluster.get("certificate-authority-data")
    if not ca and cluster.get("certificate-authority"):
        with contextlib.suppress(OSError), open(cluster["certificate-authority"], "rb") as f:
            ca = base64.b64encode(f.read()).decode()
    if ca:
        info["certificate-authority-data"] = ca
    info["config"] = None  # client-go always sends it: the exec extension, or null
    for ext in cluster.get("extensions") or ():
        if isinstance(ext, Mapping) and ext.get("name") == "client.authentication.k8s.io/exec":
            info["config"] = ext.get("extension")
    return info


def _parse_time(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return when.timestamp()
