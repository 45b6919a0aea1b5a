"""The fake exec's commands (``echo``, ``cat``, ``true``, ``false``, ``sh -c 'exit N'``), what
an attached container prints (:func:`follow_attached`), and the ``metav1.Status`` a kubelet
answers when one ends or is missing; shared by exec and attach over WebSocket
(:mod:`.exec`) and over SPDY (:mod:`.spdy_streams`).
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Awaitable, Callable

import orjson

from .._state.api_state import ApiState
from .._state.log_book import ContainerLog
from .._state.resource import ResourceState

__all__ = ["exec_status", "follow_attached", "log_position", "missing_status", "run_command"]


def run_command(command: list[str]) -> tuple[bytes, bytes, int] | None:
    """(stdout, stderr, exit code) of a command that needs no stdin; None for ``cat``.

    Raises:
        FileNotFoundError: the command is not one this fake knows.
    """
    if not command:
        raise FileNotFoundError("")
    program, args = command[0], command[1:]
    if program == "echo":
        newline = True
        if args[:1] == ["-n"]:
            newline, args = False, args[1:]
        return (" ".join(args) + ("\n" if newline else "")).encode(), b"", 0
    if program == "cat" and not args:
        return None
    if program == "true":
        return b"", b"", 0
    if program == "false":
        return b"", b"", 1
    if program in ("sh", "/bin/sh", "bash", "/bin/bash") and args[:1] == ["-c"] and len(args) == 2:
        words = shlex.split(args[1])
        if len(words) in (1, 2) and words[0] == "exit" and (len(words) == 1 or words[1].isdigit()):
            return b"", b"", int(words[1]) if len(words) == 2 else 0
        return run_command(words)
    raise FileNotFoundError(program)


def exec_status(code: int, command: list[str]) -> bytes:
    if code == 0:
        return orjson.dumps({"metadata": {}, "status": "Success"})
    return orjson.dumps(
        {
            "metadata": {},
            "status": "Failure",
            "message": (
                f"command terminated with non-zero exit code: error executing command "
                f"[{' '.join(command)}], exit code {code}"
            ),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    )


def missing_status(program: str) -> bytes:
    message = (
        "Internal error occurred: error executing command in container: failed to exec in container: failed to start "
        f"exec: OCI runtime exec failed: exec failed: unable to start container process: exec: "
        f'"{program}": executable file not found in $PATH: unknown'
    )
    return orjson.dumps(
        {
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "InternalError",
            "details": {"causes": [{"message": message}]},
            "code": 500,
        }
    )


def log_position(api: ApiState, uid: str, container: str) -> int:
    """How many lines the container has logged so far (trimmed ones too)."""
    log = api.logs.logs.get((uid, container)) or ContainerLog()
    return log.dropped + len(log.lines)


async def follow_attached(
    api: ApiState,
    state: ResourceState,
    key: tuple[str, str],
    uid: str,
    container: str,
    position: int,
    write: Callable[[bytes], Awaitable[None]],
) -> None:
    """Write the lines the container logs from ``position`` on (:func:`log_position` when
    the attach request arrived), as an attached client sees them; return once the pod is
    gone (deleted, or created again with another uid), the container restarts or the fake
    stops.

    Cancellation (the client leaving) stops it at once.
    """
    restarts = api.logs.restarts.get((uid, container), 0)
    while True:
        current = state.objects.get(key)
        if current is None or current.obj["metadata"].get("uid") != uid or api.stopping:
            return
        if api.logs.restarts.get((uid, container), 0) != restarts:
            return
        log = api.logs.logs.get((uid, container)) or ContainerLog()
        start = max(0, position - log.dropped)
        lines = list(itertools.islice(log.lines, start, None))
        position = log.dropped + len(log.lines)
        if lines:
            await write("".join(f"{line}\n" for _, line in lines).encode())
        await api.wait_changed(1.0)
