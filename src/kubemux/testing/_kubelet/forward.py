"""``pods/portforward``: the kubelet's port-forward streams over SPDY/3.1.

kubectl 1.32 opens a WebSocket with the subprotocol ``SPDY/3.1+portforward.k8s.io`` and
runs SPDY inside its binary messages (client-go's ``TunnelingConnection``); older kubectl,
or ``KUBECTL_PORT_FORWARD_WEBSOCKETS=false``, upgrades the connection itself to
``SPDY/3.1`` (``X-Stream-Protocol-Version: portforward.k8s.io``). Either way, for every
connection to a forwarded local port kubectl opens two streams with the headers
``streamType`` (``error`` or ``data``), ``port`` and ``requestID``; the kubelet pairs them
by ``requestID``, connects to the port, copies bytes between it and the data stream, and
writes what went wrong, if anything, to the error stream before closing both.

The fake connects pod port P to the address :meth:`FakeCluster.forward_port` gave for P
(any pod); a port with none, or whose address refuses, gets the kubelet's "connection
refused" message on the error stream (kubectl then prints it and drops the connection).
"""

from __future__ import annotations

import contextlib
import logging

import anyio
import anyio.abc
from aiohttp import WSMsgType, web

from .._wire.spdy import SpdyConnection, SpdyStream

__all__ = ["PORTFORWARD_PROTOCOL", "TUNNEL_PROTOCOL", "PortForwarder", "serve_tunnel"]

log = logging.getLogger(__name__)

PORTFORWARD_PROTOCOL = "portforward.k8s.io"
TUNNEL_PROTOCOL = f"SPDY/3.1+{PORTFORWARD_PROTOCOL}"
_MAX_PENDING = 128  # requests waiting for their second stream
_GRACE = 1.0  # seconds the other direction gets once one ended (the kubelet's 1 s)


class PortForwarder:
    """Pairs a connection's streams by ``requestID`` and forwards each pair."""

    def __init__(self, targets: dict[int, tuple[str, int]], pod: str, uid: str) -> None:
        self.targets = targets
        self.pod = pod
        self.uid = uid
        self.connection: SpdyConnection | None = None
        self._pending: dict[str, dict[str, SpdyStream]] = {}
        self.forwarded = 0

    def accept(self, stream: SpdyStream) -> str | None:
        headers = stream.headers
        port = headers.get("port", "")
        if not port:
            return '"port" header is required'
        if not port.isdigit() or len(port) > 5 or not 0 < int(port) < 65536:
            return f'unable to parse "{port}" as a port'
        kind = headers.get("streamtype", "")
        if not kind:
            return '"streamType" header is required'
        if kind not in ("error", "data"):
            return f'invalid stream type "{kind}"'
        request = headers.get("requestid") or str(stream.id if kind == "error" else stream.id - 2)
        pair = self._pending.get(request)
        if pair is None:
            if len(self._pending) >= _MAX_PENDING:
                return "too many port-forward requests waiting for their second stream"
            pair = self._pending[request] = {}
        if kind in pair:
            return f"{kind} stream already assigned"
        pair[kind] = stream
        return None

    def opened(self, stream: SpdyStream) -> None:
        headers = stream.headers
        request = headers.get("requestid") or str(
            stream.id if headers.get("streamtype") == "error" else stream.id - 2
        )
        pair = self._pending.get(request)
        if pair is None or len(pair) < 2:
            return
        del self._pending[request]
        assert self.connection is not None and self.connection.task_group is not None
        self.connection.task_group.start_soon(
            self.forward, pair["data"], pair["error"], int(headers["port"])
        )

    async def forward(self, data: SpdyStream, error: SpdyStream, port: int) -> None:
        """Copy between ``data`` and the port's address; then close both streams."""
        error.discard()  # kubectl writes nothing to it
        self.forwarded += 1
        try:
            target = self.targets.get(port)
            try:
                if target is None:
                    raise ConnectionRefusedError
                tcp = await anyio.connect_tcp(*target)
            except OSError:
                await error.send(self._refused(port).encode())
                return
            async with tcp:
                await _copy(data, tcp)
        finally:
            with anyio.CancelScope(shield=True):
                await data.close()
                await error.close()

    def _refused(self, port: int) -> str:
        return (
            f"error forwarding port {port} to pod {self.pod}, uid {self.uid}: failed to "
            f"connect to localhost:{port} inside namespace of pod {self.pod}, IPv4: dial tcp4 "
            f"127.0.0.1:{port}: connect: connection refused"
        )


async def _copy(data: SpdyStream, tcp: anyio.abc.SocketStream) -> None:
    finished = 0
    both = anyio.Event()
    one = anyio.Event()

    def done() -> None:
        nonlocal finished
        finished += 1
        one.set()
        if finished == 2:
            both.set()

    async def client_to_pod() -> None:
        try:
            while chunk := await data.receive():
                await tcp.send(chunk)
            await tcp.send_eof()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        done()

    async def pod_to_client() -> None:
        try:
            async for chunk in tcp:
                await data.send(chunk)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        done()

    async with anyio.create_task_group() as tg:
        tg.start_soon(client_to_pod)
        tg.start_soon(pod_to_client)
        await one.wait()
        with anyio.move_on_after(_GRACE):
            await both.wait()
        tg.cancel_scope.cancel()


async def serve_tunnel(
    request: web.BaseRequest, targets: dict[int, tuple[str, int]], pod: str, uid: str
) -> web.WebSocketResponse:
    """Port-forward over a WebSocket carrying SPDY/3.1 (kubectl 1.31 and later)."""
    ws = web.WebSocketResponse(protocols=(TUNNEL_PROTOCOL,), autoping=True)
    await ws.prepare(request)
    try:
        if ws.ws_protocol != TUNNEL_PROTOCOL:
            await ws.close(code=1002, message=b"expected subprotocol " + TUNNEL_PROTOCOL.encode())
            return ws

        async def receive() -> bytes | None:
            msg = await ws.receive()
            if msg.type == WSMsgType.BINARY:
                return bytes(msg.data)
            return None  # a close, an error, or text (which the tunnel never sends)

        forwarder = PortForwarder(targets, pod, uid)
        connection = SpdyConnection(receive, ws.send_bytes, forwarder)
        forwarder.connection = connection
        await connection.run()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(ConnectionError):
            await ws.close()
    return ws
