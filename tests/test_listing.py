"""A LIST page decoded in slices: the same items as one decode, and the loop keeps running."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import msgspec
import orjson
import pytest

from kubemux import WatcherRegistry, WatchSettings
from kubemux._informer.listing import page_slices
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from support import TIMEOUT


def _page(items: list[object], **meta: str) -> bytes:
    return orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items})


def _decoded(body: bytes, slice_bytes: int) -> tuple[str, str, list[bytes], int]:
    meta, slices = page_slices(body, slice_bytes)
    parts = list(slices)
    items = [bytes(raw) for part in parts for raw in part]
    return meta.resource_version, meta.continue_, items, len(parts)


def test_a_large_page_is_cut_into_slices_holding_every_item() -> None:
    pods = [make_pod(f"p{i}", size=1000) for i in range(300)]
    body = _page(pods, resourceVersion="7", **{"continue": "tok"})
    rv, token, items, parts = _decoded(body, 20_000)
    assert (rv, token) == ("7", "tok")
    assert parts > 10
    assert [orjson.loads(i) for i in items] == pods


def test_a_small_page_is_one_slice() -> None:
    body = _page([make_pod("a"), make_pod("b")], resourceVersion="3")
    assert _decoded(body, 1 << 20)[1:] == ("", [orjson.dumps(make_pod(n)) for n in "ab"], 1)


def test_item_gaps_inside_strings_are_not_cuts() -> None:
    pods = [make_pod(f"p{i}", size=300) for i in range(100)]
    for pod in pods[::3]:
        pod["metadata"]["annotations"] = {"x": '},{"a":1},{' * 50}
    body = _page(pods, resourceVersion="1")
    assert [orjson.loads(i) for i in _decoded(body, 500)[2]] == pods


def test_an_items_key_elsewhere_is_not_taken_for_the_page() -> None:
    """A nested ``"items":[`` before the real one: the sentinel check refuses the cut, and the
    page is decoded the plain way."""
    body = (
        b'{"metadata":{"resourceVersion":"5","x":{"items":[{"a":1},{"b":2}]}},"items":['
        + b",".join(orjson.dumps(make_pod(f"p{i}")) for i in range(20))
        + b"]}"
    )
    rv, _, items, parts = _decoded(body, 1000)
    assert (rv, parts, len(items)) == ("5", 1, 20)
    assert orjson.loads(items[0])["metadata"]["name"] == "p0"


@pytest.mark.parametrize(
    "body",
    [
        _page([make_pod(f"p{i}") for i in range(20)])[:-3] + b"}",  # items never closed
        _page([make_pod(f"p{i}") for i in range(20)]).replace(b'"p15"', b'"p15'),  # mid-page
    ],
)
def test_an_invalid_page_raises_as_a_single_decode_does(body: bytes) -> None:
    with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)):
        _decoded(body, 1000)


def _deep(name: str, levels: int) -> bytes:
    meta = orjson.dumps({"name": name, "namespace": "default", "resourceVersion": "9"})
    return b'{"metadata":' + meta + b',"spec":' + b"[" * levels + b"]" * levels + b"}"


@pytest.mark.parametrize("slice_bytes", [1 << 22, 5_000], ids=["one-slice", "sliced"])
def test_an_item_nested_deeper_than_msgspec_goes_does_not_fail_the_page(slice_bytes: int) -> None:
    """One item 6,000 deep (deeper than msgspec decodes even with a raised limit): cut
    without recursion, handed over with its siblings (the caller refuses it alone)."""
    pods = [orjson.dumps(make_pod(f"p{i}")) for i in range(12)]
    odd = b'{"metadata":{"name":"odd"},"x":"}]}],[{\\"[{"}'  # brackets and quotes in a string
    items = [*pods[:5], _deep("deep", 6000), odd, *pods[5:], _deep("deeper", 7000)]
    body = (
        b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"4"},"items":['
        + b",".join(items)
        + b"]}"
    )
    rv, _, got, _ = _decoded(body, slice_bytes)
    assert rv == "4" and got == items


def test_a_page_of_items_too_deep_to_scan_is_refused_whole() -> None:
    """Beyond what the scanner takes (100,000 levels, or too many deep items): an error,
    as an invalid page (the LIST fails with a ProtocolError), in bounded time."""
    deepest = _page([make_pod("a")]).replace(
        b'"items":[', b'"items":[' + _deep("d", 200_000) + b","
    )
    started = time.perf_counter()
    with pytest.raises(msgspec.DecodeError, match="deeper than 100,000 levels"):
        _decoded(deepest, 1 << 22)
    costly = b'{"metadata":{"name":"d"},"spec":' + b'["",' * 6000 + b"1" + b"]" * 6000 + b"}"
    many = _page([]).replace(b'"items":[', b'"items":[' + b",".join([costly] * 60))
    with pytest.raises(msgspec.DecodeError, match="too many items nested too deep"):
        _decoded(many, 1 << 22)
    assert time.perf_counter() - started < 10


async def test_other_tasks_run_while_a_large_page_is_applied(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    """One unpaginated page of ~24 MiB: a ticker keeps being scheduled during the LIST."""
    fake_cluster.create_many("pods", (make_pod(f"p{i}", size=2000) for i in range(12_000)))
    settings = WatchSettings(page_size=0, streaming_list=False)
    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster})
    ticks = 0
    longest = 0.0
    async with WatcherRegistry.from_kubeconfig(str(path), settings=settings) as reg:
        done = anyio.Event()

        async def ticker() -> None:
            nonlocal ticks, longest
            last = time.perf_counter()
            while not done.is_set():
                await anyio.lowlevel.checkpoint()
                now = time.perf_counter()
                longest = max(longest, now - last)
                last = now
                ticks += 1

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            with anyio.fail_after(2 * TIMEOUT):
                store = await reg.watch("c", "pods")
            done.set()
        assert len(store) == 12_010
    assert ticks >= 20, (ticks, longest)
