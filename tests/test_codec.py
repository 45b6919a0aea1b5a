"""The hot-path decoder: a block of watch lines in, cache entries (or lines to look at) out."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from kubemux._wire.codec import (
    Entry,
    PinnedEntry,
    UndecodableObject,
    bad_utf8,
    check_readable,
    compact_rv,
    decode_block,
    decode_entry,
    decode_raw,
    foreign_entry,
    pinned_entry,
    raw_resource_version,
    rv_str,
    split_block,
)
from kubemux.testing import make_pod


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj})


def pod(name: str, rv: str = "7", **extra: Any) -> dict[str, Any]:
    obj = make_pod(name, size=600)
    obj["metadata"]["resourceVersion"] = rv
    obj["metadata"].update(extra)
    return obj


def block(*lines: bytes, end: bytes = b"\n") -> tuple[bytes, int, int]:
    buf = b"junk before" + b"\n".join(lines) + end + b"junk after"
    return buf, len(b"junk before"), len(buf) - len(b"junk after")


def without_mf(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def entry_of(item: tuple[str, Entry | bytes]) -> Entry:
    assert isinstance(item[1], Entry), item
    return item[1]


def test_canonical_lines_become_entries_with_managed_fields_cut_from_the_bytes() -> None:
    a, b = pod("a", "10"), pod("b", "11")
    assert a["metadata"]["managedFields"]
    items = decode_block(*block(line("ADDED", a), line("MODIFIED", b), line("DELETED", a)), True)
    assert [kind for kind, _ in items] == ["ADDED", "MODIFIED", "DELETED"]
    first = entry_of(items[0])
    assert (first.namespace, first.name, first.resource_version) == ("default", "a", "10")
    assert orjson.loads(first.raw) == without_mf(a)  # exactly the object, one member less
    assert orjson.loads(entry_of(items[1]).raw) == without_mf(b)


def test_managed_fields_kept_when_asked() -> None:
    a = pod("a")
    (item,) = decode_block(*block(line("ADDED", a)), False)
    assert orjson.loads(entry_of(item).raw) == a


def test_other_lines_are_handed_back_in_order() -> None:
    a, b = pod("a"), pod("b")
    bookmark = line("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "12"}})
    error = line("ERROR", {"kind": "Status", "code": 410, "metadata": {}})
    reordered = orjson.dumps({"object": b, "type": "ADDED"})
    spaced = b'{"type": "ADDED", "object": ' + orjson.dumps(b) + b"}"
    nameless = line("ADDED", {"metadata": {"resourceVersion": "3"}})
    crlf = line("ADDED", b) + b"\r"
    items = decode_block(
        *block(line("ADDED", a), bookmark, error, reordered, spaced, nameless, crlf), True
    )
    assert [kind for kind, _ in items] == ["ADDED", "", "", "", "", "", ""]
    assert [raw for _, raw in items[1:]] == [bookmark, error, reordered, spaced, nameless, crlf]


def test_blank_lines_do_not_shift_the_objects() -> None:
    a, b, c = pod("a"), pod("b"), pod("c")
    lines = [b"", line("ADDED", a), b"  ", b"", line("ADDED", b), b"\r", b"\t", line("ADDED", c)]
    items = decode_block(*block(*lines), True)
    assert [entry_of(i).name for i in items] == ["a", "b", "c"]
    assert [orjson.loads(entry_of(i).raw) for i in items] == [without_mf(o) for o in (a, b, c)]
    # blank lines among lines that go the general way are skipped just the same
    odd = orjson.dumps({"object": b, "type": "ADDED"})
    items = decode_block(*block(b" ", odd, b"", line("ADDED", c)), True)
    assert items[0] == ("", odd) and entry_of(items[1]).name == "c"


@pytest.mark.parametrize(
    "bad",
    [
        b"not json at all",
        b'{"type":"ADDED","object":{"metadata":',
        b'{"type":"ADDED","object":{"metadata":{"name":"x","resourceVersion":"1"}},"extra":1}',
        b'{"type":5,"object":{}}',
        b'{"type":"ADDED","object":[]}',
    ],
)
def test_a_line_the_decoder_refuses_sends_the_whole_block_the_general_way(bad: bytes) -> None:
    a = pod("a")
    items = decode_block(*block(line("ADDED", a), bad, b"", line("ADDED", a)), True)
    assert items == [("", line("ADDED", a)), ("", bad), ("", line("ADDED", a))]


def test_a_label_named_managed_fields_is_not_what_gets_cut() -> None:
    a = pod("a")
    meta = {k: v for k, v in a["metadata"].items() if k != "labels"}
    a["metadata"] = {"labels": {"managedFields": "x"}, **meta}  # before the real member
    (item,) = decode_block(*block(line("ADDED", a)), True)
    assert orjson.loads(entry_of(item).raw) == without_mf(a)
    assert orjson.loads(entry_of(item).raw)["metadata"]["labels"] == {"managedFields": "x"}


def test_managed_fields_in_unusual_spacing_still_dropped() -> None:
    a = pod("a")
    spaced = orjson.dumps(a, option=orjson.OPT_INDENT_2).replace(b"\n", b"")
    raw = b'{"type":"ADDED","object":' + spaced + b"}"
    (item,) = decode_block(*block(raw), True)
    assert orjson.loads(entry_of(item).raw) == without_mf(a)


def test_managed_fields_first_last_or_only() -> None:
    mf = [{"manager": "kubectl", "operation": "Update"}]
    for meta in (
        {"managedFields": mf, "name": "a", "resourceVersion": "1"},
        {"name": "a", "resourceVersion": "1", "managedFields": mf},
    ):
        obj = {"metadata": meta, "spec": {}}
        (item,) = decode_block(*block(line("ADDED", obj)), True)
        assert orjson.loads(entry_of(item).raw) == {
            "metadata": {"name": "a", "resourceVersion": "1"},
            "spec": {},
        }


def test_a_last_line_without_newline() -> None:
    a = pod("a")
    (item,) = decode_block(*block(line("ADDED", a), end=b""), True)
    assert orjson.loads(entry_of(item).raw) == without_mf(a)


def test_split_block_gives_the_non_blank_lines() -> None:
    assert split_block(block(b"a", b"", b" ", b"b")) == [b"a", b"b"]


# resourceVersions are opaque strings; etcd's canonical decimals have a compact int form
RVS = {
    "1": 1,
    "123456789": 123456789,
    "999999999999999999": 999999999999999999,  # 18 digits: the longest kept as an int
    "1000000000000000000": "1000000000000000000",  # 19 digits: kept as it is
    "007": "007",  # a leading zero: str(int()) would lose it
    "0": "0",
    "": "",
    "abc": "abc",
    "12a": "12a",
    "+1": "+1",
    " 1": " 1",
    "1_000": "1_000",
    "\u0661\u0662": "\u0661\u0662",  # Arabic-Indic digits: int() takes them, str() would not give them back
    "\u00b2": "\u00b2",  # superscript two: isdigit() but not a decimal
}


@pytest.mark.parametrize(("rv", "compact"), RVS.items())
def test_resource_versions_are_kept_compactly_and_read_back_exactly(
    rv: str, compact: int | str
) -> None:
    assert compact_rv(rv) == compact
    assert type(compact_rv(rv)) is type(compact)
    assert rv_str(compact_rv(rv)) == rv
    pinned = pinned_entry("default", "p", rv, b"{}")
    assert pinned.rv == compact and type(pinned.rv) is type(compact)
    assert pinned.resource_version == rv
    assert pinned.compact_rv() == compact
    assert bool(pinned.rv) == bool(rv)  # "is there a resourceVersion" reads the same
    if rv and rv.strip() == rv:
        obj = pod("p", rv)
        (item,) = decode_block(*block(line("ADDED", obj)), drop_managed_fields=True)
        assert entry_of(item).rv == rv
        assert entry_of(item).compact_rv() == compact
        assert Entry("default", "p", None, entry_of(item).raw).compact_rv() == compact
        assert entry_of(item).resource_version == rv
        assert decode_entry(orjson.dumps(obj)).resource_version == rv
        assert orjson.loads(entry_of(item).raw)["metadata"]["resourceVersion"] == rv


def test_compact_forms_are_equal_exactly_when_the_strings_are() -> None:
    for a in RVS:
        for b in RVS:
            assert (compact_rv(a) == compact_rv(b)) == (a == b), (a, b)


def test_pinned_entries_of_a_namespace_share_its_string() -> None:
    names = [b"default".decode() for _ in range(3)]  # three strings, equal, not the same
    assert names[0] is not names[1]
    entries = [pinned_entry(ns, n, "1", b"{}") for ns, n in zip(names, "abc", strict=True)]
    assert entries[0].namespace == "default"
    assert all(e.namespace is entries[0].namespace for e in entries)


def test_the_resource_version_is_read_back_from_the_bytes() -> None:
    obj = pod("p", "4242")
    (item,) = decode_block(*block(line("ADDED", obj)), drop_managed_fields=True)
    raw = entry_of(item).raw
    assert raw_resource_version(raw) == "4242"
    bare = Entry("default", "p", None, raw)  # what a store hands back for its bytes
    assert (bare.resource_version, bare.compact_rv()) == ("4242", 4242)
    assert raw_resource_version(b'{"metadata":{"name":"x"}}') == ""
    assert raw_resource_version(b'{"metadata":{"resourceVersion":"1"},"n":1e400}') == "1"


def test_bytes_from_elsewhere_are_checked_and_pinned_when_they_disagree() -> None:
    raw = orjson.dumps(without_mf(pod("p", "9")))
    assert type(foreign_entry("default", "p", "9", raw)) is Entry
    pinned = foreign_entry("default", "p", "10", raw)
    assert type(pinned) is PinnedEntry
    assert (pinned.rv, pinned.resource_version) == (10, "10")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b'{"metadata":{"name":"p"},"x":"\xff"}', "not valid UTF-8"),
        (b'{"metadata":{"name":"p"},"x":' + b"[" * 2000 + b"]" * 2000 + b"}", "nested too deep"),
        (b"[1,2,3]", "not a JSON object"),
        (b'{"metadata":{"name":"p"}', "not a JSON object"),
        (b'{"metadata":5}', "not a JSON object"),
    ],
    ids=["utf-8", "deep", "array", "truncated", "metadata"],
)
def test_bytes_from_elsewhere_that_no_reader_can_decode_are_refused(raw: bytes, why: str) -> None:
    """The one check every byte string entering a store passes (issue 18): a follower's
    value, a Table row put together from its parts."""
    with pytest.raises(UndecodableObject, match=why):
        check_readable(raw)
    with pytest.raises(UndecodableObject, match=why):
        foreign_entry("default", "p", "1", raw)


def test_utf8_is_checked_in_the_slice_only_and_cheaply() -> None:
    big = b"\xff" + b"a" * 100_000 + b"\n" + b"b" * 10
    assert not bad_utf8(big, 1, len(big))  # most of the buffer, ASCII
    assert not bad_utf8(big, len(big) - 10, len(big))  # a small slice: only it is looked at
    assert bad_utf8(big, 0, 10)
    assert not bad_utf8("é".encode() * 10, 0, 20)


def test_what_passes_the_check_every_reader_reads() -> None:
    for raw in (
        b'{"metadata":{"resourceVersion":"3"},"n":' + b"9" * 400 + b"}",
        b'{"metadata":{"resourceVersion":"3"},"n":1e400,"m":1e308}',
        b'{"metadata":{"resourceVersion":"3"},"n":' + b"[" * 900 + b"1" + b"]" * 900 + b"}",
    ):
        assert check_readable(raw) == "3"
        obj = decode_raw(raw)
        assert obj["metadata"] == {"resourceVersion": "3"}
        if b"[[[" not in raw:
            orjson.dumps(obj)  # and it encodes again (orjson encodes 255 levels at most)


def test_a_transform_that_changes_the_resource_version_pins_the_entry() -> None:
    def strip(obj: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": obj["metadata"]["name"]}}

    def keep(obj: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": obj["metadata"], "kept": True}

    raw = orjson.dumps(pod("p", "9"))
    stripped = decode_entry(raw, transform=strip)
    assert type(stripped) is PinnedEntry and stripped.resource_version == "9"
    assert raw_resource_version(stripped.raw) == ""
    kept = decode_entry(raw, transform=keep)
    assert type(kept) is Entry and raw_resource_version(kept.raw) == "9"
