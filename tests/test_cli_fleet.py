"""``kubemux get`` over many contexts when some are slow: rows as they come, a progress line,
``--request-timeout``."""

from __future__ import annotations

import io
from pathlib import Path

import anyio
import pytest

from kubemux.cli import _arrivals, _get, run
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from support import TIMEOUT


class Watched(io.StringIO):
    """An output whose writes wake whoever waits for a text in it."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = anyio.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        self.changed.set()
        self.changed = anyio.Event()
        return written

    async def wait_for(self, text: str) -> None:
        with anyio.fail_after(TIMEOUT):
            while text not in self.getvalue():
                await self.changed.wait()


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The grace before streaming and the first progress line, short (settings, not code)."""
    monkeypatch.setattr(_arrivals, "GRACE", 0.05)
    monkeypatch.setattr(_arrivals, "PROGRESS_AFTER", 0.1)


async def test_rows_come_as_contexts_answer_and_a_slow_one_is_named(
    tmp_path: Path, quick: None
) -> None:
    async with FakeCluster() as fast, FakeCluster() as slow:
        fast.create("pods", make_pod("web-1"))
        slow.create("pods", make_pod("db-1"))
        path = write_kubeconfig(
            tmp_path / "config", {"a-fast": fast, "b-slow": slow, "c-fast": fast}
        )
        slow.stall()  # its discovery and LIST hang until unstall()
        out, err = Watched(), Watched()
        result: list[int] = []

        async def command() -> None:
            argv = ["get", "pods", "--all-contexts", "--kubeconfig", str(path)]
            result.append(await run(argv, stdout=out, stderr=err))

        async with anyio.create_task_group() as tg:
            tg.start_soon(command)
            await out.wait_for("a-fast")  # printed while b-slow still hangs
            await out.wait_for("c-fast")
            assert "b-slow" not in out.getvalue()
            assert out.getvalue().startswith("CONTEXT ")
            await err.wait_for("kubemux: waiting for ")
            assert "b-slow" in err.getvalue().splitlines()[0]
            assert not result
            slow.unstall()
            await out.wait_for("b-slow")
        assert result == [0]
        lines = out.getvalue().splitlines()
        first = [line.split()[0] for line in lines]
        assert first[0] == "CONTEXT" and set(first[1:3]) == {"a-fast", "c-fast"}
        assert first[3:] == ["b-slow"]
        # the rows line up under the header, as get -w's do
        assert (
            len(
                {
                    line.index(" web-1") if "web-1" in line else line.index(" db-1")
                    for line in lines[1:]
                }
            )
            == 1
        )


async def test_contexts_are_opened_a_few_at_a_time_in_order(
    tmp_path: Path, quick: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet's contexts start ``CONTEXTS_AT_ONCE`` at a time (each answers in its own
    time, not the fleet's): while the first ones hang, the next are not asked."""
    monkeypatch.setattr(_get, "CONTEXTS_AT_ONCE", 2)
    async with FakeCluster() as slow, FakeCluster() as fast:
        slow.create("pods", make_pod("db-1"))
        fast.create("pods", make_pod("web-1"))
        contexts = {"a-slow": slow, "b-slow": slow, "c-fast": fast, "d-fast": fast}
        path = write_kubeconfig(tmp_path / "config", contexts)
        slow.stall()
        out, err = Watched(), Watched()
        result: list[int] = []

        async def command() -> None:
            argv = ["get", "pods", "--all-contexts", "--kubeconfig", str(path)]
            result.append(await run(argv, stdout=out, stderr=err))

        async with anyio.create_task_group() as tg:
            tg.start_soon(command)
            await err.wait_for("kubemux: waiting for 4 of 4 contexts")
            await slow.wait_for(lambda: slow.request_count() >= 2)
            assert fast.request_count() == 0 and out.getvalue() == ""
            slow.unstall()
            await out.wait_for("d-fast")
        assert result == [0]
        first = [line.split()[0] for line in out.getvalue().splitlines()]
        assert first[0] == "CONTEXT" and set(first[1:3]) == {"a-slow", "b-slow"}
        assert set(first[3:]) == {"c-fast", "d-fast"}  # asked once a turn was free


async def test_all_within_the_grace_is_one_table_in_order(tmp_path: Path) -> None:
    async with FakeCluster() as a, FakeCluster() as b:
        a.create("pods", make_pod("web-1"))
        b.create("pods", make_pod("a-much-longer-name"))
        path = write_kubeconfig(tmp_path / "config", {"x": a, "y": b})
        out, err = io.StringIO(), io.StringIO()
        argv = ["get", "pods", "--all-contexts", "--kubeconfig", str(path)]
        with anyio.fail_after(TIMEOUT):
            assert await run(argv, stdout=out, stderr=err) == 0
        lines = out.getvalue().splitlines()
        assert [line.split()[0] for line in lines] == ["CONTEXT", "x", "y"]
        assert err.getvalue() == ""


async def test_request_timeout_names_the_context_that_did_not_answer(tmp_path: Path) -> None:
    async with FakeCluster() as slow:
        path = write_kubeconfig(tmp_path / "config", {"slow": slow})
        slow.stall()
        out, err = io.StringIO(), io.StringIO()
        argv = ["get", "pods", "--request-timeout", "200ms", "--kubeconfig", str(path)]
        with anyio.fail_after(TIMEOUT):
            assert await run(argv, stdout=out, stderr=err) == 1
        assert err.getvalue() == "kubemux: error: context 'slow': no answer within 0.2s\n"
        assert out.getvalue() == ""
        slow.unstall()


def test_request_timeout_reads_kubectls_durations() -> None:
    with pytest.raises(SystemExit):
        anyio.run(run, ["get", "pods", "--request-timeout", "soon"])


async def test_watch_shows_each_context_as_it_answers(tmp_path: Path) -> None:
    async with FakeCluster() as fast, FakeCluster() as slow:
        fast.create("pods", make_pod("web-1"))
        slow.create("pods", make_pod("db-1"))
        path = write_kubeconfig(tmp_path / "config", {"a-slow": slow, "b-fast": fast})
        slow.stall()
        out = Watched()
        async with anyio.create_task_group() as tg:
            argv = ["watch", "pods", "--all-contexts", "--kubeconfig", str(path)]
            tg.start_soon(lambda: run(argv, stdout=out, stderr=io.StringIO()))
            await out.wait_for("web-1")  # while a-slow hangs
            assert "db-1" not in out.getvalue()
            slow.unstall()
            await out.wait_for("db-1")
            fast.create("pods", make_pod("web-2"))  # and then live changes, as before
            await out.wait_for("web-2")
            tg.cancel_scope.cancel()
        lines = out.getvalue().splitlines()
        assert lines[0].split()[:2] == ["CONTEXT", "NAME"]
        assert [line.split()[:2] for line in lines[1:]] == [
            ["b-fast", "web-1"],
            ["a-slow", "db-1"],
            ["b-fast", "web-2"],
        ]


async def test_watch_keeps_up_while_many_contexts_start(tmp_path: Path) -> None:
    """The contexts' first lists are announced to the watch's subscription as they start
    (thousands of changes at once, their rows shown from the stores): taken a batch a turn,
    not one change a turn, the subscription never falls its buffer behind (it closed the
    command: "subscriber fell more than 1000 changes behind")."""
    async with FakeCluster() as c:
        c.create_many("pods", [make_pod(f"p-{i:04d}", size=200) for i in range(300)])
        path = write_kubeconfig(tmp_path / "config", {f"ctx-{i:02d}": c for i in range(20)})
        out, err = Watched(), io.StringIO()
        result: list[int] = []

        async def command() -> None:
            argv = ["watch", "pods", "--all-contexts", "--kubeconfig", str(path)]
            try:
                result.append(await run(argv, stdout=out, stderr=err))
            finally:
                out.write("")  # wakes the wait below

        async with anyio.create_task_group() as tg:
            tg.start_soon(command)
            with anyio.fail_after(TIMEOUT):
                while len(out.getvalue().splitlines()) < 1 + 20 * 300 and not result:
                    await out.changed.wait()
            assert not result, err.getvalue()  # every row shown
            c.create("pods", make_pod("later"))  # and the watch goes on: 20 lines of it
            with anyio.fail_after(TIMEOUT):
                while out.getvalue().count(" later ") < 20 and not result:
                    await out.changed.wait()
            assert not result, err.getvalue()
            tg.cancel_scope.cancel()
        assert err.getvalue() == ""
