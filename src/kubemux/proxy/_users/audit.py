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

import collections
import datetime
import logging
import math
import os
from typing import Any

import anyio
import anyio.to_thread
import orjson
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
        self.max_queued = max_queued
        self.dropped = 0
        self.written = 0
        self._dropped_reported = 0
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = anyio.Event()
        self._wrote = anyio.Event()

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
        if len(self._queue) >= self.max_queued:
            self.dropped += 1
            return
        self._queue.append(orjson.dumps(fields) + b"\n")
        self._queued.set()

    def _write(self, lines: list[bytes]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            data = b"".join(lines)
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)

    async def wait_written(self, count: int) -> None:
        """Return once ``count`` lines have been written (or dropped). Cancellation just
        stops the wait."""
        while self.written + self.dropped < count:
            await self._wrote.wait()

    def _take(self) -> list[bytes]:
        lines = list(self._queue)
        self._queue.clear()
        if self.dropped != self._dropped_reported:
            note = {"dropped": self.dropped - self._dropped_reported}
            lines.append(orjson.dumps(note) + b"\n")
            self._dropped_reported = self.dropped
        return lines

    async def _flush(self) -> None:
        lines = self._take()
        if not lines:
            return
        try:
            await anyio.to_thread.run_sync(self._write, lines)
        except OSError as exc:
            log.warning("audit log %s: cannot write: %s", self.path, exc.strerror)
            self.dropped += len(lines)
            self._dropped_reported += len(lines)
        else:
            self.written += len(lines)
        self._wrote.set()
        self._wrote = anyio.Event()

    async def run(self) -> None:
        """Write queued lines until cancelled (the server's task group); what is queued
        then is written, bounded by 5 s."""
        try:
            while True:
                await self._queued.wait()
                self._queued = anyio.Event()
                await self._flush()
        finally:
            with anyio.move_on_after(5, shield=True):
                await self._flush()


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
