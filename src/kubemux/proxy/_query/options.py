"""The request options of GET, LIST and WATCH, and where each read is served from.

:func:`parse_list_options` reads a LIST/WATCH query as kube-apiserver's ``ListResource``
handler does, in its order, so the first problem found is the one the API server reports:

1. the query decodes into ``v1.ListOptions`` (``timeoutSeconds`` and ``limit`` must be
   integers: ``strconv.ParseInt: parsing "x": invalid syntax``, 400), then into the internal
   ListOptions (``labelSelector``, then the ``fieldSelector`` syntax; 400);
2. the WatchList defaulting (a watch from ``""``/``"0"`` without ``sendInitialEvents`` or
   ``resourceVersionMatch`` becomes ``sendInitialEvents=true&resourceVersionMatch=
   NotOlderThan``) and the ListOptions validation (422 Invalid, ``ListOptions.meta.k8s.io ""
   is invalid: ...``);
3. the field labels are converted for the kind (400 ``field label not supported: ...``).

The decisions follow the api-concepts "Semantics for get and list" and the watch tables,
with the watch cache's behaviour where the proxy's cache stands in for it:

============================  ==========================================================
GET / LIST                    served from
============================  ==========================================================
``resourceVersion`` unset     the cache: **as fresh as the watch, not a quorum read**, and
                              never older than what the proxy has shown (the floors of
                              ``_reads.freshness``, checked before the plan; consistent
                              reads there too). The lag shows in status and headers.
``"0"``                       the cache (Any)
``N``, NotOlderThan (default  the cache once it has reached ``N``: wait, bounded
without ``limit``)            (:data:`DEFAULT_WAIT`, the watch cache's 3 s), then 504
                              ``Timeout: Too large resource version: N, current: C`` with
                              ``Retry-After: 1``
``N``, Exact (or unset with   the cache when it is at ``N``; wait (bounded) when ``N`` is
``limit``)                    ahead of it; older: its history taken back to ``N``, else
                              upstream (UPSTREAM: the caller tries the history first)
``continue``                  the snapshot the token pins (see ``_continue``)
============================  ==========================================================

WATCH: from ``""``/``"0"``: the current objects as ADDED, then changes (with
``sendInitialEvents=true`` and ``allowWatchBookmarks``, a BOOKMARK annotated
``k8s.io/initial-events-end`` between the two); ``sendInitialEvents=false``: changes only;
from ``N``: the changes after ``N`` (410 Expired as an ERROR event when ``N`` is older than
the history; with ``sendInitialEvents=true``, the state at a version not older than ``N``).
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol

import anyio

from ..._resources import Resource
from ..._wire.versions import rv_int
from .._api.statuses import (
    FieldError,
    bad_request,
    go_quote,
    internal_error,
    invalid,
    too_large_resource_version,
)
from .fields import FieldSelector, convert_field_terms, parse_field_terms
from .labels import LabelSelector, parse_label_selector

__all__ = [
    "DEFAULT_WAIT",
    "MIN_REQUEST_TIMEOUT",
    "ListOptions",
    "ReadPlan",
    "Source",
    "WatchPlan",
    "WatchStart",
    "parse_list_options",
    "parse_resource_version",
    "plan_get",
    "plan_list",
    "plan_watch",
    "wait_for_resource_version",
    "watch_timeout",
]

DEFAULT_WAIT: Final = 3.0
"""How long a read waits for the cache to reach a resourceVersion (the watch cache's
``blockTimeout``) before the 504."""

MIN_REQUEST_TIMEOUT: Final = 1800.0
"""A watch without ``timeoutSeconds`` lasts between one and two times this (kube-apiserver's
``--min-request-timeout`` default, randomised the same way)."""

Query = Mapping[str, str | Sequence[str]]


def _first(query: Query, name: str) -> str | None:
    value = query.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return value[0] if value else None


def _go_bool(text: str | None) -> bool | None:
    """``Convert_Slice_string_To_bool``: absent is None; ``"0"`` and ``false`` (any case)
    are false; anything else, the empty string included, is true."""
    if text is None:
        return None
    return not (text == "0" or text.lower() == "false")


def _go_int64(text: str | None) -> int | None:
    """``strconv.ParseInt(text, 10, 64)`` with Go's error messages."""
    if text is None:
        return None
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        raise bad_request(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise bad_request(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return value


def parse_resource_version(text: str) -> int:
    """``APIObjectVersioner.ParseResourceVersion``: ``""`` and ``"0"`` are 0, else an
    unsigned decimal.

    Raises:
        ProxyStatusError: 500 as the API server answers (its storage error is not a Status).
    """
    if text in ("", "0"):
        return 0
    if text.isascii() and text.isdigit():
        value = rv_int(text)  # bounded: a long one is out of range without an int() of it
        if value is not None and value < 2**64:
            return value
        detail = f"strconv.ParseUint: parsing {go_quote(text)}: value out of range"
    else:
        detail = f"strconv.ParseUint: parsing {go_quote(text)}: invalid syntax"
    raise internal_error(str(FieldError.invalid("resourceVersion", text, detail)))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ListOptions:
    """A LIST or WATCH request's options, parsed and validated (``internalversion.ListOptions``
    after the WatchList defaulting).

    Attributes:
        label_selector, field_selector: The selectors (field labels already converted).
        watch: A watch (``watch=true`` or the ``/watch/`` path).
        allow_watch_bookmarks: The client accepts BOOKMARK events.
        resource_version: The ``resourceVersion`` parameter (``""`` when absent).
        resource_version_match: ``""``, ``Exact`` or ``NotOlderThan``.
        timeout_seconds: ``timeoutSeconds`` (None when absent).
        limit: ``limit`` (0 when absent).
        continue_: The ``continue`` token (``""`` when absent).
        send_initial_events: ``sendInitialEvents`` (None when absent and not defaulted).
    """

    label_selector: LabelSelector
    field_selector: FieldSelector
    watch: bool = False
    allow_watch_bookmarks: bool = False
    resource_version: str = ""
    resource_version_match: str = ""
    timeout_seconds: int | None = None
    limit: int = 0
    continue_: str = ""
    send_initial_events: bool | None = None


def parse_list_options(
    query: Query,
    resource: Resource,
    *,
    watch: bool = False,
    watch_list: bool = True,
    custom: bool | None = None,
    selectable_fields: Sequence[str] = (),
) -> ListOptions:
    """Parse and validate a LIST/WATCH query in kube-apiserver's order (see the module doc).

    Args:
        query: The query parameters (a value may be a list: the first one counts, as in Go).
        resource: The resource (for the field label conversion).
        watch: The request is a watch whatever ``watch=`` says (the ``/watch/`` paths).
        watch_list: The server's WatchList feature (on by default since 1.34): allows
            ``sendInitialEvents`` and defaults legacy watches to it.
        custom, selectable_fields: For custom resources, see ``parse_field_selector``.

    Raises:
        ProxyStatusError: 400 for what does not parse, 422 for options that do not
            validate, with the API server's messages.
    """
    # 1. url.Values -> v1.ListOptions (integers parse here), then -> internal (selectors)
    timeout = _go_int64(_first(query, "timeoutSeconds"))
    limit = _go_int64(_first(query, "limit")) or 0
    labels = parse_label_selector(_first(query, "labelSelector") or "")
    terms = parse_field_terms(_first(query, "fieldSelector") or "")
    is_watch = watch or bool(_go_bool(_first(query, "watch")))
    bookmarks = bool(_go_bool(_first(query, "allowWatchBookmarks")))
    rv = _first(query, "resourceVersion") or ""
    match = _first(query, "resourceVersionMatch") or ""
    token = _first(query, "continue") or ""
    send_initial = _go_bool(_first(query, "sendInitialEvents"))
    # 2. SetListOptionsDefaults, ValidateListOptions
    if watch_list and is_watch and send_initial is None and not match and rv in ("", "0"):
        send_initial, match = True, "NotOlderThan"
    errors = (
        _validate_watch(match, send_initial, token, watch_list)
        if is_watch
        else _validate_list(match, rv, token, send_initial)
    )
    if errors:
        raise invalid("meta.k8s.io", "ListOptions", "", errors)
    # 3. field label conversion
    fields = convert_field_terms(
        terms, resource, custom=custom, selectable_fields=selectable_fields
    )
    return ListOptions(
        label_selector=labels,
        field_selector=fields,
        watch=is_watch,
        allow_watch_bookmarks=bookmarks,
        resource_version=rv,
        resource_version_match=match,
        timeout_seconds=timeout,
        limit=limit,
        continue_=token,
        send_initial_events=send_initial,
    )


_RVM = "resourceVersionMatch"


def _validate_list(match: str, rv: str, token: str, send_initial: bool | None) -> list[FieldError]:
    errors: list[FieldError] = []
    if match:
        if not rv:
            errors.append(
                FieldError.forbidden(
                    _RVM, "resourceVersionMatch is forbidden unless resourceVersion is provided"
                )
            )
        if token:
            errors.append(
                FieldError.forbidden(
                    _RVM, "resourceVersionMatch is forbidden when continue is provided"
                )
            )
        if match not in ("Exact", "NotOlderThan"):
            errors.append(FieldError.not_supported(_RVM, match, ["Exact", "NotOlderThan", ""]))
        if match == "Exact" and rv == "0":
            errors.append(
                FieldError.forbidden(
                    _RVM, 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
                )
            )
    if send_initial is not None:
        errors.append(
            FieldError.forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list")
        )
    return errors


def _validate_watch(
    match: str, send_initial: bool | None, token: str, watch_list: bool
) -> list[FieldError]:
    errors: list[FieldError] = []
    if send_initial is not None:
        if match != "NotOlderThan":
            errors.append(
                FieldError.forbidden(
                    _RVM, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                )
            )
        if not watch_list:
            errors.append(
                FieldError.forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                )
            )
    if match:
        if send_initial is None:
            errors.append(
                FieldError.forbidden(
                    _RVM,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                )
            )
        if match != "NotOlderThan":
            errors.append(FieldError.not_supported(_RVM, match, ["NotOlderThan"]))
        if token:
            errors.append(
                FieldError.forbidden(
                    _RVM, "resourceVersionMatch is forbidden when continue is provided"
                )
            )
    return errors


# --------------------------------------------------------------------------------- reads
class Source(enum.Enum):
    """Where a read is served from."""

    CACHE = "cache"
    """The current snapshot of the cache."""
    WAIT = "wait"
    """The cache, once it has reached :attr:`ReadPlan.resource_version` (bounded wait)."""
    UPSTREAM = "upstream"
    """An exact version older than the cache: its event history taken back to it, else the
    API server."""
    CONTINUE = "continue"
    """The snapshot a continue token pins."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReadPlan:
    """How to serve a GET or LIST.

    Attributes:
        source: See :class:`Source`.
        resource_version: The version to wait for (WAIT), or 0.
        exact: The snapshot served must be at exactly :attr:`resource_version` (an Exact
            read: after a wait that overshoots, go upstream).
    """

    source: Source
    resource_version: int = 0
    exact: bool = False

    def after_wait(self, cache_rv: int) -> ReadPlan:
        """The plan once the cache is at ``cache_rv`` (>= the version waited for)."""
        if self.exact and cache_rv != self.resource_version:
            return ReadPlan(Source.UPSTREAM, self.resource_version, exact=True)
        return ReadPlan(Source.CACHE, self.resource_version, exact=self.exact)


def plan_get(resource_version: str, cache_rv: int) -> ReadPlan:
    """A GET (``resourceVersion`` only; always not-older-than).

    Raises:
        ProxyStatusError: 500 for a resourceVersion that is not a number.
    """
    rv = parse_resource_version(resource_version)
    if rv == 0 or rv <= cache_rv:
        return ReadPlan(Source.CACHE, rv)
    return ReadPlan(Source.WAIT, rv)


def plan_list(options: ListOptions, cache_rv: int) -> ReadPlan:
    """A LIST, after :func:`parse_list_options`.

    Raises:
        ProxyStatusError: 400 for a continue token with a resourceVersion other than
            ``"0"`` (the storage layer's check); 500 for a resourceVersion that is not a
            number.
    """
    text = options.resource_version
    if options.continue_:
        if text not in ("", "0"):
            raise bad_request("specifying resource version is not allowed when using continue")
        return ReadPlan(Source.CONTINUE)
    rv = parse_resource_version(text)
    if rv == 0:
        return ReadPlan(Source.CACHE)
    match = options.resource_version_match
    exact = match == "Exact" or (not match and options.limit > 0)
    if exact:
        if rv == cache_rv:
            return ReadPlan(Source.CACHE, rv, exact=True)
        if rv < cache_rv:
            return ReadPlan(Source.UPSTREAM, rv, exact=True)
        return ReadPlan(Source.WAIT, rv, exact=True)
    if rv <= cache_rv:
        return ReadPlan(Source.CACHE, rv)
    return ReadPlan(Source.WAIT, rv)


class _History(Protocol):
    def add_listener(self, fn: Callable[[_RvEvent], None]) -> Callable[[], None]: ...


class _RvEvent(Protocol):
    @property
    def rv(self) -> int: ...


async def wait_for_resource_version(
    history: _History,
    current: Callable[[], int],
    target: int,
    wait_timeout: float = DEFAULT_WAIT,
) -> int:
    """Wait until the cache has reached ``target``; return the version it is at.

    ``current`` reads the store's resourceVersion; the history's listener wakes the wait
    when it moves (bookmarks included).

    Raises:
        ProxyStatusError: 504 ``Too large resource version`` after ``wait_timeout`` seconds.

    Cancellation: the listener is removed and the cancellation propagates.
    """
    now = current()
    if now >= target:
        return now
    reached = anyio.Event()

    def seen(event: _RvEvent) -> None:
        if event.rv >= target:
            reached.set()

    remove = history.add_listener(seen)
    try:
        if current() < target:
            with anyio.move_on_after(wait_timeout):
                await reached.wait()
    finally:
        remove()
    now = current()
    if now < target:
        raise too_large_resource_version(target, now)
    return now


# -------------------------------------------------------------------------------- watches
class WatchStart(enum.Enum):
    """Where a watch's stream starts."""

    INITIAL = "initial"
    """The current objects as ADDED (a snapshot), then the changes after it."""
    NOW = "now"
    """Only the changes after the current version."""
    SINCE = "since"
    """The changes after :attr:`WatchPlan.resource_version` (from the history)."""


@dataclasses.dataclass(frozen=True, slots=True)
class WatchPlan:
    """How to serve a WATCH.

    Attributes:
        start: See :class:`WatchStart`.
        resource_version: For SINCE, the version to resume after; for INITIAL, the version
            the snapshot must not be older than (wait for it, bounded; 0: any).
        initial_events_end: Send the ``k8s.io/initial-events-end`` BOOKMARK after the
            initial events (``sendInitialEvents=true`` with ``allowWatchBookmarks``).
        bookmarks: Periodic BOOKMARKs are wanted.
    """

    start: WatchStart
    resource_version: int = 0
    initial_events_end: bool = False
    bookmarks: bool = False


def plan_watch(options: ListOptions) -> WatchPlan:
    """A WATCH, after :func:`parse_list_options`.

    Raises:
        ProxyStatusError: 500 for a resourceVersion that is not a number (before the
            stream starts, as the cacher returns it).
    """
    rv = parse_resource_version(options.resource_version)
    bookmarks = options.allow_watch_bookmarks
    initial = options.send_initial_events
    if initial is True:
        return WatchPlan(WatchStart.INITIAL, rv, initial_events_end=bookmarks, bookmarks=bookmarks)
    if initial is False:
        if rv == 0:
            return WatchPlan(WatchStart.NOW, bookmarks=bookmarks)
        return WatchPlan(WatchStart.SINCE, rv, bookmarks=bookmarks)
    # legacy (the WatchList feature off): "" and "0" get the state, N resumes
    if rv == 0:
        return WatchPlan(WatchStart.INITIAL, bookmarks=bookmarks)
    return WatchPlan(WatchStart.SINCE, rv, bookmarks=bookmarks)


def watch_timeout(
    timeout_seconds: int | None,
    *,
    min_request_timeout: float = MIN_REQUEST_TIMEOUT,
    rand: Callable[[], float] = random.random,
) -> float:
    """A watch's lifetime in seconds, as ``ListResource`` computes it: ``timeoutSeconds``,
    or (absent or 0) ``min_request_timeout`` times a random factor in [1, 2). A negative
    value ends the watch at once (0.0)."""
    if timeout_seconds:
        return float(max(0, timeout_seconds))
    return min_request_timeout * (rand() + 1.0)
