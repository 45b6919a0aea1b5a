"""List and Table bodies joined from cached bytes, byte for byte as kube-apiserver lays
them out; pagination over a snapshot's items."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import orjson
import pytest

from kubemux import TableColumn
from kubemux._resources import parse_resource
from kubemux.proxy._api.lists import (
    TABLE_V1BETA1,
    check_include_object,
    column_definitions,
    iter_list,
    iter_table,
    join_list,
    join_table,
    list_envelope,
    paginate,
    partial_object_metadata,
    split_table_row,
    table_row,
)
from kubemux.proxy._api.statuses import ProxyStatusError
from kubemux.proxy._query.selectors import ObjectFilter, parse_field_selector, parse_label_selector
from kubemux.testing import FakeCluster

POD_A = b'{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"d","resourceVersion":"5"}}'
POD_B = b'{"kind":"Pod","apiVersion":"v1","metadata":{"name":"b","namespace":"d","resourceVersion":"6"}}'


def test_a_typed_list_is_laid_out_as_the_api_server_streams_it() -> None:
    assert join_list("PodList", "v1", "10", [POD_A, POD_B]) == (
        b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":['
        + POD_A
        + b","
        + POD_B
        + b"]}\n"
    )
    assert join_list("PodList", "v1", "10", []) == (
        b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":[]}\n'
    )
    assert join_list("DeploymentList", "apps/v1", "10", [POD_A], "tok", 3) == (
        b'{"kind":"DeploymentList","apiVersion":"apps/v1","metadata":{"resourceVersion":"10",'
        b'"continue":"tok","remainingItemCount":3},"items":[' + POD_A + b"]}\n"
    )
    # a remainingItemCount of 0 is written (a pointer in Go), an empty continue is not
    assert b'"remainingItemCount":0' in join_list("PodList", "v1", "1", [], "", 0)
    assert b'"continue"' not in join_list("PodList", "v1", "1", [], "", 0)


def test_an_unstructured_list_has_sorted_keys_and_always_a_continue() -> None:
    widget = b'{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}'
    assert join_list("WidgetList", "example.com/v1", "10", [widget], unstructured=True) == (
        b'{"apiVersion":"example.com/v1","items":['
        + widget
        + b'],"kind":"WidgetList","metadata":{"continue":"","resourceVersion":"10"}}\n'
    )
    body = join_list("WidgetList", "example.com/v1", "10", [widget], "t", 2, unstructured=True)
    assert body.endswith(
        b'"metadata":{"continue":"t","remainingItemCount":2,"resourceVersion":"10"}}\n'
    )


def test_list_envelope_streams_the_same_bytes() -> None:
    head, tail = list_envelope("PodList", "v1", "10", "tok", 1)
    assert head + POD_A + b"," + POD_B + tail == join_list(
        "PodList", "v1", "10", [POD_A, POD_B], "tok", 1
    )


def test_names_with_html_characters_are_escaped_as_go_does() -> None:
    body = join_list("A<B>&List", "x.io/v1", "1", [])
    assert body.startswith(b'{"kind":"A\\u003cB\\u003e\\u0026List"')


async def test_a_join_equals_fake_clusters_list(fake_cluster: FakeCluster) -> None:
    """FakeCluster's LIST aims at the API server's shape: joining its items again gives its
    body (plus the encoder's final newline)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{fake_cluster.server}/api/v1/pods?limit=4",
            headers={"Authorization": "Bearer t"},
        ) as response,
    ):
        body = await response.read()
    doc = orjson.loads(body)
    items = [orjson.dumps(item) for item in doc["items"]]
    meta = doc["metadata"]
    joined = join_list(
        doc["kind"],
        doc["apiVersion"],
        meta["resourceVersion"],
        items,
        meta.get("continue"),
        meta.get("remainingItemCount"),
    )
    assert joined == orjson.dumps(doc) + b"\n"
    assert meta["remainingItemCount"] == 6 and len(items) == 4


# ------------------------------------------------------------------------------- pagination
def _items(n: int) -> Iterator[tuple[tuple[str, str], bytes]]:
    for i in range(n):
        ns = "a" if i % 2 else "b"
        raw = orjson.dumps(
            {"metadata": {"name": f"p{i:02d}", "namespace": ns, "labels": {"odd": str(i % 2)}}}
        )
        yield (ns, f"p{i:02d}"), raw


def test_paginate_takes_a_page_and_says_whether_more_follow() -> None:
    items = sorted(_items(10))
    page = paginate(items, 4)
    assert len(page.items) == 4 and page.last_key == items[3][0]
    rest = paginate([i for i in items if i[0] > page.last_key], 6)
    assert len(rest.items) == 6 and rest.last_key is None  # an exact fit: no continue
    assert paginate(items, 0).items == [raw for _k, raw in items]
    assert paginate([], 5).items == [] and paginate([], 5).last_key is None


def test_paginate_through_a_filter() -> None:
    items = sorted(_items(10))
    odd = ObjectFilter(labels=parse_label_selector("odd=1"))
    page = paginate(items, 3, odd.matches_raw)
    assert [orjson.loads(raw)["metadata"]["labels"]["odd"] for raw in page.items] == ["1"] * 3
    assert page.last_key is not None
    nxt = paginate([i for i in items if i[0] > page.last_key], 3, odd.matches_raw)
    assert len(nxt.items) == 2 and nxt.last_key is None
    name = ObjectFilter(fields=parse_field_selector("metadata.name=p03", parse_resource("pods")))
    assert len(paginate(items, 0, name.matches_raw).items) == 1


# ---------------------------------------------------------------------------------- tables
COLUMNS = [
    TableColumn(name="Name", format="name", description="Name must be unique."),
    TableColumn(name="Ready", description="The number of ready containers."),
    TableColumn(name="IP", priority=1, description="IP address."),
]
META_A = b'{"name":"a","namespace":"d","resourceVersion":"5"}'


def test_column_definitions_have_every_field_in_go_order() -> None:
    assert column_definitions(COLUMNS[:1]) == (
        b'[{"name":"Name","type":"string","format":"name",'
        b'"description":"Name must be unique.","priority":0}]'
    )
    as_dicts = [{"name": "Age", "type": "date", "priority": 0}]
    assert column_definitions(as_dicts) == (
        b'[{"name":"Age","type":"date","format":"","description":"","priority":0}]'
    )


def test_a_table_with_partial_object_metadata() -> None:
    cells = b'["a","1/1","10.0.0.1"]'
    body = join_table(COLUMNS, [(cells, META_A)], "Metadata", "10", "tok", 4)
    assert body == (
        b'{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"10",'
        b'"continue":"tok","remainingItemCount":4},"columnDefinitions":'
        + column_definitions(COLUMNS)
        + b',"rows":[{"cells":'
        + cells
        + b',"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1",'
        b'"metadata":' + META_A + b"}}]}\n"
    )
    doc = orjson.loads(body)
    assert doc["rows"][0]["object"]["metadata"]["name"] == "a"


def test_a_table_without_objects_and_with_objects() -> None:
    cells = b'["a"]'
    none = join_table(COLUMNS, [(cells, META_A)], "None", "10")
    assert b'"rows":[{"cells":["a"],"object":null}]}\n' in none
    obj = join_table(COLUMNS, [(cells, POD_A)], "Object", "10")
    assert b'"rows":[{"cells":["a"],"object":' + POD_A + b"}]}\n" in obj
    empty = join_table(COLUMNS, [], "Metadata", "10")
    assert empty.endswith(b'"rows":[]}\n')
    headless = join_table(None, [(cells, META_A)], "Metadata", "10")
    assert b'"columnDefinitions":null,' in headless


def test_a_v1beta1_table() -> None:
    body = join_table(COLUMNS, [(b"[]", META_A)], "Metadata", "10", api_version=TABLE_V1BETA1)
    doc = orjson.loads(body)
    assert doc["apiVersion"] == "meta.k8s.io/v1beta1"
    assert doc["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"


def test_table_rows_and_partial_objects() -> None:
    assert partial_object_metadata(META_A) == (
        b'{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":' + META_A + b"}"
    )
    assert table_row(b"[1]", None, "Metadata") == b'{"cells":[1],"object":null}'
    row = b'{"cells":["x,\\"metadata\\":",2],"metadata":{"name":"x"}}'
    assert split_table_row(row) == (b'["x,\\"metadata\\":",2]', b'{"name":"x"}')
    with pytest.raises(ValueError, match="not a cached Table row"):
        split_table_row(b'{"rows":[]}')


@pytest.mark.parametrize(
    ("given", "taken"),
    [("", "Metadata"), ("Metadata", "Metadata"), ("None", "None"), ("Object", "Object")],
)
def test_include_object_values(given: str, taken: str) -> None:
    assert check_include_object(given) == taken


def test_an_unknown_include_object_is_the_api_servers_400() -> None:
    with pytest.raises(ProxyStatusError) as info:
        check_include_object("Everything")
    assert info.value.code == 400
    assert info.value.message == (
        "Unable to convert to Table as requested: includeObject: Invalid value: "
        "\"Everything\": must be 'Metadata', 'Object', 'None', or empty"
    )


@pytest.mark.parametrize("chunk_bytes", [1, 50, 150, 10_000])
@pytest.mark.parametrize("count", [0, 1, 2, 7])
def test_streamed_bodies_are_the_joined_bytes(chunk_bytes: int, count: int) -> None:
    items = [POD_A if i % 2 else POD_B for i in range(count)]
    for unstructured in (False, True):
        chunks = list(
            iter_list(
                "PodList",
                "v1",
                "9",
                items,
                "t",
                1,
                unstructured=unstructured,
                chunk_bytes=chunk_bytes,
            )
        )
        assert b"".join(chunks) == join_list(
            "PodList", "v1", "9", items, "t", 1, unstructured=unstructured
        )
        if count and chunk_bytes == 1:
            assert len(chunks) == count + 1  # one per item, then the tail
    rows = [(b'["x"]', META_A)] * count
    for include in ("Metadata", "None", "Object"):
        streamed = b"".join(iter_table(COLUMNS, rows, include, "9", chunk_bytes=chunk_bytes))
        assert streamed == join_table(COLUMNS, rows, include, "9")
        orjson.loads(streamed)
