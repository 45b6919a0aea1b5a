"""An API server that misbehaves byte for byte, for the proxy's hostile-client tests (issue 28).

:class:`HostileUpstream` is a raw HTTP/1.1 server on ``localhost`` (asyncio streams, no HTTP
library in the way), so it can send what no well-behaved server library writes: header
values outside latin-1 or not UTF-8 at all, a redirect answering a WebSocket upgrade,
cookies. It knows a handful of paths:

- discovery (``/api``, ``/apis``, ``/api/v1``: pods with the ``get`` verb only, so the
  proxy's cache never serves them and every pod request goes upstream) and ``/version``;
- ``.../pods/shell/log``: ``line 1``, then, for a follow stream, nothing until
  :attr:`HostileUpstream.release` is set, then ``line 2``;
- ``/api/v1/pods?pretty=...&watch=...``: a watch stream held open until :attr:`release` is
  set (a LIST without ``watch``: 404); without ``pretty``, pod LISTs and WATCHes are 403,
  so the proxy's cache never serves pods and every pod request goes upstream;
- ``.../pods/shell/exec``: a ``302`` to :attr:`HostileUpstream.redirect_to`;
- ``.../pods/shell``: the pod, with a ``Set-Cookie`` header;
- any path in :attr:`HostileUpstream.raw_headers`: a 200 carrying those header lines as
  given (bytes).

``follow`` and ``watch`` are read as kube-apiserver reads them: the first value, false only
for ``0`` or ``false`` (any case), true for anything else, the empty string included.
It is reached as ``localhost`` (aiohttp's cookie jar ignores cookies from IP addresses).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any, Self

__all__ = ["HostileUpstream", "Request", "go_bool"]

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "shell", "namespace": "default", "uid": "u-1", "resourceVersion": "7"},
    "spec": {"containers": [{"name": "main", "image": "busybox"}]},
}
RESOURCES = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {"name": "pods", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
        {"name": "pods/exec", "namespaced": True, "kind": "PodExecOptions", "verbs": ["get"]},
        {"name": "pods/log", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    ],
}


def go_bool(query: str, name: str) -> bool:
    """kube-apiserver's reading of a boolean query parameter (``Convert_Slice_string_To_bool``
    on the first value)."""
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key == name:
            return not (value == "0" or value.lower() == "false")
    return False


class Request:
    """One request as the upstream received it."""

    def __init__(self, method: str, target: str, headers: Mapping[str, str]) -> None:
        self.method = method
        self.target = target
        self.path, _, self.query = target.partition("?")
        self.headers = dict(headers)

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.target[:80]}>"


class HostileUpstream:
    """See the module docstring. ``async with HostileUpstream() as up: up.url``."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.release = asyncio.Event()
        self.redirect_to = "http://127.0.0.1:9/"
        self.raw_headers: dict[str, list[bytes]] = {}
        self.open_streams = 0
        self.streams_opened = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://localhost:{self.port}"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self.release.set()
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def wait_streams(self, n: int) -> None:
        """Until ``n`` held streams are open at once."""
        while self.open_streams < n:
            self.streams_opened.clear()
            await self.streams_opened.wait()

    # ------------------------------------------------------------------ HTTP/1.1
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                if length:
                    await reader.readexactly(length)
                request = Request(method, target, headers)
                self.requests.append(request)
                if not await self._answer(request, writer):
                    return
        except ConnectionError:
            return
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(ConnectionError, RuntimeError):
                writer.close()

    @staticmethod
    def _head(status: str, headers: list[bytes]) -> bytes:
        return b"HTTP/1.1 " + status.encode() + b"\r\n" + b"".join(h + b"\r\n" for h in headers)

    async def _send(
        self, writer: asyncio.StreamWriter, status: str, body: bytes, headers: list[bytes]
    ) -> None:
        head = self._head(status, [*headers, b"Content-Length: %d" % len(body)])
        writer.write(head + b"\r\n" + body)
        await writer.drain()

    async def _json(
        self, writer: asyncio.StreamWriter, doc: Any, headers: list[bytes] | None = None
    ) -> None:
        body = json.dumps(doc).encode()
        await self._send(
            writer, "200 OK", body, [b"Content-Type: application/json", *(headers or [])]
        )

    async def _answer(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is to end."""
        path = request.path
        if path in self.raw_headers:
            await self._send(writer, "200 OK", b"{}", self.raw_headers[path])
        elif path == "/api":
            await self._json(writer, {"kind": "APIVersions", "versions": ["v1"]})
        elif path == "/apis":
            await self._json(writer, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        elif path == "/api/v1":
            await self._json(writer, RESOURCES)
        elif path == "/version":
            await self._json(writer, {"major": "1", "minor": "32", "gitVersion": "v1.32.0"})
        elif path.endswith("/pods/shell/exec"):
            await self._send(
                writer,
                "302 Found",
                b"",
                [b"Location: " + self.redirect_to.encode()],
            )
        elif path.endswith("/pods/shell/log"):
            if not go_bool(request.query, "follow"):
                await self._send(
                    writer, "200 OK", b"line 1\nline 2\n", [b"Content-Type: text/plain"]
                )
            else:
                await self._held(writer, b"text/plain", b"line 1\n", b"line 2\n")
                return False
        elif path == "/api/v1/pods" and "pretty" in request.query:
            if not go_bool(request.query, "watch"):
                await self._status(writer, 404, "NotFound")
            else:
                await self._held(writer, b"application/json", b"", b"")
                return False
        elif path.startswith("/api/v1/") and path.endswith("/pods"):
            await self._status(writer, 403, "Forbidden")  # no cache for pods: all go upstream
        elif path.endswith("/pods/shell"):
            await self._json(writer, POD, [b"Set-Cookie: kubemux-test=upstream; Path=/"])
        else:
            await self._status(writer, 404, "NotFound")
        return True

    async def _status(self, writer: asyncio.StreamWriter, code: int, reason: str) -> None:
        doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
        body = json.dumps({**doc, "reason": reason, "message": reason}).encode()
        await self._send(writer, f"{code} {reason}", body, [b"Content-Type: application/json"])

    async def _held(
        self, writer: asyncio.StreamWriter, content_type: bytes, first: bytes, last: bytes
    ) -> None:
        """A chunked answer: ``first``, then ``last`` once :attr:`release` is set."""
        head = self._head(
            "200 OK", [b"Content-Type: " + content_type, b"Transfer-Encoding: chunked"]
        )
        writer.write(head + b"\r\n" + _chunk(first))
        await writer.drain()
        self.open_streams += 1
        self.streams_opened.set()
        try:
            await self.release.wait()
            writer.write(_chunk(last) + b"0\r\n\r\n")
            await writer.drain()
        finally:
            self.open_streams -= 1


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""
