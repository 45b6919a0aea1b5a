"""resourceVersions as numbers: one parser, bounded in length (hostile versions)."""

from __future__ import annotations

import pytest

from kubemux._wire.versions import RV_MAX_DIGITS, rv_int
from kubemux.proxy._api.statuses import ProxyStatusError
from kubemux.proxy._query.options import parse_resource_version


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("123", 123),
        ("007", 7),
        (42, 42),
        ("9" * RV_MAX_DIGITS, int("9" * RV_MAX_DIGITS)),
        ("9" * (RV_MAX_DIGITS + 1), None),  # not etcd's: never int()'d
        ("", None),
        (None, None),
        ("-1", None),
        ("1e3", None),
        ("١٢٣", None),  # digits, but not ASCII ones
    ],
)
def test_rv_int(text: str | int | None, value: int | None) -> None:
    assert rv_int(text) == value


def test_a_huge_resource_version_is_out_of_range_without_parsing_it() -> None:
    text = "9" * 1_000_000  # int() of it would be refused (or quadratic)
    with pytest.raises(ProxyStatusError) as info:
        parse_resource_version(text)
    assert info.value.code == 500 and "value out of range" in info.value.message
