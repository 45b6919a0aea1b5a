"""The GET/LIST/WATCH decision table (resourceVersion, resourceVersionMatch, limit,
continue, sendInitialEvents), ListOptions validation in the API server's order and words,
the bounded wait for a resourceVersion, and Status bodies byte for byte."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import pytest

from kubemux._resources import parse_resource
from kubemux.proxy._api.statuses import (
    FieldError,
    ProxyStatusError,
    bad_request,
    encode_json,
    go_quote,
    invalid,
    method_not_supported,
    not_found,
    not_found_path,
    too_large_resource_version,
    too_many_requests,
    unavailable,
)
from kubemux.proxy._query.options import (
    ListOptions,
    ReadPlan,
    Source,
    WatchPlan,
    WatchStart,
    parse_list_options,
    parse_resource_version,
    plan_get,
    plan_list,
    plan_watch,
    wait_for_resource_version,
    watch_timeout,
)
from kubemux.proxy._query.selectors import parse_field_selector, parse_label_selector

PODS = parse_resource("pods")


def _error(query: dict[str, str], **kw: bool) -> ProxyStatusError:
    with pytest.raises(ProxyStatusError) as info:
        parse_list_options(query, PODS, **kw)
    return info.value


# ------------------------------------------------------------------------ Status bodies
def test_status_bodies_are_byte_exact() -> None:
    assert bad_request("a <b> & c").body == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"a \\u003cb\\u003e \\u0026 c","reason":"BadRequest","code":400}\n'
    )
    assert not_found("pods", "web").body == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"pods \\"web\\" not found","reason":"NotFound",'
        b'"details":{"name":"web","kind":"pods"},"code":404}\n'
    )
    assert (
        b'"message":"deployments.apps \\"x\\" not found"'
        in not_found("deployments", "x", "apps").body
    )
    assert (
        b'"details":{"name":"x","group":"apps","kind":"deployments"}'
        in not_found("deployments", "x", "apps").body
    )
    assert not_found_path().body == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"the server could not find the requested resource","reason":"NotFound",'
        b'"details":{},"code":404}\n'
    )
    assert unavailable("context prod: no route").body.endswith(
        b'"reason":"ServiceUnavailable","code":503}\n'
    )
    assert (
        method_not_supported("pods", "watch").message
        == 'watch is not supported on resources of kind "pods"'
    )


def test_too_large_resource_version_is_the_watch_caches_504() -> None:
    error = too_large_resource_version(20, 15)
    assert error.code == 504
    assert error.headers == {"Retry-After": "1"}
    assert error.body == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"Timeout: Too large resource version: 20, current: 15","reason":"Timeout",'
        b'"details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],'
        b'"retryAfterSeconds":1},"code":504}\n'
    )


def test_too_many_requests_carries_retry_after() -> None:
    error = too_many_requests("too many watches for this credential", 5)
    assert error.code == 429 and error.headers == {"Retry-After": "5"}
    assert b'"details":{"retryAfterSeconds":5},"code":429}' in error.body
    assert "429" in repr(error)


def test_a_watch_error_event_line() -> None:
    assert bad_request("x").watch_event() == (
        b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},'
        b'"status":"Failure","message":"x","reason":"BadRequest","code":400}}\n'
    )


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("plain", '"plain"'),
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("tab\tnl\n", '"tab\\tnl\\n"'),
        ("\x00\x7f", '"\\x00\\x7f"'),
        ("é中", '"é中"'),
        ("\u200b", '"\\u200b"'),
        ("\U000e0001", '"\\U000e0001"'),
        ("\udcff", '"\\xff"'),
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


def test_encode_json_escapes_as_go() -> None:
    assert encode_json({"a": "<\u2028\u2029&>"}) == b'{"a":"\\u003c\\u2028\\u2029\\u0026\\u003e"}'
    assert encode_json("a\udcff\udcfeb") == b'"a\\ufffd\\ufffdb"'  # per invalid byte, as Go
    assert encode_json("\ufffd") == '"\ufffd"'.encode()  # a real U+FFFD stays as it is


# ----------------------------------------------------------------- ListOptions validation
@pytest.mark.parametrize(
    ("query", "causes"),
    [
        (
            {"resourceVersionMatch": "NotOlderThan"},
            [
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            ],
        ),
        (
            {"resourceVersion": "5", "resourceVersionMatch": "Bogus"},
            [
                (
                    "resourceVersionMatch",
                    "FieldValueNotSupported",
                    'Unsupported value: "Bogus": supported values: "Exact", "NotOlderThan", ""',
                )
            ],
        ),
        (
            {"resourceVersion": "0", "resourceVersionMatch": "Exact"},
            [
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                )
            ],
        ),
        (
            {"resourceVersion": "5", "resourceVersionMatch": "Exact", "continue": "t"},
            [
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                )
            ],
        ),
        (
            {"sendInitialEvents": "true"},
            [
                (
                    "sendInitialEvents",
                    "FieldValueForbidden",
                    "Forbidden: sendInitialEvents is forbidden for list",
                )
            ],
        ),
    ],
)
def test_list_options_validation(query: dict[str, str], causes: list[tuple[str, str, str]]) -> None:
    error = _error(query)
    assert error.code == 422 and error.reason == "Invalid"
    details = error.status["details"]
    assert details["group"] == "meta.k8s.io" and details["kind"] == "ListOptions"
    assert [(c["field"], c["reason"], c["message"]) for c in details["causes"]] == causes
    assert (
        error.message
        == 'ListOptions.meta.k8s.io "" is invalid: ' + f"{causes[0][0]}: {causes[0][2]}"
    )


def test_several_validation_errors_aggregate() -> None:
    error = _error({"resourceVersionMatch": "Bogus", "continue": "t"})
    assert error.message == (
        'ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: '
        "resourceVersionMatch is forbidden unless resourceVersion is provided, "
        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided, "
        'resourceVersionMatch: Unsupported value: "Bogus": supported values: "Exact", "NotOlderThan", ""]'
    )
    assert error.body.startswith(
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
        b'"ListOptions.meta.k8s.io \\"\\" is invalid: [resourceVersionMatch: Forbidden:'
    )
    assert error.body.endswith(b'"field":"resourceVersionMatch"}]},"code":422}\n')


def test_watch_options_validation() -> None:
    error = _error({"watch": "1", "sendInitialEvents": "true"})
    assert [c["message"] for c in error.status["details"]["causes"]] == [
        "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    ]
    error = _error({"watch": "1", "resourceVersion": "5", "resourceVersionMatch": "NotOlderThan"})
    assert [c["message"] for c in error.status["details"]["causes"]] == [
        "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
    ]
    error = _error({"watch": "1", "sendInitialEvents": "1", "resourceVersionMatch": "Exact"})
    assert [c["message"] for c in error.status["details"]["causes"]] == [
        "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        'Unsupported value: "Exact": supported values: "NotOlderThan"',
    ]
    error = _error(
        {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"},
        watch_list=False,
    )
    assert [c["message"] for c in error.status["details"]["causes"]] == [
        "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    ]


def test_the_order_in_which_problems_are_found() -> None:
    # integers decode first, then the label selector, then the field selector's syntax,
    # then validation (422), then the field labels (400)
    both = {"limit": "x", "labelSelector": "a in", "fieldSelector": "bad"}
    assert _error(both).message == 'strconv.ParseInt: parsing "x": invalid syntax'
    assert _error({"timeoutSeconds": "", "labelSelector": "a in"}).message == (
        'strconv.ParseInt: parsing "": invalid syntax'
    )
    assert _error({"labelSelector": "a in", "fieldSelector": "bad"}).message.startswith(
        "unable to parse"
    )
    assert _error({"fieldSelector": "bad", "sendInitialEvents": "1"}).code == 400
    assert _error({"fieldSelector": "spec.x=1", "sendInitialEvents": "1"}).code == 422
    assert _error({"fieldSelector": "spec.x=1"}).message == "field label not supported: spec.x"
    assert _error({"limit": "99999999999999999999"}).message == (
        'strconv.ParseInt: parsing "99999999999999999999": value out of range'
    )


def test_parsed_options() -> None:
    options = parse_list_options(
        {
            "labelSelector": "app=web",
            "fieldSelector": "spec.nodeName=n1",
            "limit": "500",
            "resourceVersion": "10",
            "resourceVersionMatch": "NotOlderThan",
            "timeoutSeconds": "30",
        },
        PODS,
    )
    assert options.label_selector == parse_label_selector("app=web")
    assert options.field_selector == parse_field_selector("spec.nodeName=n1", PODS)
    assert (options.limit, options.resource_version, options.timeout_seconds) == (500, "10", 30)
    assert not options.watch and options.send_initial_events is None
    # list values: the first counts, as in Go
    assert parse_list_options({"limit": ["3", "x"]}, PODS).limit == 3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", True),
        ("1", True),
        ("true", True),
        ("yes", True),
        ("0", False),
        ("false", False),
        ("FALSE", False),
    ],
)
def test_booleans_parse_as_go_does(value: str, expected: bool) -> None:
    options = parse_list_options({"watch": value, "allowWatchBookmarks": value}, PODS)
    assert options.watch is expected and options.allow_watch_bookmarks is expected


def test_legacy_watches_default_to_watch_list() -> None:
    for rv in ("", "0"):
        options = parse_list_options({"watch": "1", "resourceVersion": rv}, PODS)
        assert options.send_initial_events is True
        assert options.resource_version_match == "NotOlderThan"
    resumed = parse_list_options({"watch": "1", "resourceVersion": "7"}, PODS)
    assert resumed.send_initial_events is None
    off = parse_list_options({"resourceVersion": "0"}, PODS, watch=True, watch_list=False)
    assert off.watch and off.send_initial_events is None


# ---------------------------------------------------------------------------- read plans
def _list(**query: str) -> ListOptions:
    return parse_list_options(query, PODS)


@pytest.mark.parametrize(
    ("query", "cache_rv", "plan"),
    [
        # resourceVersionMatch unset, no limit: Most Recent / Any / Not older than
        ({}, 100, ReadPlan(Source.CACHE)),
        ({"resourceVersion": "0"}, 100, ReadPlan(Source.CACHE)),
        ({"resourceVersion": "90"}, 100, ReadPlan(Source.CACHE, 90)),
        ({"resourceVersion": "100"}, 100, ReadPlan(Source.CACHE, 100)),
        ({"resourceVersion": "110"}, 100, ReadPlan(Source.WAIT, 110)),
        # unset with a limit: Most Recent / Any / Exact
        ({"limit": "5"}, 100, ReadPlan(Source.CACHE)),
        ({"limit": "5", "resourceVersion": "0"}, 100, ReadPlan(Source.CACHE)),
        ({"limit": "5", "resourceVersion": "100"}, 100, ReadPlan(Source.CACHE, 100, exact=True)),
        ({"limit": "5", "resourceVersion": "90"}, 100, ReadPlan(Source.UPSTREAM, 90, exact=True)),
        ({"limit": "5", "resourceVersion": "110"}, 100, ReadPlan(Source.WAIT, 110, exact=True)),
        # Exact
        (
            {"resourceVersion": "90", "resourceVersionMatch": "Exact"},
            100,
            ReadPlan(Source.UPSTREAM, 90, exact=True),
        ),
        (
            {"resourceVersion": "100", "resourceVersionMatch": "Exact"},
            100,
            ReadPlan(Source.CACHE, 100, exact=True),
        ),
        (
            {"resourceVersion": "110", "resourceVersionMatch": "Exact"},
            100,
            ReadPlan(Source.WAIT, 110, exact=True),
        ),
        # NotOlderThan, with or without a limit
        (
            {"resourceVersion": "0", "resourceVersionMatch": "NotOlderThan"},
            100,
            ReadPlan(Source.CACHE),
        ),
        (
            {"resourceVersion": "90", "resourceVersionMatch": "NotOlderThan", "limit": "5"},
            100,
            ReadPlan(Source.CACHE, 90),
        ),
        (
            {"resourceVersion": "110", "resourceVersionMatch": "NotOlderThan"},
            100,
            ReadPlan(Source.WAIT, 110),
        ),
        # continue: the token's snapshot (rv "0" is tolerated)
        ({"limit": "5", "continue": "tok"}, 100, ReadPlan(Source.CONTINUE)),
        ({"limit": "5", "continue": "tok", "resourceVersion": "0"}, 100, ReadPlan(Source.CONTINUE)),
    ],
)
def test_the_list_decision_table(query: dict[str, str], cache_rv: int, plan: ReadPlan) -> None:
    assert plan_list(parse_list_options(query, PODS), cache_rv) == plan


def test_continue_with_a_resource_version_is_the_storage_layers_400() -> None:
    with pytest.raises(ProxyStatusError) as info:
        plan_list(_list(limit="5", resourceVersion="10", **{"continue": "tok"}), 100)
    assert info.value.code == 400
    assert info.value.message == "specifying resource version is not allowed when using continue"


def test_after_a_wait() -> None:
    assert ReadPlan(Source.WAIT, 110).after_wait(115) == ReadPlan(Source.CACHE, 110)
    assert ReadPlan(Source.WAIT, 110, exact=True).after_wait(110) == ReadPlan(
        Source.CACHE, 110, exact=True
    )
    assert ReadPlan(Source.WAIT, 110, exact=True).after_wait(115) == ReadPlan(
        Source.UPSTREAM, 110, exact=True
    )


def test_get_plans() -> None:
    assert plan_get("", 100) == ReadPlan(Source.CACHE)
    assert plan_get("0", 100) == ReadPlan(Source.CACHE)
    assert plan_get("100", 100) == ReadPlan(Source.CACHE, 100)
    assert plan_get("101", 100) == ReadPlan(Source.WAIT, 101)


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("abc", 'strconv.ParseUint: parsing "abc": invalid syntax'),
        ("-1", 'strconv.ParseUint: parsing "-1": invalid syntax'),
        (
            "18446744073709551616",
            'strconv.ParseUint: parsing "18446744073709551616": value out of range',
        ),
    ],
)
def test_a_resource_version_that_is_not_a_number(text: str, detail: str) -> None:
    with pytest.raises(ProxyStatusError) as info:
        parse_resource_version(text)
    assert info.value.code == 500
    assert info.value.message == f'resourceVersion: Invalid value: "{text}": {detail}'
    assert b'"reason"' not in info.value.body  # the API server's fallback has none
    assert parse_resource_version("007") == 7


@pytest.mark.parametrize(
    ("query", "plan"),
    [
        ({}, WatchPlan(WatchStart.INITIAL)),
        (
            {"resourceVersion": "0", "allowWatchBookmarks": "true"},
            WatchPlan(WatchStart.INITIAL, initial_events_end=True, bookmarks=True),
        ),
        ({"resourceVersion": "7"}, WatchPlan(WatchStart.SINCE, 7)),
        (
            {"resourceVersion": "7", "allowWatchBookmarks": "1"},
            WatchPlan(WatchStart.SINCE, 7, bookmarks=True),
        ),
        (
            {
                "sendInitialEvents": "true",
                "resourceVersionMatch": "NotOlderThan",
                "resourceVersion": "9",
                "allowWatchBookmarks": "1",
            },
            WatchPlan(WatchStart.INITIAL, 9, initial_events_end=True, bookmarks=True),
        ),
        (
            {"sendInitialEvents": "false", "resourceVersionMatch": "NotOlderThan"},
            WatchPlan(WatchStart.NOW),
        ),
        (
            {
                "sendInitialEvents": "false",
                "resourceVersionMatch": "NotOlderThan",
                "resourceVersion": "0",
            },
            WatchPlan(WatchStart.NOW),
        ),
        (
            {
                "sendInitialEvents": "false",
                "resourceVersionMatch": "NotOlderThan",
                "resourceVersion": "5",
            },
            WatchPlan(WatchStart.SINCE, 5),
        ),
    ],
)
def test_the_watch_decision_table(query: dict[str, str], plan: WatchPlan) -> None:
    assert plan_watch(parse_list_options({**query, "watch": "true"}, PODS)) == plan


def test_legacy_watch_plans_without_the_watch_list_feature() -> None:
    options = parse_list_options({"watch": "1", "allowWatchBookmarks": "1"}, PODS, watch_list=False)
    assert plan_watch(options) == WatchPlan(WatchStart.INITIAL, bookmarks=True)


def test_watch_timeout() -> None:
    assert watch_timeout(30) == 30.0
    assert watch_timeout(-5) == 0.0
    assert watch_timeout(None, rand=lambda: 0.5) == 2700.0
    assert watch_timeout(0, min_request_timeout=10, rand=lambda: 0.0) == 10.0


# ------------------------------------------------------------------- waiting for a version
@dataclass(frozen=True)
class _Ev:
    rv: int


class _History:
    def __init__(self) -> None:
        self.listeners: list[Callable[[_Ev], None]] = []

    def add_listener(self, fn: Callable[[_Ev], None]) -> Callable[[], None]:
        self.listeners.append(fn)
        return lambda: self.listeners.remove(fn)

    def emit(self, rv: int) -> None:
        for fn in list(self.listeners):
            fn(_Ev(rv))


async def test_a_wait_returns_when_the_cache_reaches_the_version() -> None:
    history = _History()
    rv = [100]

    async def advance() -> None:
        for value in (105, 110, 111):
            await anyio.lowlevel.checkpoint()
            rv[0] = value
            history.emit(value)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(advance)
            assert await wait_for_resource_version(history, lambda: rv[0], 110) >= 110
    assert history.listeners == []
    assert await wait_for_resource_version(history, lambda: 120, 110) == 120  # no wait


async def test_a_wait_times_out_with_the_504() -> None:
    history = _History()
    with anyio.fail_after(5), pytest.raises(ProxyStatusError) as info:
        await wait_for_resource_version(history, lambda: 100, 150, wait_timeout=0.05)
    assert info.value.code == 504
    assert info.value.message == "Timeout: Too large resource version: 150, current: 100"
    assert info.value.headers["Retry-After"] == "1"
    assert history.listeners == []


async def test_a_cancelled_wait_removes_its_listener() -> None:
    history = _History()
    with anyio.move_on_after(0.05):
        await wait_for_resource_version(history, lambda: 1, 5, wait_timeout=10)
    assert history.listeners == []


def test_invalid_builder() -> None:
    error = invalid("", "Pod", "web", [FieldError.invalid("spec.x", 5, "must be positive")])
    assert error.message == 'Pod "web" is invalid: spec.x: Invalid value: 5: must be positive'
    assert error.status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 5: must be positive",
            "field": "spec.x",
        }
    ]
