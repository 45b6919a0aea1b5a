"""A request's query string, read once, as kube-apiserver reads it.

Go's ``url.ParseQuery`` (what ``req.URL.Query()`` gives the API server): pairs split on
``&``; a pair holding a ``;`` is dropped (Go 1.17 on), as is an empty one and one whose
``%`` escapes are malformed; ``+`` is a space; a key without ``=`` has the value ``""``.
Parameters are then read by their first value (``Convert_Slice_string_To_*``), booleans as
``Convert_Slice_string_To_bool`` does: false only for ``0`` and ``false`` (any case), true
for anything else, the empty string included.

The proxy decides everything from one :class:`Query` per request (the watch cap, whether
an answer is a stream: no read timeout and a slot of the stream cap, which reads the cache
may answer), so no spelling the API server takes for a stream (``follow=yes``,
``watch=``, ``follow=true&follow=false``) is counted as anything else here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["Query", "go_bool", "parse_query"]

_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")


def _unescape(raw: bytes) -> str | None:
    """Go's ``QueryUnescape``: None for a malformed escape; bytes that are not UTF-8 kept
    as surrogates (a Go string holds any bytes)."""
    if _BAD_ESCAPE.search(raw):
        return None
    decoded = _ESCAPE.sub(lambda m: bytes((int(m.group(1), 16),)), raw.replace(b"+", b" "))
    return decoded.decode("utf-8", "surrogateescape")


def go_bool(value: str) -> bool:
    """``Convert_Slice_string_To_bool`` of a first value."""
    return not (value == "0" or value.casefold() == "false")


class Query:
    """The parameters of one request, in order (see the module docstring).

    Attributes:
        pairs: ``(key, value)`` in the order given; repeated keys kept.
    """

    __slots__ = ("_first", "pairs")

    def __init__(self, pairs: tuple[tuple[str, str], ...]) -> None:
        self.pairs = pairs
        first: dict[str, str] = {}
        for key, value in pairs:
            first.setdefault(key, value)
        self._first = first

    def __repr__(self) -> str:
        return f"<Query {len(self.pairs)} parameters>"

    def __contains__(self, key: object) -> bool:
        return key in self._first

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.pairs)

    def first(self, key: str) -> str | None:
        """The first value of ``key`` (what the API server reads), or None."""
        return self._first.get(key)

    def flag(self, key: str) -> bool:
        """``key`` as the API server reads a boolean: its first value, Go's rule."""
        value = self._first.get(key)
        return value is not None and go_bool(value)

    @property
    def is_repeated(self) -> bool:
        """Whether some key is given more than once."""
        return len(self._first) != len(self.pairs)

    @property
    def is_watch(self) -> bool:
        return self.flag("watch")

    @property
    def is_stream(self) -> bool:
        """A ``watch`` or ``follow`` stream: the answer has no end the client waits for."""
        return self.flag("watch") or self.flag("follow")


def parse_query(query_string: bytes) -> Query:
    """The request's query, as ``url.ParseQuery`` reads it."""
    pairs: list[tuple[str, str]] = []
    for part in query_string.split(b"&"):
        if not part or b";" in part:
            continue
        raw_key, _, raw_value = part.partition(b"=")
        key = _unescape(raw_key)
        value = _unescape(raw_value)
        if key is None or value is None:
            continue
        pairs.append((key, value))
    return Query(tuple(pairs))
