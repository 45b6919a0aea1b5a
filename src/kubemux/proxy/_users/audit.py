"""``kubemux proxy --audit-log PATH``: one JSON line per request answered as a user.

Each line: ``time`` (RFC 3339, UTC, when the request came), ``context``, ``user``,
``groups``, ``verb``, ``path``, ``decision`` (``cache``: answered from kubemux's caches;
``upstream``: forwarded with the user's token, the API server decided; ``denied``: the
proxy's 403; ``unauthenticated``: the 401), ``by`` (the role that allowed, ``review``, or
``system:masters``), ``status``, ``bytes`` (of the answer's body) and ``seconds``. Never a
token, a header or a body.

Writing never holds a request up: a record is queued (bounded, 10,000 lines) and written
by the log's own task in a worker thread; when the queue is full the record is dropped
and counted (``dropped``), and the next line written says how many were.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
from typing import Any

import anyio
import anyio.to_thread
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from starlette.types import Message, Send

from .gate import Caller

__all__ = ["AuditLog", "Recorder", "audit_fields"]

log = logging.getLogger(__name__)

MAX_QUEUED = 10_000
_MAX_PATH = 2048  # characters of a path written


class AuditLog:
    """A bounded, non-blocking JSON-lines writer (see the module docstring).

    Args:
        path: The file, appended to (created mode 0600).
        max_queued: Records queued at most before new ones are dropped.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_queued: int = MAX_QUEUED) -> None:
        self.path = os.fspath(path)
        self.dropped = 0
        self.written = 0
        self._dropped_reported = 0
        self._send: MemoryObjectSendStream[bytes]
        self._receive: MemoryObjectReceiveStream[bytes]
        self._send, self._receive = anyio.create_memory_object_stream[bytes](max_queued)

    def __repr__(self) -> str:
        return f"<AuditLog written={self.written} dropped={self.dropped}>"

    def record(self, caller: Caller | None, fields: dict[str, Any]) -> None:
        """Queue one line (never waits; dropped and counted when the queue is full)."""
        if caller is not None:
            fields = {
                "context": caller.context,
                "user": caller.user.name,
                "groups": list(caller.user.groups),
                **fields,
            }
        try:
            self._send.send_nowait(orjson.dumps(fields) + b"\n")
        except anyio.WouldBlock:
            self.dropped += 1
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.dropped += 1

    def _write(self, lines: list[bytes]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            data = b"".join(lines)
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)

    async def run(self) -> None:
        """Write queued lines until cancelled (the server's task group); what is queued
        then is written, bounded by 5 s."""
        try:
            async for line in self._receive:
                lines = [line]
                while len(lines) < 1000:
                    try:
                        lines.append(self._receive.receive_nowait())
                    except anyio.WouldBlock:
                        break
                if self.dropped != self._dropped_reported:
                    note = {"dropped": self.dropped - self._dropped_reported}
                    lines.append(orjson.dumps(note) + b"\n")
                    self._dropped_reported = self.dropped
                try:
                    await anyio.to_thread.run_sync(self._write, lines)
                except OSError as exc:
                    log.warning("audit log %s: cannot write: %s", self.path, exc.strerror)
                    self.dropped += len(lines)
                else:
                    self.written += len(lines)
        finally:
            with anyio.move_on_after(5, shield=True):
                rest: list[bytes] = []
                while True:
                    try:
                        rest.append(self._receive.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                if rest:
                    try:
                        await anyio.to_thread.run_sync(self._write, rest)
                    except OSError:
                        pass


class Recorder:
    """Counts what a request's answer was (status, body bytes, whether it ended), for the
    audit log and for ending a revoked watch cleanly."""

    __slots__ = ("bytes", "ended", "send", "status")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.status: int | None = None
        self.bytes = 0
        self.ended = False

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
        elif kind == "http.response.body":
            self.bytes += len(message.get("body", b""))
            self.ended = not message.get("more_body", False)
        elif kind in ("websocket.accept", "websocket.http.response.start"):
            self.status = 101 if kind == "websocket.accept" else message["status"]
        await self.send(message)

    async def end(self) -> None:
        """End the answer: its last chunk if it started, else nothing (the caller sends
        an error)."""
        if self.status is not None and not self.ended:
            await self(message={"type": "http.response.body", "body": b"", "more_body": False})


def audit_fields(
    caller: Caller | None, method: str, path: str, recorder: Recorder
) -> dict[str, Any]:
    """One request's line (less who: :meth:`AuditLog.record` adds it)."""
    started = caller.started if caller is not None else None
    now = datetime.datetime.now(datetime.UTC)
    when = datetime.datetime.fromtimestamp(started, datetime.UTC) if started else now
    attrs = caller.attrs if caller is not None else None
    seconds = (now.timestamp() - started) if started else 0.0
    return {
        "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "verb": attrs.verb if attrs is not None else method.lower(),
        "path": path[:_MAX_PATH],
        "decision": caller.decision if caller is not None else "unauthenticated",
        "by": caller.by if caller is not None else "",
        "status": recorder.status,
        "bytes": recorder.bytes,
        "seconds": round(seconds, 6) if math.isfinite(seconds) else None,
    }
