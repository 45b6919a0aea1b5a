"""Ages as the API server prints them, and a cached Table row's Age cells rendered again
for now (a row kept in a cache was rendered when the server last sent it)."""

from __future__ import annotations

import datetime as dt

import orjson
import pytest

from kubemux._wire.ages import CRD_CREATED_DOC, CREATED_DOC, AgeCells, human_duration
from kubemux.proxy._watch.formats import TableWatchFormat

NOW = dt.datetime(2026, 12, 2, 12, 0, 0, tzinfo=dt.UTC).timestamp()
COLUMNS = [
    {"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0},
    {"name": "Ready", "type": "string", "format": "", "description": "", "priority": 0},
    {"name": "Age", "type": "string", "format": "", "description": CREATED_DOC, "priority": 0},
]


def meta(created: str | None) -> bytes:
    body: dict[str, object] = {"name": "web-1", "namespace": "default"}
    if created is not None:
        body["creationTimestamp"] = created
    # an annotation of the same name does not stand in for the real one
    body["annotations"] = {"creationTimestamp": "1999-01-01T00:00:00Z"}
    return orjson.dumps(body)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (119, "119s"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (5 * 3600, "5h"),
        (30 * 3600, "30h"),
        (3 * 86400 + 3600, "3d1h"),
        (400 * 86400, "400d"),
        (3 * 365 * 86400 + 86400, "3y1d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration_is_apimachinerys(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_the_age_columns_are_found_by_what_the_server_says_they_are() -> None:
    assert AgeCells.of(COLUMNS).indexes == (2,)  # type: ignore[union-attr]
    crd = [
        {"name": "Name", "type": "string", "description": ""},
        {"name": "Born", "type": "date", "description": CRD_CREATED_DOC},
        {"name": "Seen", "type": "date", "description": "when it was seen"},
    ]
    assert AgeCells.of(crd).indexes == (1,)  # type: ignore[union-attr]
    # an Age that is not the creation time's (another description) is left as it is
    other = [{"name": "Age", "type": "string", "description": "how old the cheese is"}]
    assert AgeCells.of(other) is None


def test_a_stale_age_is_rendered_for_now_and_nothing_else_moves() -> None:
    ages = AgeCells.of(COLUMNS)
    assert ages is not None
    cells = b'["web-1","1/1","5h"]'
    created = meta("2026-12-02T06:30:00Z")  # 5h30m before NOW
    assert ages.refresh(cells, created, NOW) == b'["web-1","1/1","5h30m"]'
    same = b'["web-1","1/1","5h30m"]'
    assert ages.refresh(same, created, NOW) is same  # nothing changed: the same bytes
    assert ages.refresh(cells, meta(None), NOW) == b'["web-1","1/1","<unknown>"]'


@pytest.mark.parametrize(
    "cells",
    [b'["web-1","1/1",null]', b'["web-1"]', b"not json", b'["web-1","1/1",5]'],
)
def test_a_row_the_server_sent_oddly_keeps_its_cells(cells: bytes) -> None:
    ages = AgeCells.of(COLUMNS)
    assert ages is not None
    assert ages.refresh(cells, meta("2026-12-02T06:30:00Z"), NOW) == cells


def test_a_table_watch_renders_the_age_of_a_cached_row_for_now() -> None:
    fmt = TableWatchFormat(COLUMNS)
    ten_hours_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=10, minutes=5)
    created = ten_hours_ago.strftime("%Y-%m-%dT%H:%M:%SZ")
    row = (
        b'{"cells":["web-1","1/1","3h"],"metadata":'
        + meta(created)[:-1]
        + b',"resourceVersion":"7"}}'
    )
    event = orjson.loads(fmt.event("ADDED", row, headers=False))
    assert event["object"]["rows"][0]["cells"] == ["web-1", "1/1", "10h"]
