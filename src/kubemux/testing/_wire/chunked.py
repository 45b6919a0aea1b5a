"""Chunked framing of watch responses, as Go's ``net/http`` does it."""

from __future__ import annotations

from aiohttp import web

__all__ = ["GoChunkedBody"]


class GoChunkedBody:
    """A watch response body framed the way kube-apiserver's Go ``net/http`` frames it.

    The API server writes each event with one ``Write`` and flushes only when no further
    event is queued. Go's response writer keeps a 2 KiB buffer in front of the chunked
    encoder (``bufferBeforeChunkingSize``): small events are packed into 2 KiB chunks, cut
    anywhere (even mid-line); a write that does not fit an empty buffer goes out as one
    chunk of its own, so an event above 2 KiB is one chunk. Clients therefore see about one
    HTTP chunk per event, and lines split across chunks, as from a real cluster.

    aiohttp frames each ``write()`` as one chunk and has no way to send a body already in
    chunked framing except turning its own framing off on the request's writer, which is
    what this does (a test reads the raw bytes to check the framing).
    """

    __slots__ = ("_buffer", "_buffered", "_out", "_response", "_size")

    def __init__(
        self, request: web.BaseRequest, response: web.StreamResponse, size: int = 2048
    ) -> None:
        request.writer.chunked = False  # type: ignore[attr-defined]  # we frame it ourselves
        self._response = response
        self._size = size
        self._buffer: list[bytes] = []  # Go's 2 KiB bufio.Writer
        self._buffered = 0
        self._out: list[bytes] = []  # framed bytes not yet handed to the transport

    def write(self, data: bytes) -> None:
        """One ``Write`` of the API server (one event line), as ``bufio.Writer.Write`` does it."""
        size = self._size
        while len(data) > size - self._buffered:
            if not self._buffered:  # a large write into an empty buffer goes out directly
                self._chunk(data)
                return
            room = size - self._buffered
            self._buffer.append(data[:room])
            self._buffered = size
            self.flush()
            data = data[room:]
        if data:
            self._buffer.append(data)
            self._buffered += len(data)

    def flush(self) -> None:
        """``Flush``: what is buffered becomes one chunk."""
        if self._buffered:
            self._chunk(b"".join(self._buffer))
            self._buffer.clear()
            self._buffered = 0

    def _chunk(self, data: bytes) -> None:
        self._out += (b"%x\r\n" % len(data), data, b"\r\n")

    async def send(self) -> None:
        """Hand the framed chunks to the transport (with aiohttp's flow control)."""
        if self._out:
            data = b"".join(self._out)
            self._out.clear()
            await self._response.write(data)

    async def end(self) -> None:
        """Flush, send, and end the body with the last, empty chunk."""
        self.flush()
        await self.send()
        await self._response.write_eof(b"0\r\n\r\n")
