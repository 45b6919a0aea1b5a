"""One owner per context generation: races, orphans and foreign errors (issue 9's findings).

Each test here failed before the generation became an active object whose start, stop and
reload all go through one lock per context.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from kubemux import (
    ContextRemoved,
    KubemuxError,
    StartTimeout,
    WatcherRegistry,
)
from kubemux.testing import (
    FakeCluster,
    FakeContext,
    kubeconfig_dict,
    make_pod,
    rewrite_kubeconfig,
    write_kubeconfig,
)
from support import TIMEOUT, wait_until

PLUGIN = str(Path(__file__).parent / "plugins" / "gate_exec.py")


def kubemux_tasks() -> list[asyncio.Task[Any]]:
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done() and t.get_name().startswith(("kubemux informer", "kubemux context"))
    ]


async def assert_nothing_left(registry: WatcherRegistry, *clusters: FakeCluster) -> None:
    # a generation signals "done" from its task's last lines: let those tasks return
    for _ in range(100):
        if not kubemux_tasks():
            break
        await anyio.lowlevel.checkpoint()
    assert kubemux_tasks() == []
    for cluster in clusters:  # the server notices closed connections a moment later
        await cluster.wait_for(lambda c=cluster: c.open_watches == 0, TIMEOUT)
    sizes = registry._structure_sizes()
    assert (sizes["entries"], sizes["slots"], sizes["locks"]) == (0, 0, 0), sizes


def exec_kubeconfig(
    path: Path, cluster: FakeCluster, names: list[str], env: dict[str, str]
) -> Path:
    """Contexts whose user runs tests/plugins/gate_exec.py with ``env``."""
    doc = kubeconfig_dict({n: FakeContext(cluster=cluster, token="unused") for n in names})
    for user in doc["users"]:
        user["user"] = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": [PLUGIN],
                "env": [{"name": k, "value": v} for k, v in env.items()],
                "interactiveMode": "Never",
            }
        }
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_reload_with_a_watch_in_between_leaves_no_orphan(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    """A sync reloading x and y while watch(x) runs in between: stop_watcher(x) must stop
    every generation of x (the old registry overwrote the entry watch() had created)."""
    a, b = two_clusters
    a.tokens.update({"x1", "x2"})
    b.tokens.update({"y1", "y2"})
    path = tmp_path / "config"
    first = {"x": FakeContext(cluster=a, token="x1"), "y": FakeContext(cluster=b, token="y1")}
    write_kubeconfig(path, first)
    async with WatcherRegistry.from_kubeconfig(str(path), debounce_delay=0.01) as registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("x", "pods")
            await registry.watch("y", "pods")
        second = {"x": FakeContext(cluster=a, token="x2"), "y": FakeContext(cluster=b, token="y2")}
        done = anyio.Event()

        async def keep_watching() -> None:
            while not done.is_set():
                try:
                    await registry.watch("x", "pods")
                except ContextRemoved:
                    pass
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_watching)
            await rewrite_kubeconfig(registry, path, second)
            done.set()
        with anyio.fail_after(TIMEOUT):
            await registry.watch("x", "pods")
        assert await registry.stop_watcher("x") is True
        assert a.open_watches_for("x1") == a.open_watches_for("x2") == 0
        assert [t for t in kubemux_tasks() if "'x'" in t.get_name()] == []
        assert registry.live_contexts == ["y"]


async def test_storm_of_callers_leaves_nothing_behind(
    tmp_path: Path, two_clusters: tuple[FakeCluster, FakeCluster]
) -> None:
    """Callers doing watch/stop/subscribe/store/events_for with random cancellation while
    the kubeconfig is rewritten: only KubemuxErrors, and after stopping every context no
    task, watch, entry or lock is left (before: 93 orphaned informers).

    The storm is a number of calls, not a time: on a loaded machine the first client's
    import of kubernetes-asyncio's models alone took a 3 s storm down to 42 calls."""
    a, b = two_clusters
    names = [f"c{i}" for i in range(6)]
    rng = random.Random(9)

    def config(version: int) -> dict[str, FakeContext]:
        out = {}
        for i, name in enumerate(names):
            if (i + version) % 5 == 0:
                continue  # one context in five comes and goes
            cluster = a if i % 2 else b
            out[name] = FakeContext(cluster=cluster, namespace=f"ns{version % 3}")
        return out

    path = write_kubeconfig(tmp_path / "config", config(0))
    foreign: list[BaseException] = []
    calls = 0
    async with WatcherRegistry.from_kubeconfig(str(path), debounce_delay=0.005) as registry:

        async def caller(seed: int) -> None:
            nonlocal calls
            r = random.Random(seed)
            while calls < 1500:
                name = r.choice(names)
                op = r.randrange(5)
                calls += 1
                with anyio.move_on_after(r.uniform(0, 0.2)):
                    try:
                        if op == 0:
                            await registry.stop_watcher(name)
                        elif op == 1:
                            async with registry.subscribe("pods", [name]) as changes:
                                with anyio.move_on_after(0.05):
                                    async for _ in changes:
                                        pass
                        elif op == 2:
                            registry.store(name, "pods")
                            await registry.events_for(name, "Pod", "default", "a-0")
                        else:
                            await registry.watch(name, "pods")
                    except KubemuxError:
                        pass
                    except Exception as exc:  # noqa: BLE001 - what the test looks for
                        foreign.append(exc)
                await anyio.lowlevel.checkpoint()

        async def writer() -> None:
            version = 0
            while True:  # until the callers are done
                version += 1
                write_kubeconfig(path, config(version))
                await anyio.sleep(0.01)

        with anyio.fail_after(4 * TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer)
                async with anyio.create_task_group() as callers:
                    for _ in range(40):
                        callers.start_soon(caller, rng.randrange(1 << 30))
                tg.cancel_scope.cancel()
        # the last rewrite may still be syncing (a reload holds its context's lock): one
        # more, naming all six as no rewrite did, applied before anything is counted
        final = {n: FakeContext(cluster=a if i % 2 else b) for i, n in enumerate(names)}
        await rewrite_kubeconfig(registry, path, final, sync_timeout=TIMEOUT)
        with anyio.fail_after(TIMEOUT):
            for name in names:
                await registry.stop_watcher(name)
        assert foreign == []
        await assert_nothing_left(registry, a, b)


async def test_autowatched_context_whose_start_failed_is_retried(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    """An exec plugin failing at startup (a VPN down): autowatch retries with backoff and
    syncs once the plugin works, with no kubeconfig change."""
    from kubemux import Backoff

    fake_cluster.tokens.add("gate-token")
    gate = tmp_path / "gate"
    path = exec_kubeconfig(
        tmp_path / "config",
        fake_cluster,
        ["vpn"],
        {"GATE_TOKEN": "gate-token", "GATE_FILE": str(gate)},
    )
    backoff = Backoff(initial_delay=0.05, max_delay=0.2, jitter=False)
    async with WatcherRegistry.from_kubeconfig(
        str(path), autowatch=["pods"], start_backoff=backoff
    ) as registry:
        await wait_until(
            lambda: registry.status().contexts["vpn"].state == "backing off", registry=registry
        )
        assert "gate closed" in (registry.status().contexts["vpn"].last_error or "")
        gate.touch()
        await wait_until(lambda: registry.store("vpn", "pods") is not None, registry=registry)
        assert len(registry.store("vpn", "pods") or ()) == 10
        assert registry.status().contexts["vpn"].last_error is None


async def test_start_time_limit_ends_a_start_with_a_clear_error(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    """A hanging exec plugin: watch() fails with StartTimeout after start_timeout."""
    pid_file = tmp_path / "pid"
    path = exec_kubeconfig(
        tmp_path / "config",
        fake_cluster,
        ["hang"],
        {"GATE_TOKEN": "t", "GATE_HANG": str(pid_file)},
    )
    async with WatcherRegistry.from_kubeconfig(str(path), start_timeout=0.5) as registry:
        try:
            with anyio.fail_after(TIMEOUT), pytest.raises(StartTimeout):
                await registry.watch("hang", "pods")
        finally:
            # On a loaded machine the plugin may not have started (and written its pid)
            # within 0.5 s: the timed-out start killed it then, and there is nothing to kill.
            if pid_file.exists() and pid_file.read_text():
                pid = int(pid_file.read_text())
                # the timed-out start ended the plugin's process group
                await wait_until(lambda: not _alive(pid))
                _kill(pid)
        assert registry.status().contexts["hang"].state in ("error", "backing off")
        assert registry.live_contexts == []


async def test_stop_kills_a_hanging_exec_plugin(tmp_path: Path, fake_cluster: FakeCluster) -> None:
    """A stop during a hanging exec plugin ends the plugin's process, and no pending
    watch() starts anything."""
    pid_file = tmp_path / "pid"
    path = exec_kubeconfig(
        tmp_path / "config",
        fake_cluster,
        ["hang"],
        {"GATE_TOKEN": "t", "GATE_HANG": str(pid_file)},
    )
    registry = WatcherRegistry.from_kubeconfig(str(path), start_timeout=60)
    async with registry:
        outcome: list[BaseException] = []

        async def pending_watch() -> None:
            try:
                await registry.watch("hang", "pods")
            except KubemuxError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(pending_watch)
            await wait_until(lambda: pid_file.exists() and bool(pid_file.read_text()))
            pid = int(pid_file.read_text())
            assert await registry.stop_watcher("hang") is True
        assert [type(e) for e in outcome] == [ContextRemoved]
        assert registry.live_contexts == []
        try:
            await wait_until(lambda: not _alive(pid))
        finally:
            _kill(pid)


def _kill(pid: int) -> None:
    assert pid > 1
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie not yet reaped counts as gone
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return False


async def test_closing_with_a_pending_watch_finishes_and_starts_nothing(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    fake_cluster.stall()  # the first LIST hangs
    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster})
    outcome: list[BaseException] = []
    generations_at_close = None
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            async with WatcherRegistry.from_kubeconfig(str(path)) as registry:

                async def pending_watch() -> None:
                    try:
                        await registry.watch("c", "pods")
                    except KubemuxError as exc:
                        outcome.append(exc)

                tg.start_soon(pending_watch)
                await fake_cluster.wait_for(lambda: fake_cluster.open_connections > 0, TIMEOUT)
                generations_at_close = next(registry._generations.numbers)
            assert (
                next(registry._generations.numbers) == generations_at_close + 1
            )  # none made in close
    fake_cluster.unstall()
    assert [type(e) for e in outcome] == [ContextRemoved]
    assert kubemux_tasks() == []


async def test_calls_on_a_closed_registry_raise_kubemux_errors(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster})
    registry = WatcherRegistry.from_kubeconfig(str(path))
    async with registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("c", "pods")
    for call in (registry.watch("c", "pods"), registry.events_for("c", "Pod", "default", "x")):
        with pytest.raises(KubemuxError, match="registry is closed"):
            await call


async def test_stopping_while_events_for_runs_raises_only_kubemux_errors(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    """events_for() racing stop_watcher() used to raise 'This task group is not active'."""
    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster})
    errors: list[BaseException] = []
    async with WatcherRegistry.from_kubeconfig(str(path), event_max_age=60) as registry:
        for _ in range(30):
            async with anyio.create_task_group() as tg:

                async def ask() -> None:
                    try:
                        await registry.events_for("c", "Pod", "default", "p-1")
                    except KubemuxError:
                        pass
                    except Exception as exc:  # noqa: BLE001 - what the test looks for
                        errors.append(exc)

                tg.start_soon(ask)
                for _ in range(random.randrange(8)):
                    await anyio.lowlevel.checkpoint()
                tg.start_soon(registry.stop_watcher, "c")
        assert errors == []
        await registry.stop_watcher("c")
        await assert_nothing_left(registry, fake_cluster)


async def test_a_failing_context_leaves_others_alone(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    """A context whose client cannot be built fails alone, with a KubemuxError."""
    doc = kubeconfig_dict({"good": fake_cluster, "bad": FakeContext(cluster=fake_cluster)})
    for user in doc["users"]:
        if user["name"].startswith("bad"):
            user["user"] = {"client-certificate": str(tmp_path / "missing.crt")}
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc))
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            good = await registry.watch("good", "pods")
            with pytest.raises(KubemuxError):
                await registry.watch("bad", "pods")
        async with registry.subscribe("pods", ["good"], snapshot=False) as changes:
            fake_cluster.create("pods", make_pod("late"))
            with anyio.fail_after(TIMEOUT):
                assert (await changes.__anext__()).name == "late"
        assert good.get("default", "late") is not None
        assert registry.status().contexts["good"].state == "running"


def _deep(name: str, depth: int = 1000) -> bytes:
    """A watch line whose object nests ``depth`` levels deep (msgspec: RecursionError)."""
    inner = "[" * depth + "]" * depth
    return (
        b'{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"'
        + name.encode()
        + b'","namespace":"default","resourceVersion":"999999"},"spec":{"x":'
        + inner.encode()
        + b"}}}"
    )


async def test_a_hostile_object_or_transform_leaves_the_context_and_its_siblings_alone(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    """One object nested 1,000 deep, and a transform raising on one object, used to tear
    down the whole context (other resources' synced stores included)."""
    fake_cluster.create(
        "configmaps", {"metadata": {"name": "cm-0", "namespace": "default"}, "data": {}}
    )

    def picky(obj: dict[str, Any]) -> dict[str, Any]:
        if obj["metadata"]["name"] == "boom":
            raise ValueError("the user's transform fails on this one")
        return obj

    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster})
    async with WatcherRegistry.from_kubeconfig(str(path), transforms={"pods": picky}) as reg:
        with anyio.fail_after(TIMEOUT):
            pods = await reg.watch("c", "pods")
            configmaps = await reg.watch("c", "configmaps")
            # synced is after the LIST: the watches open a moment later
            await fake_cluster.wait_for(lambda: fake_cluster.open_watches == 2)
        async with reg.subscribe(snapshot=False) as changes:
            assert fake_cluster.inject_watch_line("pods", _deep("deep")) >= 1
            fake_cluster.create("pods", make_pod("boom"))
            fake_cluster.create("pods", make_pod("fine"))
            fake_cluster.create(
                "configmaps", {"metadata": {"name": "cm-1", "namespace": "default"}, "data": {}}
            )
            seen: set[str] = set()
            with anyio.fail_after(TIMEOUT):
                while not {"fine", "cm-1"} <= seen:
                    seen.add((await changes.__anext__()).name)
        assert "deep" not in seen and "boom" not in seen
        assert pods.get("default", "fine") is not None and pods.get("default", "boom") is None
        assert configmaps.get("default", "cm-1") is not None
        status = reg.status().contexts["c"]
        assert status.state == "running"
        by_resource = {i.resource: i for i in status.informers}
        assert by_resource["pods"].skipped_lines >= 2 and by_resource["pods"].state == "watching"
        with anyio.fail_after(TIMEOUT):
            assert await reg.watch("c", "pods") is pods  # the same generation, still live


async def test_a_wrong_typed_field_is_a_load_error_that_keeps_the_last_good_contexts(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    """exec.args: 5 used to bite only when the client was built (tearing the context down
    with a TypeError); now the file is refused at load as kubectl refuses it."""
    path = write_kubeconfig(tmp_path / "config", {"good": fake_cluster, "x": fake_cluster})
    async with WatcherRegistry.from_kubeconfig(str(path), debounce_delay=0.01) as registry:
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("good", "pods")
        doc = yaml.safe_load(path.read_text())
        for user in doc["users"]:
            if user["name"].startswith("x"):
                user["user"] = {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": "aws",
                        "args": 5,
                    }
                }
        before = registry.kubeconfig_syncs
        path.write_text(yaml.safe_dump(doc))
        # A read of the half-written file (write_text is not atomic) may fail first, for
        # another reason: wait for the error the whole file gives.
        with anyio.fail_after(TIMEOUT):
            while "args" not in " ".join(registry.status().kubeconfig_errors.values()):
                before = await registry.wait_kubeconfig_sync(before)
        (error,) = registry.status().kubeconfig_errors.values()
        assert "args" in error and "'x'" in error
        assert set(registry.contexts) == {"good", "x"}  # the last good contexts stay
        assert registry.store("good", "pods") is store
