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
- ``"hostile-table"``: Table LISTs and WATCHes (when asked for) with poisoned rows among good
  ones (:data:`HOSTILE_ROWS`) and a column definition whose ``priority`` is not an integer
  (``"odd-column"``), those named by ``poison``; plain objects otherwise.

Streaming lists (``sendInitialEvents``) are refused with 422 unless the behaviour is about
them. Every request is recorded in :attr:`HostileServer.requests` as (monotonic time, watch?).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any, Self

import anyio
import anyio.lowlevel
import orjson
from aiohttp import web

from ._state.objects import make_pod

__all__ = [
    "BAD_OBJECT_LINES",
    "BEHAVIOURS",
    "HOSTILE_COLUMNS",
    "HOSTILE_ROWS",
    "POISON",
    "HostileServer",
    "bad_lines",
]

BEHAVIOURS = (
    "continue-loop",
    "one-event-watch",
    "junk-watch",
    "huge-list",
    "silent",
    "trickle-list",
    "trickle-watch",
    "undecodable",
    "hostile-table",
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

HOSTILE_COLUMNS = (
    b'{"name":"Name","type":"string","format":"name","description":"","priority":0}',
    b'{"name":"Status","type":"string","format":"","description":"","priority":0}',
    b'{"name":"Odd","type":"integer","format":"","description":"","priority":1.5}',
    b'{"name":"Size","type":"number","format":"","description":"","priority":0}',
)
"""The ``"hostile-table"`` columns: the third one's ``priority`` is no integer."""

_DEEP = b"[" * 6000 + b"]" * 6000


def _row(name: str, rv: int, status: bytes = b'"Running"', size: bytes = b"1") -> bytes:
    meta = orjson.dumps(
        {
            "name": name,
            "namespace": "default",
            "resourceVersion": str(rv),
            "creationTimestamp": "2025-01-01T00:00:00Z",
        }
    )
    cells = b'["' + name.encode() + b'",' + status + b",7," + size + b"]"
    obj = b'{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":' + meta
    return b'{"cells":' + cells + b',"object":' + obj + b"}}"


HOSTILE_ROWS = {
    "big-number": _row("big-number", 20, size=b"9" * 400),  # cached: reads as inf
    "huge-float": _row("huge-float", 21, size=b"1e308"),  # cached
    "deep": _row("deep", 22, size=_DEEP),  # nested 6,000 deep: skipped
    "bad-utf8": _row("bad-utf8", 23, status=b'"\xff\xfe"'),  # skipped
}
"""Poisoned Table rows by name: the first two are cached, the last two skipped alone."""


POISON = (*HOSTILE_ROWS, "odd-column")
"""Every poison of ``"hostile-table"``."""


def _table(rows: list[bytes], rv: int, *, columns: bool = True, odd: bool = True) -> bytes:
    defs = b"null"
    if columns:
        third = HOSTILE_COLUMNS[2] if odd else HOSTILE_COLUMNS[2].replace(b"1.5", b"1")
        defs = b"[" + b",".join((*HOSTILE_COLUMNS[:2], third, HOSTILE_COLUMNS[3])) + b"]"
    return (
        b'{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"'
        + str(rv).encode()
        + b'"},"columnDefinitions":'
        + defs
        + b',"rows":['
        + b",".join(rows)
        + b"]}"
    )


_DISCOVERY: dict[str, dict[str, Any]] = {
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {
                "name": "pods",
                "singularName": "pod",
                "namespaced": True,
                "kind": "Pod",
                "verbs": ["get", "list", "watch"],
                "shortNames": ["po"],
            }
        ],
    },
}


async def _json_doc(doc: dict[str, Any], request: web.Request) -> web.Response:
    return web.json_response(doc)


class HostileServer:
    """A misbehaving API server; ``async with HostileServer("junk-watch") as s: s.server``."""

    def __init__(
        self,
        behaviour: str,
        *,
        objects: int = 3,
        huge_bytes: int = 1 << 30,
        poison: tuple[str, ...] = POISON,
    ) -> None:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r}; one of {BEHAVIOURS}")
        self.behaviour = behaviour
        self.poison = poison
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
        if self.behaviour == "hostile-table":  # what `kubemux get` needs: legacy discovery
            for path, doc in _DISCOVERY.items():
                app.router.add_get(path, functools.partial(_json_doc, doc))
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        # aiohttp's TCPSite does not say which port 0 became: its server's socket does
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
        if b == "hostile-table" and "as=Table" in request.headers.get("Accept", ""):
            return await self._hostile_table_watch(request)
        return await self._idle_watch(request)

    async def _list(self, request: web.Request) -> web.StreamResponse:
        items = [_pod(f"p-{i}", 10 + i) for i in range(self.objects)]
        meta: dict[str, Any] = {"resourceVersion": "50"}
        if self.behaviour == "continue-loop":
            meta["continue"] = "same-token"
        if self.behaviour == "huge-list":
            return await self._huge(request)
        if self.behaviour == "hostile-table" and "as=Table" in request.headers.get("Accept", ""):
            good = [_row(f"p-{i}", 10 + i) for i in range(self.objects)]
            bad = [row for name, row in HOSTILE_ROWS.items() if name in self.poison]
            body = _table([*good, *bad], 50, odd="odd-column" in self.poison)
            return web.Response(body=body, content_type="application/json")
        if self.behaviour == "undecodable":
            body = orjson.dumps({"kind": "PodList", "metadata": meta, "items": items})
            deep = b',{"metadata":{"name":"deep","namespace":"default","resourceVersion":"9"},'
            deep += b'"spec":' + b"[" * 1000 + b"]" * 1000 + b"}"
            deeper = b',{"metadata":{"name":"deeper","namespace":"default","resourceVersion":"8"},'
            deeper += b'"spec":' + b"[" * 6000 + b"]" * 6000 + b"}"  # beyond msgspec's reach
            body = body[: body.rindex(b"]")] + deep + deeper + b"]}"
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

    async def _hostile_table_watch(self, request: web.Request) -> web.StreamResponse:
        resp = await self._stream(request)
        poison = self.poison
        rows = [
            *([_row("w-big", 60, size=b"9" * 400)] if "big-number" in poison else []),
            *([_row("w-deep", 61, size=_DEEP)] if "deep" in poison else []),
            *([_row("w-utf8", 62, status=b'"\xff"')] if "bad-utf8" in poison else []),
            _row("w-after", 63),
        ]
        odd = "odd-column" in poison
        lines = [
            b'{"type":"ADDED","object":' + _table([row], 60 + i, columns=i == 0, odd=odd) + b"}"
            for i, row in enumerate(rows)
        ]
        await resp.write(b"\n".join(lines) + b"\n")
        await anyio.sleep_forever()
        return resp  # pragma: no cover

    async def _idle_watch(self, request: web.Request) -> web.StreamResponse:
        await self._stream(request)
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover
