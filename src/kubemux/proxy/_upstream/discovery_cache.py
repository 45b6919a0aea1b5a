"""Discovery and OpenAPI documents, fetched once per context generation and kept.

kubectl starts most commands with discovery (``/api`` and ``/apis`` in the aggregated
format, or ``/api/v1``, ``/apis/{group}/{version}`` one by one from an older server),
``/version``, and for ``apply``, ``create`` and ``explain`` the OpenAPI documents
(``/openapi/v2``, ``/openapi/v3`` and ``/openapi/v3/apis/{group}/{version}?hash=...``). They
change only when an API is added or removed, so the proxy asks the cluster once and
answers every later request from what it got:

- one entry per (path, what of the query changes the answer, ``Accept``), so every media
  type a client asks for is the server's own answer, byte for byte, with its
  ``Content-Type``, ``ETag`` and ``Cache-Control``. Of the query only ``pretty`` (read as
  the API server reads a boolean) and, for ``/openapi/v3/...``, ``hash`` change an answer;
  anything else (``timeout=32s``, junk) shares the entry, so a client cannot fill the
  cache with query strings. At most ``max_variants`` Accept headers (and ``pretty``) are
  kept per path; an answer for another one is passed through, not kept, so junk
  ``Accept`` headers cannot evict the real entries either;
- only 200 answers are kept; anything else passes through;
- entries live ``ttl`` seconds (600, as kubemux's own discovery), and all of a context's
  go at once when a CustomResourceDefinition or an APIService is written through the
  proxy and the API server accepted the write (a refused one changed nothing), or when
  the context is reloaded (the cache belongs to one generation);
- bounded: at most ``max_entries`` entries and ``max_bytes`` per context (least recently
  used first out); a document over ``max_entry_bytes`` is passed through, not kept;
- concurrent misses of one entry share one upstream request.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Mapping

import aiohttp
import anyio
from starlette.types import Send

from ..._errors import KubemuxError
from ..._http.transport import map_exceptions
from ..._http.upstream import Upstream
from .._api.responses import StatusError, status_for_error, upstream_header
from .._query.params import parse_query

__all__ = ["DiscoveryCache"]

_KEPT_HEADERS = ("content-type", "etag", "cache-control", "last-modified", "vary")
_CONDITIONAL = frozenset({"if-none-match", "if-modified-since", "if-match", "if-unmodified-since"})


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    fetched_at: float


_Key = tuple[str, str, str]  # (path and what of the query matters, Accept, pretty)


class _ContextEntries:
    __slots__ = ("bytes", "entries", "fetching", "generation", "variants")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.entries: collections.OrderedDict[_Key, _Entry] = collections.OrderedDict()
        self.bytes = 0
        self.fetching: dict[_Key, anyio.Event] = {}
        self.variants: collections.Counter[str] = collections.Counter()  # per path

    def drop(self, key: _Key) -> _Entry | None:
        entry = self.entries.pop(key, None)
        if entry is not None:
            self.bytes -= len(entry.body)
            self.variants[key[0]] -= 1
            if not self.variants[key[0]]:
                del self.variants[key[0]]
        return entry


class DiscoveryCache:
    """See the module docstring. One per proxy app."""

    def __init__(
        self,
        *,
        ttl: float = 600.0,
        max_bytes: int = 64 * 1024 * 1024,
        max_entry_bytes: int = 32 * 1024 * 1024,
        max_entries: int = 1024,
        max_variants: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self.max_entries = max_entries
        self.max_variants = max_variants
        self._clock = clock
        self._contexts: dict[str, _ContextEntries] = {}
        self.upstream_requests = 0  # for tests and status: fetches made

    def __len__(self) -> int:
        return sum(len(c.entries) for c in self._contexts.values())

    def invalidate(self, context: str) -> None:
        """Forget every document of ``context`` (an API was added or removed)."""
        self._contexts.pop(context, None)

    def prune(self, known: Mapping[str, object]) -> None:
        """Forget contexts that are no longer in ``known`` (the kubeconfig's)."""
        if len(self._contexts) > len(known):
            for name in [n for n in self._contexts if n not in known]:
                del self._contexts[name]

    def _entries(self, upstream: Upstream) -> _ContextEntries:
        held = self._contexts.get(upstream.context)
        if held is None or held.generation != upstream.generation:
            held = self._contexts[upstream.context] = _ContextEntries(upstream.generation)
        return held

    def lookup(self, upstream: Upstream, target: str, accept: str) -> _Entry | None:
        held = self._entries(upstream)
        key = _key(target, accept)
        entry = held.entries.get(key)
        if entry is None:
            return None
        if self._clock() - entry.fetched_at >= self.ttl:
            held.drop(key)
            return None
        held.entries.move_to_end(key)
        return entry

    async def serve(
        self,
        upstream: Upstream,
        send: Send,
        target: str,
        headers: list[tuple[str, str]],
        *,
        response_timeout: float,
    ) -> None:
        """Answer a discovery GET from the cache, fetching it on a miss.

        Raises:
            StatusError: the upstream could not be asked (nothing was sent yet).
        """
        accept = next((v for k, v in headers if k == "accept"), "")
        key = _key(target, accept)
        while True:
            entry = self.lookup(upstream, target, accept)
            if entry is not None:
                await _send_entry(send, entry)
                return
            held = self._entries(upstream)
            pending = held.fetching.get(key)
            if pending is None:
                break
            await pending.wait()  # another request is fetching it: use its answer
            if key not in held.entries:  # it was not kept: fetch for ourselves
                break
        done = held.fetching[key] = anyio.Event()
        try:
            await self._fetch(upstream, send, target, headers, key, held, response_timeout)
        finally:
            if held.fetching.get(key) is done:
                del held.fetching[key]
            done.set()

    async def _fetch(
        self,
        upstream: Upstream,
        send: Send,
        target: str,
        headers: list[tuple[str, str]],
        key: _Key,
        held: _ContextEntries,
        response_timeout: float,
    ) -> None:
        sent = [(k, v) for k, v in headers if k not in _CONDITIONAL]
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=60.0)
        self.upstream_requests += 1
        try:
            with anyio.fail_after(response_timeout):
                async with upstream.request("GET", target, headers=sent, timeouts=timeout) as resp:
                    status = resp.status
                    kept = tuple(
                        upstream_header(name, resp.headers[name], upstream.context)
                        for name in _KEPT_HEADERS
                        if name in resp.headers
                    )
                    body = bytearray()
                    started = False
                    async for chunk in resp.content.iter_any():
                        if not started and len(body) + len(chunk) <= self.max_entry_bytes:
                            body += chunk
                            continue
                        if not started:  # too large to keep (or not a 200): stream it
                            started = True
                            await _start(send, status, kept, None)
                            await send(
                                {
                                    "type": "http.response.body",
                                    "body": bytes(body),
                                    "more_body": True,
                                }
                            )
                            body = bytearray()
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    if started:
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                        return
        except TimeoutError:
            raise StatusError(
                504,
                f"Timeout: the API server of context {upstream.context!r} did not answer "
                f"within {response_timeout:g}s",
            ) from None
        except KubemuxError as exc:
            raise status_for_error(exc, upstream.context) from None
        except aiohttp.ClientError as exc:
            raise StatusError(503, f"kubemux proxy: {target[:200]}: {type(exc).__name__}") from None
        data = bytes(body)
        if status == 200:
            self._keep(held, key, _Entry(kept, data, self._clock()))
        await _start(send, status, kept, len(data))
        await send({"type": "http.response.body", "body": data})

    async def document(
        self, upstream: Upstream, target: str, *, request_timeout: float
    ) -> bytes | None:
        """The body of a 200 answer to ``GET target`` (Accept: application/json), from the
        cache or fetched into it; None for any other answer.

        Raises:
            KubemuxError: the upstream could not be asked.
        """
        accept = "application/json"
        entry = self.lookup(upstream, target, accept)
        if entry is not None:
            return entry.body
        held = self._entries(upstream)
        key = _key(target, accept)
        self.upstream_requests += 1
        t = aiohttp.ClientTimeout(total=request_timeout, sock_connect=10.0)
        with map_exceptions(upstream.server, f"GET {target[:200]}"):
            async with upstream.request(
                "GET", target, headers=[("accept", accept)], timeouts=t
            ) as resp:
                if resp.status != 200:
                    return None
                kept = tuple(
                    upstream_header(name, resp.headers[name], upstream.context)
                    for name in _KEPT_HEADERS
                    if name in resp.headers
                )
                buffer = bytearray()
                async for chunk in resp.content.iter_any():
                    buffer += chunk
                    if len(buffer) > self.max_entry_bytes:
                        return None
        body = bytes(buffer)
        self._keep(held, key, _Entry(kept, body, self._clock()))
        return body

    def _keep(self, held: _ContextEntries, key: _Key, entry: _Entry) -> None:
        held.drop(key)
        if held.variants[key[0]] >= self.max_variants:
            return  # served, not kept: junk Accept headers must not evict the real entries
        held.entries[key] = entry
        held.bytes += len(entry.body)
        held.variants[key[0]] += 1
        while held.entries and (
            held.bytes > self.max_bytes or len(held.entries) > self.max_entries
        ):
            held.drop(next(iter(held.entries)))


def _key(target: str, accept: str) -> _Key:
    """What the answer to ``GET target`` with ``accept`` depends on: the path, ``hash`` of an
    OpenAPI v3 document (it decides the caching headers, or a redirect), ``pretty`` (as the
    API server reads it: the first value, Go's boolean rule), and the Accept header."""
    path, _, raw_query = target.partition("?")
    query = parse_query(raw_query.encode("latin-1"))
    if path.startswith("/openapi/v3/"):
        digest = query.first("hash")
        if digest is not None:
            path = f"{path}?hash={digest}"
    return (path, " ".join(accept.split()), "pretty" if query.flag("pretty") else "")


async def _start(
    send: Send, status: int, headers: tuple[tuple[bytes, bytes], ...], length: int | None
) -> None:
    out = list(headers)
    if length is not None:
        out.append((b"content-length", str(length).encode()))
    out.append((b"x-kubemux-cache", b"miss"))
    await send({"type": "http.response.start", "status": status, "headers": out})


async def _send_entry(send: Send, entry: _Entry) -> None:
    headers = [
        *entry.headers,
        (b"content-length", str(len(entry.body)).encode()),
        (b"x-kubemux-cache", b"hit"),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": entry.body})
