"""``pods/exec`` and ``pods/attach`` over WebSocket, as kubectl 1.32 speaks them by default.

The channel protocols are ``v5.channel.k8s.io`` (preferred) and ``v4.channel.k8s.io``: every
binary message starts with its channel (0 stdin, 1 stdout, 2 stderr, 3 the status, 4 terminal
resize; v5's 255 closes a channel: ``[255, 0]`` is the end of stdin). The status message is
the ``metav1.Status`` the kubelet writes: ``Success``, or ``Failure`` with reason
``NonZeroExitCode`` and the exit code as a cause. Then the server closes the connection.

The exec is a minimal one, enough to test a proxy or a terminal: ``echo [-n] ARGS`` prints its
arguments; ``cat`` copies stdin to stdout until stdin ends; ``true``; ``false`` (exit 1);
``sh -c 'exit N'``; anything else fails as a missing executable does. With ``tty=true`` line
ends are written ``\\r\\n`` and stderr is merged into stdout, as a terminal does. ``attach``
streams the lines appended to the container's log from then on (and echoes stdin) until the
pod goes away or the client leaves. ``portforward`` (SPDY/3.1 inside the WebSocket) is
served by ``_pod_forward``; ``Upgrade: SPDY/3.1`` (kubectl's SPDY path) of exec, attach
and port-forward by ``_pod_spdy``. Any other request gets 400.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping

import anyio
from aiohttp import WSMsgType, hdrs, web

from .._state.api_state import ApiState
from .._state.resource import ResourceState
from .._wire.protocol import BadRequest
from .._wire.responses import status_response
from .commands import (
    exec_status,
    follow_attached,
    log_position,
    missing_status,
    run_command,
)
from .forward import serve_tunnel
from .logs import pick_container
from .spdy_streams import Follow, serve_spdy

__all__ = ["PROTOCOLS", "serve_stream"]

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, STATUS, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
_MAX_STDIN = 16 * 1024 * 1024  # bytes ``cat`` echoes before the exec is cut off


def _flag(query: Mapping[str, str], name: str) -> bool:
    return query.get(name, "").lower() in ("true", "1")


class _Session:
    """One exec or attach over a prepared WebSocket."""

    def __init__(self, ws: web.WebSocketResponse, *, tty: bool, v5: bool) -> None:
        self.ws = ws
        self.tty = tty
        self.v5 = v5

    async def send(self, channel: int, data: bytes) -> None:
        if self.tty and channel in (STDOUT, STDERR):
            channel = STDOUT
            data = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        if data or channel == STATUS:
            await self.ws.send_bytes(bytes((channel,)) + data)

    async def stdin(self) -> bytes | None:
        """The next stdin data; None when stdin ended or the client left."""
        while True:
            msg = await self.ws.receive()
            if msg.type != WSMsgType.BINARY:
                if msg.type in (
                    WSMsgType.CLOSE,
                    WSMsgType.CLOSING,
                    WSMsgType.CLOSED,
                    WSMsgType.ERROR,
                ):
                    return None
                continue
            data = bytes(msg.data)
            if not data:
                continue
            if data[0] == STDIN:
                return data[1:]
            if data[0] == CLOSE and self.v5 and data[1:2] == bytes((STDIN,)):
                return None


async def serve_stream(
    api: ApiState,
    request: web.BaseRequest,
    state: ResourceState,
    namespace: str,
    name: str,
    sub: str,
) -> web.StreamResponse:
    """``exec`` / ``attach`` / ``portforward`` of one pod over WebSocket."""
    stored = state.objects.get((namespace, name))
    if stored is None:
        return status_response(
            404, "NotFound", f'pods "{name}" not found', details={"name": name, "kind": "pods"}
        )
    pod = stored.obj
    query = dict(request.query.items())
    container = pick_container(pod, query.get("container"))
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        raise BadRequest(
            f"cannot {sub} into a container in a completed pod; current phase is {phase}"
        )
    upgrade = request.headers.get(hdrs.UPGRADE, "").lower()
    uid = str(pod["metadata"].get("uid", ""))
    # an attach shows what the container logs once the request is here (taken before any
    # await: a test that sees the upgrade counted can append lines and know they are shown)
    follow: Follow = functools.partial(
        follow_attached,
        api,
        state,
        (namespace, name),
        uid,
        container,
        log_position(api, uid, container),
    )
    command = request.query.getall("command", []) if sub == "exec" else []
    if sub == "exec" and not command and upgrade in ("websocket", "spdy/3.1"):
        raise BadRequest("you must specify at least 1 command")
    if sub == "portforward" and upgrade == "websocket":
        return await serve_tunnel(request, api.port_targets, name, uid)
    if upgrade == "spdy/3.1":
        return await serve_spdy(
            request,
            sub,
            targets=api.port_targets,
            pod=name,
            uid=uid,
            command=command,
            follow=follow,
        )
    if upgrade != "websocket":
        raise BadRequest("Upgrade request required")
    ws = web.WebSocketResponse(protocols=PROTOCOLS, autoping=True)
    await ws.prepare(request)
    session = _Session(ws, tty=_flag(query, "tty"), v5=ws.ws_protocol == PROTOCOLS[0])
    try:
        if sub == "exec":
            await _exec(session, command, stdin=_flag(query, "stdin"))
        else:
            await _attach(session, follow, stdin=_flag(query, "stdin"))
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(ConnectionError):
            await ws.close()
    return ws


async def _exec(session: _Session, command: list[str], *, stdin: bool) -> None:
    try:
        result = run_command(command)
    except FileNotFoundError as exc:
        await session.send(STATUS, missing_status(str(exc)))
        return
    if result is not None:
        out, err, code = result
        await session.send(STDOUT, out)
        await session.send(STDERR, err)
        await session.send(STATUS, exec_status(code, command))
        return
    received = 0  # cat: stdin back to stdout
    while stdin:
        data = await session.stdin()
        if data is None:
            break
        received += len(data)
        if received > _MAX_STDIN:
            await session.send(STATUS, exec_status(1, command))
            return
        await session.send(STDOUT, data)
    await session.send(STATUS, exec_status(0, command))


async def _attach(session: _Session, follow: Follow, *, stdin: bool) -> None:
    async with anyio.create_task_group() as tg:

        async def read() -> None:  # echo stdin; the client leaving ends the attach
            while (data := await session.stdin()) is not None:
                if stdin:
                    await session.send(STDOUT, data)
            tg.cancel_scope.cancel()

        async def out(data: bytes) -> None:
            await session.send(STDOUT, data)

        tg.start_soon(read)
        await follow(out)
        tg.cancel_scope.cancel()
    if not session.ws.closed:  # the pod went away, or stdin ended: the attach succeeded
        await session.send(STATUS, exec_status(0, []))
