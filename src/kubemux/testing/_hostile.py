"""A tiny API server that misbehaves on purpose (private: for kubemux's tests and benches).

It serves ``pods`` (LIST and WATCH) over real HTTP on 127.0.0.1 with one hostile behaviour:

- ``"continue-loop"``: every LIST page carries the same ``continue`` token.
- ``"one-event-watch"``: every WATCH sends one event and ends at once.
- ``"junk-watch"``: every WATCH streams malformed lines as fast as it can.
- ``"huge-list"``: a LIST page of ``huge_bytes`` (chunked, no Content-Length), made on the fly.
- ``"silent"``: accepts every request and never answers.
- ``"trickle-list"``: LIST (and streaming list) bodies at one byte a second.
- ``"trickle-watch"``: a WATCH line at one byte a second, never ending.
- ``"undecodable"``: a WATCH that sends objects no reader can decode among good ones.

Streaming lists (``sendInitialEvents``) are refused with 422 unless the behaviour is about
them. Every request is recorded in :attr:`HostileServer.requests` as (monotonic time, watch?).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Self

import anyio
import anyio.lowlevel
import orjson
from aiohttp import web

from ._objects import make_pod

__all__ = ["BAD_OBJECT_LINES", "BEHAVIOURS", "HostileServer", "bad_lines"]

BEHAVIOURS = (
    "continue-loop",
    "one-event-watch",
    "junk-watch",
    "huge-list",
    "silent",
    "trickle-list",
    "trickle-watch",
    "undecodable",
)


def _pod(name: str, rv: int) -> dict[str, Any]:
    pod = make_pod(name)
    pod["metadata"]["resourceVersion"] = str(rv)
    return pod


def _event_prefix(name: str, rv: int) -> bytes:
    meta = orjson.dumps({"name": name, "namespace": "default", "resourceVersion": str(rv)})
    return b'{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":' + meta


def bad_lines() -> dict[str, bytes]:
    """Watch lines a fast path could cache but no reader can decode, by what is wrong."""
    deep = b"[" * 1000 + b"]" * 1000
    return {
        "invalid UTF-8": _event_prefix("bad-utf8", 101) + b',"spec":{"x":"\xff\xfe"}}}',
        "repeated object key": _event_prefix("bad-dup", 102)
        + b'},"object":'
        + orjson.dumps(_pod("bad-dup", 102))
        + b"}",
        "nested 1,000 deep": _event_prefix("bad-deep", 103) + b',"spec":' + deep + b"}}",
    }


BAD_OBJECT_LINES = bad_lines()


class HostileServer:
    """A misbehaving API server; ``async with HostileServer("junk-watch") as s: s.server``."""

    def __init__(self, behaviour: str, *, objects: int = 3, huge_bytes: int = 1 << 30) -> None:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r}; one of {BEHAVIOURS}")
        self.behaviour = behaviour
        self.objects = objects
        self.huge_bytes = huge_bytes
        self.requests: list[tuple[float, bool]] = []
        self._runner: web.AppRunner | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self._port = 0

    @property
    def server(self) -> str:
        """The URL to put in a kubeconfig."""
        return f"http://127.0.0.1:{self._port}"

    def watches(self) -> int:
        return sum(1 for _, w in self.requests if w)

    def lists(self) -> int:
        return sum(1 for _, w in self.requests if not w)

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_get("/api/v1/pods", self._handle)
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            for task in self._handlers:  # handlers that would sleep or stream for ever
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            if self._runner is not None:
                await self._runner.cleanup()

    # ------------------------------------------------------------------ handlers
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._misbehave(request)
        except ConnectionResetError:  # the client gave up on us: as it should
            return web.Response(status=499)

    async def _misbehave(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        is_watch = q.get("watch") in ("true", "1")
        self.requests.append((time.monotonic(), is_watch))
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        b = self.behaviour
        if b == "silent":
            await anyio.sleep_forever()
        streaming = q.get("sendInitialEvents") == "true"
        if streaming and b != "trickle-list":
            return web.json_response(
                {"kind": "Status", "code": 422, "reason": "Invalid", "message": "no"}, status=422
            )
        if b == "trickle-list" and (streaming or not is_watch):
            return await self._trickle(request, b'{"kind":"PodList","items":[')
        if not is_watch:
            return await self._list(request)
        if b == "one-event-watch":
            n = len(self.requests)
            line = orjson.dumps({"type": "ADDED", "object": _pod(f"late-{n % 3}", 100 + n)})
            return web.Response(body=line + b"\n", content_type="application/json")
        if b == "junk-watch":
            return await self._junk(request)
        if b == "trickle-watch":
            return await self._trickle(request, _event_prefix("slow", 99))
        if b == "undecodable":
            return await self._undecodable(request)
        return await self._idle_watch(request)

    async def _list(self, request: web.Request) -> web.StreamResponse:
        items = [_pod(f"p-{i}", 10 + i) for i in range(self.objects)]
        meta: dict[str, Any] = {"resourceVersion": "50"}
        if self.behaviour == "continue-loop":
            meta["continue"] = "same-token"
        if self.behaviour == "huge-list":
            return await self._huge(request)
        if self.behaviour == "undecodable":
            body = orjson.dumps({"kind": "PodList", "metadata": meta, "items": items})
            deep = b',{"metadata":{"name":"deep","namespace":"default","resourceVersion":"9"},'
            deep += b'"spec":' + b"[" * 1000 + b"]" * 1000 + b"}"
            body = body[: body.rindex(b"]")] + deep + b"]}"
            return web.Response(body=body, content_type="application/json")
        return web.json_response({"kind": "PodList", "metadata": meta, "items": items})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        return resp

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        resp = await self._stream(request)
        await resp.write(b'{"kind":"PodList","metadata":{"resourceVersion":"50"},"items":[')
        item = orjson.dumps(_pod("same", 10))
        chunk = b",".join([item] * max(1, (256 * 1024) // len(item))) + b","
        sent = 0
        while sent < self.huge_bytes:
            await resp.write(chunk)
            sent += len(chunk)
        await resp.write(item + b"]}")
        return resp

    async def _trickle(self, request: web.Request, data: bytes) -> web.StreamResponse:
        resp = await self._stream(request)
        while True:
            for i in range(len(data)):
                await resp.write(data[i : i + 1])
                await anyio.sleep(1.0)

    async def _junk(self, request: web.Request) -> web.StreamResponse:
        resp = await self._stream(request)
        junk = b"this is not json\n" * 4096
        while True:
            await resp.write(junk)
            await anyio.lowlevel.checkpoint()

    async def _undecodable(self, request: web.Request) -> web.StreamResponse:
        resp = await self._stream(request)
        big = _event_prefix("big-number", 150) + b',"spec":{"n":' + b"9" * 400 + b"}}}"
        after = orjson.dumps({"type": "ADDED", "object": _pod("after", 200)})
        lines = [*BAD_OBJECT_LINES.values(), big, after]
        await resp.write(b"\n".join(lines) + b"\n")
        await anyio.sleep_forever()
        return resp  # pragma: no cover

    async def _idle_watch(self, request: web.Request) -> web.StreamResponse:
        await self._stream(request)
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover
