"""Following the kubeconfig: kubemux._kubeconfig.source.

Every wait is bounded by ``anyio.fail_after`` and synchronises on the diffs stream; watchfiles
takes ~50-300 ms to deliver an event, plus the debounce delay.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from kubemux._errors import KubeconfigError
from kubemux._kubeconfig.diff import DiffStream as _DiffStream
from kubemux._kubeconfig.load import ContextConfig, load_kubeconfig
from kubemux._kubeconfig.source import ContextDiff, KubeconfigSource, diff_snapshots
from support import TIMEOUT

DEBOUNCE = 0.05


def simple(*names: str, server: str = "https://k8s.example", **user: Any) -> dict[str, Any]:
    """One cluster and one user per context."""
    return {
        "clusters": [{"name": f"c-{n}", "cluster": {"server": f"{server}/{n}"}} for n in names],
        "users": [{"name": f"u-{n}", "user": user or {"token": "t"}} for n in names],
        "contexts": [
            {"name": n, "context": {"cluster": f"c-{n}", "user": f"u-{n}"}} for n in names
        ],
    }


def write(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def atomic_write(path: Path, doc: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(doc))
    os.replace(tmp, path)


async def next_diff(source: KubeconfigSource) -> ContextDiff:
    with anyio.fail_after(TIMEOUT):
        return await source.diffs.receive()


async def wait_for(source: KubeconfigSource, done: Callable[[ContextDiff], bool]) -> list[Any]:
    """Collect diffs until one satisfies ``done``; return them all."""
    seen: list[ContextDiff] = []
    with anyio.fail_after(TIMEOUT):
        while not seen or not done(seen[-1]):
            seen.append(await source.diffs.receive())
    return seen


def pending(source: KubeconfigSource) -> _DiffStream:
    """The diffs stream, with ``receive_nowait`` (typed as a plain ObjectReceiveStream)."""
    assert isinstance(source.diffs, _DiffStream)
    return source.diffs


def names(configs: tuple[ContextConfig, ...]) -> list[str]:
    return [c.name for c in configs]


# --------------------------------------------------------------------------- diffs (sync)


def test_diff_snapshots(tmp_path: Path) -> None:
    old = load_kubeconfig(write(tmp_path / "a", simple("keep", "change", "drop"))).contexts
    doc = simple("keep", "change", "new")
    doc["clusters"][1]["cluster"]["server"] = "https://moved"
    new = load_kubeconfig(write(tmp_path / "b", doc))
    diff = diff_snapshots(old, new)
    assert names(diff.added) == ["new"]
    assert diff.removed == ("drop",)
    assert names(diff.changed) == ["change"]
    assert diff.snapshot is new
    assert not diff.is_empty
    assert diff_snapshots(new.contexts, new).is_empty
    assert repr(diff) == "<ContextDiff added=['new'] removed=['drop'] changed=['change']>"


# --------------------------------------------------------------------------- following


async def test_edit_gives_changed(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a", "b"))
    async with KubeconfigSource(path, debounce_delay=DEBOUNCE) as source:
        before = source.contexts["a"]
        doc = simple("a", "b")
        doc["clusters"][0]["cluster"]["server"] = "https://new"
        write(path, doc)
        diff = (await wait_for(source, lambda d: not d.is_empty))[-1]
        assert names(diff.changed) == ["a"]
        assert (diff.added, diff.removed) == ((), ())
        assert source.contexts["a"].server == "https://new"
        assert source.contexts["a"].fingerprint != before.fingerprint
        assert source.snapshot is diff.snapshot


async def test_atomic_rename_save(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a"))
    async with KubeconfigSource(path, debounce_delay=DEBOUNCE) as source:
        atomic_write(path, simple("a", "b", server="https://other"))
        diff = (await wait_for(source, lambda d: not d.is_empty))[-1]
        assert names(diff.added) == ["b"]
        assert names(diff.changed) == ["a"]
        # and again: the watch survives the file being replaced
        atomic_write(path, simple("b", server="https://other"))
        diff = (await wait_for(source, lambda d: not d.is_empty))[-1]
        assert diff.removed == ("a",)
        assert list(source.contexts) == ["b"]


async def test_delete_and_recreate(tmp_path: Path) -> None:
    a = write(tmp_path / "a" / "config", simple("a1"))
    b = write(tmp_path / "b" / "config", simple("b1", "b2"))
    async with KubeconfigSource([a, b], debounce_delay=DEBOUNCE) as source:
        assert list(source.contexts) == ["a1", "b1", "b2"]
        b.unlink()
        diff = (await wait_for(source, lambda d: not d.is_empty))[-1]
        assert diff.removed == ("b1", "b2")
        assert source.snapshot.missing == (str(b),)
        assert source.errors == {}
        write(b, simple("b1", "b2"))
        diff = (await wait_for(source, lambda d: not d.is_empty))[-1]
        assert names(diff.added) == ["b1", "b2"]
        assert list(source.contexts) == ["a1", "b1", "b2"]


async def test_only_file_deleted_and_recreated(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a"))
    async with KubeconfigSource(path, debounce_delay=DEBOUNCE) as source:
        path.unlink()
        diff = (await wait_for(source, lambda d: not d.is_empty))[-1]
        assert diff.removed == ("a",)
        write(path, simple("a"))
        diff = (await wait_for(source, lambda d: not d.is_empty))[-1]
        assert names(diff.added) == ["a"]


async def test_half_written_file_removes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a", "b"))
    good = path.read_text()
    async with KubeconfigSource(path, debounce_delay=DEBOUNCE) as source:
        before = dict(source.contexts)
        path.write_text(good[: len(good) // 2] + "\n  - {[")
        diff = await next_diff(source)
        assert diff.is_empty
        assert dict(source.contexts) == before
        assert "invalid YAML at line" in source.errors[str(path)]

        path.write_text(good)
        diff = (await wait_for(source, lambda d: not d.snapshot.errors))[-1]
        assert diff.is_empty
        assert dict(source.contexts) == before
        assert source.errors == {}


async def test_referenced_token_file_change(tmp_path: Path) -> None:
    # A token file rotates in place (projected service-account tokens, kubelet's atomic
    # swaps): its contents are the credential layer's business and never restart a context.
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "token").write_text("one")
    doc = simple("a", "b")
    doc["users"][0]["user"] = {"tokenFile": "../secrets/token"}
    path = write(tmp_path / "kube" / "config", doc)
    async with KubeconfigSource(path, debounce_delay=DEBOUNCE) as source:
        assert source.snapshot.referenced_files == {str(secrets / "token")}
        before = source.contexts["a"].fingerprint
        (secrets / "token").write_text("two")
        assert (await source.sync_now()).is_empty
        tmp = secrets / ".token.new"
        tmp.write_text("three")
        os.replace(tmp, secrets / "token")
        assert (await source.sync_now()).is_empty
        assert source.contexts["a"].fingerprint == before
        # a new path does restart it
        doc["users"][0]["user"] = {"tokenFile": "../secrets/token2"}
        write(path, doc)
        diff = (await wait_for(source, lambda d: not d.is_empty))[-1]
        assert names(diff.changed) == ["a"]


async def test_burst_of_writes_is_coalesced(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a"))
    async with KubeconfigSource(path, debounce_delay=0.3) as source:
        for i in range(20):
            write(path, simple("a", server=f"https://burst-{i}"))
            await anyio.sleep(0.01)  # the workload: 20 writes over ~200 ms
        seen = await wait_for(
            source, lambda d: d.snapshot.contexts["a"].server == "https://burst-19/a"
        )
        assert len(seen) <= 3, seen
        assert names(seen[-1].changed) == ["a"] or len(seen) > 1


async def test_missing_file_is_picked_up_when_created(tmp_path: Path) -> None:
    a = write(tmp_path / "a", simple("a"))
    later = tmp_path / "later"
    deep = tmp_path / "not" / "yet" / "config"
    async with KubeconfigSource([a, later, deep], debounce_delay=DEBOUNCE) as source:
        assert source.snapshot.missing == (str(later), str(deep))
        write(later, simple("b"))
        diff = (await wait_for(source, lambda d: not d.is_empty))[-1]
        assert names(diff.added) == ["b"]
        # its folder does not exist either: the watch moves down as folders appear
        write(deep, simple("c"))
        await wait_for(source, lambda d: "c" in d.snapshot.contexts)
        write(deep, simple("c", server="https://moved"))
        diff = (await wait_for(source, lambda d: not d.is_empty))[-1]
        assert names(diff.changed) == ["c"]


async def test_symlink_swap_like_a_mounted_secret(tmp_path: Path) -> None:
    mount = tmp_path / "mount"
    write(mount / "..v1" / "config", simple("a"))
    (mount / "..data").symlink_to("..v1")
    (mount / "config").symlink_to("..data/config")
    async with KubeconfigSource(mount / "config", debounce_delay=DEBOUNCE) as source:
        assert list(source.contexts) == ["a"]
        write(mount / "..v2" / "config", simple("a", server="https://v2"))
        (mount / "..data_tmp").symlink_to("..v2")
        os.replace(mount / "..data_tmp", mount / "..data")
        diff = (await wait_for(source, lambda d: not d.is_empty))[-1]
        assert names(diff.changed) == ["a"]
        assert source.contexts["a"].server == "https://v2/a"


# --------------------------------------------------------------------------- without following


async def test_follow_false_never_emits_and_sync_now_does(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a"))
    async with KubeconfigSource(path, follow=False, debounce_delay=0) as source:
        write(path, simple("a", "b"))
        # proving an absence takes a wait: longer than a watcher would need to emit
        await anyio.sleep(0.5)
        with pytest.raises(anyio.WouldBlock):
            pending(source).receive_nowait()
        assert list(source.contexts) == ["a"]
        diff = await source.sync_now()
        assert names(diff.added) == ["b"]
        assert await next_diff(source) is diff
        empty = await source.sync_now()
        assert empty.is_empty
        assert await next_diff(source) is empty


async def test_slow_consumer_gets_coalesced_diffs(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a"))
    source = KubeconfigSource(path, follow=False, max_pending_diffs=2)
    async with source:
        await source.sync_now()  # empty
        write(path, simple("a", "b"))
        await source.sync_now()  # + b
        write(path, simple("b", "c"))
        third = await source.sync_now()  # - a, + c: merged into the second
        write(path, simple("b", "c", server="https://x"))
        await source.sync_now()  # ~ b, ~ c: merged again
        assert names(third.added) == ["c"]
        first = pending(source).receive_nowait()
        assert first.is_empty
        merged = pending(source).receive_nowait()
        assert names(merged.added) == ["b", "c"]
        assert merged.removed == ("a",)
        assert merged.changed == ()  # b and c are new to the consumer, not changed
        assert merged.added[0].server == "https://x/b"
        with pytest.raises(anyio.WouldBlock):
            pending(source).receive_nowait()


async def test_sync_now_is_serialised(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a"))
    async with KubeconfigSource(path, follow=False) as source:
        write(path, simple("a", "b"))
        results: list[ContextDiff] = []

        async def sync() -> None:
            results.append(await source.sync_now())

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(sync)
        assert sum(len(d.added) for d in results) == 1  # exactly one sync saw b arrive


# --------------------------------------------------------------------------- lifecycle


async def test_diffs_end_when_the_source_closes(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a"))
    source = KubeconfigSource(path, debounce_delay=DEBOUNCE)
    async with source:
        await source.sync_now()
    received = [d async for d in source.diffs]
    assert len(received) == 1
    with pytest.raises(RuntimeError, match="closed"):
        await source.sync_now()


async def test_enter_twice_raises(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a"))
    source = KubeconfigSource(path)
    with pytest.raises(RuntimeError, match="not been entered"):
        source.snapshot  # noqa: B018
    with pytest.raises(RuntimeError, match="not open"):
        await source.sync_now()
    async with source:
        with pytest.raises(RuntimeError):
            await source.__aenter__()
    with pytest.raises(RuntimeError, match="entered once"):
        async with source:
            pass
    assert list(source.contexts) == ["a"]  # the last snapshot stays readable


async def test_nothing_loadable_raises(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="no kubeconfig file could be loaded") as info:
        async with KubeconfigSource([tmp_path / "x", tmp_path / "y"]):
            pass
    assert str(tmp_path / "x") in str(info.value)
    assert str(tmp_path / "y") in str(info.value)
    broken = tmp_path / "broken"
    broken.write_text("contexts: [\n")
    with pytest.raises(KubeconfigError, match="invalid YAML at line 2"):
        async with KubeconfigSource(broken):
            pass
    with pytest.raises(KubeconfigError, match=str(tmp_path / "home" / ".kube" / "config")):
        async with KubeconfigSource():
            pass


async def test_one_broken_file_of_two_is_fine(tmp_path: Path) -> None:
    ok = write(tmp_path / "ok", simple("a"))
    broken = tmp_path / "broken"
    broken.write_text("contexts: [\n")
    async with KubeconfigSource([broken, ok]) as source:
        assert list(source.contexts) == ["a"]
        assert list(source.errors) == [str(broken)]


async def test_exit_is_prompt_and_leaves_no_task(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a"))
    with anyio.fail_after(2):
        async with KubeconfigSource(path) as source:
            write(path, simple("a", "b"))  # a sync may be pending or running when we leave
        assert "closed" in repr(source)


async def test_body_exception_is_not_wrapped(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a"))
    with pytest.raises(ValueError, match="boom"):
        async with KubeconfigSource(path, debounce_delay=DEBOUNCE):
            raise ValueError("boom")


async def test_cancelled_body_closes_cleanly(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a"))
    with anyio.move_on_after(0.2) as scope:
        async with KubeconfigSource(path, debounce_delay=DEBOUNCE) as source:
            await source.diffs.receive()  # nothing comes: cancelled here
    assert scope.cancelled_caught


async def test_static_source() -> None:
    context = ContextConfig.from_dict("a", simple("a"))
    source = KubeconfigSource.static({"a": context}, current_context="a")
    assert source.contexts == {"a": context}
    async with source:
        assert source.current_context == "a"
        assert source.errors == {}
        diff = await source.sync_now()
        assert diff.is_empty
        assert await next_diff(source) is diff
    assert [d async for d in source.diffs] == []


async def test_repr_has_no_secrets(tmp_path: Path) -> None:
    path = write(tmp_path / "config", simple("a", token="very-secret-token"))
    async with KubeconfigSource(path, follow=False) as source:
        write(path, simple("a", "b", token="very-secret-token"))
        diff = await source.sync_now()
        text = repr(source) + repr(diff) + repr(diff.snapshot) + repr(source.contexts)
        assert "very-secret-token" not in text
        assert "contexts=2" in repr(source)


async def test_logs_have_no_secrets(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="kubemux")
    secret = "very-secret-token"
    path = write(tmp_path / "config", simple("a", token=secret))
    async with KubeconfigSource(path, follow=False) as source:
        path.write_text(f"users:\n- name: u\n  user: {{token: {secret}\n")  # broken
        await source.sync_now()
        write(path, simple("a", "b", token=secret))
        await source.sync_now()
    assert "failed to load" in caplog.text
    assert "1 added" in caplog.text
    assert secret not in caplog.text


async def test_in_place_rewrites_never_remove_a_context_present_in_every_version(
    tmp_path: Path,
) -> None:
    # A writer truncates the file and writes it back in two halves, 100 times a second; the
    # first half alone is valid YAML that lacks most contexts. Only a read of a settled
    # file is the truth: no diff may remove a context that every version has.
    always = [f"ctx-{i}" for i in range(12)]
    versions = [yaml.safe_dump(simple(*always, f"extra-{v}")).encode() for v in range(3)]
    path = tmp_path / "config"
    path.write_bytes(versions[0])
    stop = threading.Event()
    writes = 0

    def writer() -> None:
        nonlocal writes
        while not stop.is_set():
            text = versions[writes % len(versions)]
            cut = text.index(b"\n", len(text) // 2) + 1  # a line boundary: a valid prefix
            with path.open("wb") as f:  # in place: truncate, then write
                f.write(text[:cut])
                f.flush()
                time.sleep(0.002)
                f.write(text[cut:])
            writes += 1
            time.sleep(0.008)

    diffs: list[ContextDiff] = []
    async with KubeconfigSource(path, debounce_delay=0.005) as source:
        assert set(always) <= set(source.contexts)
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, writer)
            try:
                with anyio.fail_after(20):
                    while len(diffs) < 15:
                        diffs.append(await source.diffs.receive())
            finally:
                stop.set()
        assert writes > 20
        removed = {name for diff in diffs for name in diff.removed}
        assert not removed & set(always), removed
        # once the writer stops, the file settles and is read in full
        path.write_bytes(versions[1])
        final = await wait_for(source, lambda d: "extra-1" in d.snapshot.contexts)
        assert set(always) | {"extra-1"} == set(final[-1].snapshot.contexts)


async def test_following_survives_bad_paths_and_types(tmp_path: Path) -> None:
    # A NUL in a referenced path, a NUL in a kubeconfig path and a wrong-typed field: each is
    # an error where it belongs, entering works, and later syncs keep following the files.
    good = write(tmp_path / "good", simple("a"))
    doc = simple("b")
    doc["clusters"][0]["cluster"]["certificate-authority"] = "ca\0.crt"
    other = write(tmp_path / "other", doc)
    bad_path = str(tmp_path / "x\0y")
    async with KubeconfigSource([bad_path, good, other], debounce_delay=DEBOUNCE) as source:
        assert list(source.contexts) == ["a"]
        assert "NUL" in source.snapshot.invalid["b"]
        assert "not a valid file name" in source.errors[bad_path]
        bad_types = simple("a")
        bad_types["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = "false"
        write(good, bad_types)
        diff = await wait_for(source, lambda d: str(good) in d.snapshot.errors)
        assert "insecure-skip-tls-verify" in diff[-1].snapshot.errors[str(good)]
        assert list(source.contexts) == ["a"]  # last good kept
        write(other, simple("b"))
        diff = await wait_for(source, lambda d: "b" in d.snapshot.contexts)
        assert names(diff[-1].added) == ["b"]
        write(good, simple("a", "c"))
        await wait_for(source, lambda d: "c" in d.snapshot.contexts)
        assert str(good) not in source.errors
