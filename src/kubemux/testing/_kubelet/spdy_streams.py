"""``exec``, ``attach`` and ``portforward`` over a plain ``Upgrade: SPDY/3.1`` (kubectl's SPDY path).

kubectl falls back to SPDY when the WebSocket upgrade fails, and uses it from the start with
``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`` / ``KUBECTL_PORT_FORWARD_WEBSOCKETS=false``.
The request (a POST) offers ``X-Stream-Protocol-Version``\\ s; the answer is ``101`` with the
one chosen (the kubelet's ``httpstream.Handshake``: the client's first that the server
speaks; none in common is a 403 naming both lists), then SPDY/3.1 on the raw connection.

- ``portforward.k8s.io``: the streams of :mod:`.forward`.
- ``v5.channel.k8s.io`` / ``v4.channel.k8s.io`` (exec, attach): kubectl 1.32 offers v5, v4,
  v3, v2, v1 in that order and this side picks v5, as a current kubelet does; over SPDY, v5
  means what v4 means (the kubelet's SPDY handler and client-go's ``streamProtocolV5`` are
  v4's: v5's close signal is WebSocket's channel 255, and SPDY half-closes a stream with
  FIN). kubectl opens an ``error`` stream and, as the query asks, ``stdin``, ``stdout``,
  ``stderr`` and ``resize`` (with a tty); once all are there the exec's command runs
  (:func:`._pod_commands.run_command`) or the attach follows the container's log
  (:func:`._pod_commands.follow_attached`, stdin echoed to stdout, until the pod goes away
  or stdin ends); the output goes to ``stdout``/``stderr``, and the kubelet's
  ``metav1.Status`` JSON to ``error``; then the streams close and the connection ends.
  Older channel protocols (v3 and before) are not spoken.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

import anyio
from aiohttp import web

from ..._http.raw import ByteQueue
from .._wire.spdy import SpdyConnection, SpdyStream
from .commands import exec_status, missing_status, run_command
from .forward import PORTFORWARD_PROTOCOL, PortForwarder

__all__ = ["CHANNEL_PROTOCOLS", "Follow", "serve_spdy"]

log = logging.getLogger(__name__)

CHANNEL_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")  # v5 = v4 over SPDY
_MAX_STDIN = 16 * 1024 * 1024

Write = Callable[[bytes], Awaitable[None]]
Follow = Callable[[Write], Awaitable[None]]  # an attach: writes the container's output


def _flag(query: Mapping[str, str], name: str) -> bool:
    return query.get(name, "").lower() in ("true", "1")


class _Session:
    """The streams of one exec or attach; it runs once they are all open.

    ``command`` is the exec's; ``follow`` makes it an attach instead.
    """

    def __init__(
        self, query: Mapping[str, str], *, command: list[str], follow: Follow | None = None
    ) -> None:
        self.command = command
        self.follow = follow
        self.tty = _flag(query, "tty")
        expected = {"error"}
        for name in ("stdin", "stdout", "stderr"):
            if _flag(query, name):
                expected.add(name)
        if self.tty:
            expected.discard("stderr")  # a terminal merges it into stdout
            expected.add("resize")
        self.expected = expected
        self.streams: dict[str, SpdyStream] = {}
        self.connection: SpdyConnection | None = None

    def accept(self, stream: SpdyStream) -> str | None:
        kind = stream.headers.get("streamtype", "")
        if kind not in self.expected:
            return f"unexpected stream of type {kind!r}"
        if kind in self.streams:
            return f"duplicate stream of type {kind!r}"
        self.streams[kind] = stream
        return None

    def opened(self, stream: SpdyStream) -> None:
        if set(self.streams) == self.expected:
            assert self.connection is not None and self.connection.task_group is not None
            self.connection.task_group.start_soon(self.run)

    async def _out(self, name: str, data: bytes) -> None:
        if self.tty and name == "stderr":
            name = "stdout"
        if self.tty:
            data = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        stream = self.streams.get(name)
        if stream is not None and data:
            await stream.send(data)

    async def run(self) -> None:
        for kind in ("error", "resize"):
            if kind in self.streams:
                self.streams[kind].discard()  # nothing is read from them
        try:
            if self.follow is not None:
                status = await self._attach(self.follow)
            else:
                status = await self._exec()
            await self.streams["error"].send(status)
        finally:
            with anyio.CancelScope(shield=True):
                for stream in self.streams.values():
                    await stream.close()
                assert self.connection is not None
                await self.connection.goaway()

    async def _exec(self) -> bytes:
        try:
            result = run_command(self.command)
        except FileNotFoundError as exc:
            return missing_status(str(exc))
        if result is None:  # cat: stdin back to stdout
            code = await self._cat()
        else:
            out, err, code = result
            await self._out("stdout", out)
            await self._out("stderr", err)
        return exec_status(code, self.command)

    async def _cat(self) -> int:
        stdin = self.streams.get("stdin")
        received = 0
        while stdin is not None and (data := await stdin.receive()):
            received += len(data)
            if received > _MAX_STDIN:
                return 1
            await self._out("stdout", data)
        return 0

    async def _attach(self, follow: Follow) -> bytes:
        async def out(data: bytes) -> None:
            await self._out("stdout", data)

        async with anyio.create_task_group() as tg:

            async def echo(stdin: SpdyStream) -> None:  # stdin ending ends the attach
                while data := await stdin.receive():
                    await out(data)
                tg.cancel_scope.cancel()

            if "stdin" in self.streams:
                tg.start_soon(echo, self.streams["stdin"])
            await follow(out)
            tg.cancel_scope.cancel()
        return exec_status(0, [])


def _offered(request: web.BaseRequest) -> list[str]:
    return [
        value.strip()
        for header in request.headers.getall("X-Stream-Protocol-Version", [])
        for value in header.split(",")
        if value.strip()
    ]


async def serve_spdy(
    request: web.BaseRequest,
    sub: str,
    *,
    targets: dict[int, tuple[str, int]],
    pod: str,
    uid: str,
    command: list[str],
    follow: Follow,
) -> web.StreamResponse:
    """Answer an ``Upgrade: SPDY/3.1`` of ``exec``, ``attach`` or ``portforward`` and serve it
    (``follow``: what an attach writes)."""
    supported = [PORTFORWARD_PROTOCOL] if sub == "portforward" else list(CHANNEL_PROTOCOLS)
    offered = _offered(request)
    chosen = next((p for p in offered if p in supported), None)
    log.debug("SPDY %s: offered %s, chose %s", sub, ", ".join(offered), chosen)
    if offered and chosen is None:
        return web.Response(
            status=403,
            text=(
                f"unable to upgrade: unable to negotiate protocol: client supports "
                f"[{' '.join(offered)}], server supports [{' '.join(supported)}]"
            ),
            headers={"X-Accepted-Stream-Protocol-Versions": ", ".join(supported)},
        )
    headers = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
    if chosen is not None:
        headers["X-Stream-Protocol-Version"] = chosen
    response = web.StreamResponse(status=101, headers=headers)
    response.force_close()
    await response.prepare(request)
    protocol, transport = request.protocol, request.transport
    assert transport is not None
    queue = ByteQueue(transport.pause_reading, transport.resume_reading)
    # aiohttp switches protocols for WebSockets only: take the connection over as its
    # WebSocketResponse does (a payload parser), marking it upgraded first
    protocol._upgraded = True
    protocol.set_parser(queue)  # type: ignore[arg-type]

    async def receive() -> bytes | None:
        return (await queue.read()) or None

    async def send(data: bytes) -> None:
        if transport.is_closing():
            raise ConnectionResetError("the client left")
        transport.write(data)
        await protocol._drain_helper()  # flow control, as aiohttp's own WebSocket writer

    handler: PortForwarder | _Session
    query = dict(request.query.items())
    if sub == "portforward":
        handler = PortForwarder(targets, pod, uid)
    elif sub == "attach":
        handler = _Session(query, command=[], follow=follow)
    else:
        handler = _Session(query, command=command)
    connection = SpdyConnection(receive, send, handler)
    handler.connection = connection
    try:
        await connection.run()
    finally:
        transport.close()
    return response
