"""The ``kubemux`` command, in-process, against FakeClusters and a written kubeconfig."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import orjson
import pytest

from kubemux import __version__ as kubemux_version
from kubemux.cli import main, run
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from process_support import INTERRUPTED, run_until
from support import TIMEOUT


class Output(io.StringIO):
    """A stdout that can be waited on."""

    def __init__(self) -> None:
        super().__init__()
        self._written = anyio.Event()

    def write(self, text: str) -> int:
        n = super().write(text)
        self._written.set()
        self._written = anyio.Event()
        return n

    async def wait_for(self, pattern: str) -> re.Match[str]:
        with anyio.fail_after(TIMEOUT):
            while (match := re.search(pattern, self.getvalue())) is None:
                await self._written.wait()
        return match


@pytest.fixture
async def kubeconfig(tmp_path: Path) -> AsyncIterator[Path]:
    async with FakeCluster(tokens={"tok-a"}) as a, FakeCluster(tokens={"tok-b"}) as b:
        a.create("pods", make_pod("web-1"))
        a.create("pods", make_pod("web-2"))
        b.create("pods", make_pod("db-1", "data"))
        yield write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})


async def kubemux(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with anyio.fail_after(TIMEOUT):
        code = await run(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------------- help and usage
@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            "watch",
            ["--all-contexts", "--context", "--namespace", "--output", "jsonpath=", "-L"],
        ),
        ("status", ["--probe", "--kubeconfig", "--follow"]),
        ("demo", ["--contexts", "--port", "--watch", "--edit-period"]),
        ("dashboard", ["--kubeconfig", "--port", "--host", "127.0.0.1", "--resource"]),
    ],
)
def test_help(command: str, expected: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: kubemux {command}")
    for option in expected:
        assert option in out
    assert "--duration" not in out or command == "demo"  # test hooks stay hidden


def test_top_level_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("watch", "status", "demo", "dashboard"):
        assert re.search(rf"^\s+{command}\s+\S", out, re.MULTILINE), command


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["watch"])
    assert exit_info.value.code == 2
    assert "the following arguments are required: resource" in capsys.readouterr().err


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("command", [["status"], ["watch", "pods"], ["dashboard", "--port", "0"]])
def test_missing_kubeconfig_is_one_line(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert main([*command, "--kubeconfig", str(missing)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("kubemux: error: ")
    assert str(missing) in captured.err


async def test_unknown_context_is_one_line(kubeconfig: Path) -> None:
    code, out, err = await kubemux(
        "watch", "pods", "--context", "nope", "--kubeconfig", str(kubeconfig)
    )
    assert code == 1 and out == ""
    assert err == "kubemux: error: context 'nope' not found in the kubeconfig\n"


async def test_unknown_resource_is_one_line(kubeconfig: Path) -> None:
    code, _, err = await kubemux("watch", "nonsense", "-A", "--kubeconfig", str(kubeconfig))
    assert code == 1
    assert err.startswith("kubemux: error: ") and err.count("\n") == 1
    assert 'the server doesn\'t have a resource type "nonsense"' in err
    code, _, err = await kubemux(
        "dashboard", "--resource", "nonsense", "--kubeconfig", str(kubeconfig)
    )
    assert code == 1 and err.startswith("kubemux: error: unknown resource 'nonsense'")


async def test_busy_port_is_one_line(kubeconfig: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = await kubemux(
            "dashboard", "--kubeconfig", str(kubeconfig), "--port", str(port)
        )
    assert code == 1 and out == ""
    assert err.startswith(f"kubemux: error: cannot listen on 127.0.0.1:{port}: ")
    assert err.count("\n") == 1


# ---------------------------------------------------------------------- status and watch
def status_rows(out: str) -> dict[str, list[str]]:
    """CONTEXT -> [current, STATE, SERVER, ...] from the status table."""
    rows = {}
    for line in out.splitlines()[1:]:
        current, cells = line.startswith("*"), line.lstrip("* ").split()
        rows[cells[0]] = ["*" if current else "", *cells[1:]]
    return rows


async def test_status_prints_a_table(kubeconfig: Path) -> None:
    code, out, err = await kubemux("status", "--kubeconfig", str(kubeconfig))
    assert (code, err) == (0, "")
    header = out.splitlines()[0].split()
    assert header == ["CONTEXT", "STATE", "SERVER", "USER", "NAMESPACE", "OBJECTS", "ERROR"]
    rows = status_rows(out)
    assert list(rows) == ["prod", "dev"]
    assert rows["prod"][:2] == ["*", "idle"] and rows["dev"][:2] == ["", "idle"]
    assert rows["prod"][2].startswith("http://127.0.0.1:") and rows["prod"][3] == "prod-user"

    code, out, _ = await kubemux("status", "--probe", "pods", "--kubeconfig", str(kubeconfig))
    assert code == 0
    rows = status_rows(out)
    assert (rows["prod"][1], rows["prod"][-1]) == ("running", "2")
    assert (rows["dev"][1], rows["dev"][-1]) == ("running", "1")
    assert "tok-a" not in out and "tok-b" not in out


async def test_status_shows_an_unreachable_context(tmp_path: Path) -> None:
    async with FakeCluster() as dead:
        server = dead.server
    path = write_kubeconfig(tmp_path / "config", {"dead": FakeContext(cluster=server)})
    code, out, err = await kubemux(
        "status", "--probe", "pods", "--timeout", "5", "--kubeconfig", str(path)
    )
    assert code == 1  # a probed context failed
    assert err == "kubemux: error: the probe of pods failed in 1 of 1 contexts: 'dead'\n"
    line = out.splitlines()[1]
    assert status_rows(out)["dead"][1] not in ("running", "idle")
    assert f"cannot reach {server}" in line


async def test_status_follow_prints_the_table_again_when_it_changes(tmp_path: Path) -> None:
    async with FakeCluster() as a, FakeCluster() as b:
        a.create("pods", make_pod("web-1"))
        path = write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b})
        out, err = Output(), io.StringIO()
        argv = ["status", "-f", "--probe", "pods", "--duration", "60", "--kubeconfig", str(path)]
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(run, argv, stdout=out, stderr=err))
            await out.wait_for(r"prod +running.* 1 *\n +dev +running.* 0 *\n")
            write_kubeconfig(path, {"prod": a})  # dev removed: a table without it follows
            await out.wait_for(r"\n\n +CONTEXT[^\n]*\n\* +prod [^\n]*\n$")
            tg.cancel_scope.cancel()
    assert "dev" not in out.getvalue().split("\n\n")[-1] and err.getvalue() == ""


async def test_watch_all_contexts_as_json_lines(kubeconfig: Path) -> None:
    code, out, err = await kubemux(
        "watch", "pods", "-A", "--all-contexts", "-o", "json", "--duration", "1.5",
        "--kubeconfig", str(kubeconfig),
    )  # fmt: skip
    assert (code, err) == (0, "")
    records = [orjson.loads(line) for line in out.splitlines()]
    seen = {(r["context"], r["type"], r["object"]["metadata"]["name"]) for r in records}
    assert seen == {
        ("prod", "ADDED", "web-1"),
        ("prod", "ADDED", "web-2"),
        ("dev", "ADDED", "db-1"),
    }
    assert all(r["resource"] == "pods" for r in records)


async def test_watch_current_context_as_a_table(kubeconfig: Path) -> None:
    code, out, _ = await kubemux(
        "watch", "pods", "-o", "wide", "--duration", "1.5", "--kubeconfig", str(kubeconfig)
    )
    assert code == 0
    header, *rows = out.splitlines()  # kubectl's columns: one context, no CONTEXT column
    assert header.split() == [
        "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE",
        "READINESS", "GATES",
    ]  # fmt: skip
    assert sorted(r.split()[:4] + r.split()[6:7] for r in rows) == [
        ["web-1", "1/1", "Running", "0", "node-1"],
        ["web-2", "1/1", "Running", "0", "node-1"],
    ]


# ---------------------------------------------------------------------- dashboard and demo
async def test_dashboard_serves_the_kubeconfig(kubeconfig: Path) -> None:
    out = Output()
    async with anyio.create_task_group() as tg:
        argv = ["dashboard", "--kubeconfig", str(kubeconfig), "--port", "0"]
        tg.start_soon(functools.partial(run, argv, stdout=out))
        url = (await out.wait_for(r"open (http://127\.0\.0\.1:\d+/)")).group(1)
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            contexts = (await client.get("/api/contexts")).json()["contexts"]
            assert [c["name"] for c in contexts] == ["prod", "dev"]
            pods = (await client.get("/api/contexts/dev/pods")).json()["items"]
            assert [p["metadata"]["name"] for p in pods] == ["db-1"]
            page = await client.get("/")
            assert page.status_code == 200 and "kubemux" in page.text
        tg.cancel_scope.cancel()  # like Ctrl-C: the server shuts down cleanly
    assert "warning" not in out.getvalue()


async def test_demo_serves_simulated_clusters_and_edits_the_kubeconfig() -> None:
    out = Output()
    argv = ["demo", "--contexts", "2", "--port", "0", "--edit-period", "0.3", "--duration", "2.5"]
    async with anyio.create_task_group() as tg:
        codes: list[int] = []

        async def demo() -> None:
            codes.append(await run(argv, stdout=out))

        tg.start_soon(demo)
        url = (await out.wait_for(r"Open (http://127\.0\.0\.1:\d+/)")).group(1)
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            names = [c["name"] for c in (await client.get("/api/contexts")).json()["contexts"]]
            assert names[:2] == ["sim-0", "sim-1"]
            pods = await client.get("/api/contexts/sim-0/pods")
            assert pods.status_code == 200 and len(pods.json()["items"]) >= 1
        await out.wait_for("added context 'sim-2'")
        await out.wait_for(r"rotated the token of 'sim-0' \(reload\)")
        await out.wait_for("removed context 'sim-2'")
    assert codes == [0]  # --duration ended it


async def test_demo_watch_prints_to_the_terminal() -> None:
    code, out, err = await kubemux(
        "demo", "--watch", "--contexts", "2", "--edit-period", "0.5", "--duration", "1.5"
    )
    assert (code, err) == (0, "")
    assert "kubemux demo: 2 simulated contexts" in out
    assert re.search(r"^CONTEXT\s+NAMESPACE\s+NAME\s+READY\s+STATUS", out, re.MULTILINE)
    assert re.search(r"^sim-0\s+\S+\s+[a-z]+-\w+-\w{5}\s", out, re.MULTILINE)
    assert re.search(r"^sim-1\s+\S+\s+[a-z]+-\w+-\w{5}\s", out, re.MULTILINE)
    assert "--- kubeconfig edited: added context 'sim-2'" in out


# ---------------------------------------------------------------------- hostile text
ESC = "\x1b[2J\x1b]0;pwned\x07"  # clear the screen, retitle the window
LINK = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"  # an OSC 8 hyperlink
FORGE = "ok\rkubemux: error: forged"  # a carriage return overwrites the line
BIDI = "\u202egnp.exe"  # a right-to-left override
RAW = ("\x1b", "\x07", "\r", "\u202e")


def no_raw_controls(text: str) -> bool:
    return not any(c in text for c in RAW)


@pytest.fixture
async def hostile(tmp_path: Path) -> AsyncIterator[Path]:
    async with FakeCluster() as c:
        pod = make_pod("web-1", labels={"app": "x"})
        pod["metadata"]["name"] = "web" + LINK
        pod["status"]["phase"] = FORGE + BIDI
        c.create("pods", pod)
        yield write_kubeconfig(tmp_path / "config", {"ctx" + ESC: c})


async def test_watch_escapes_control_characters_and_json_stays_exact(hostile: Path) -> None:
    code, out, err = await kubemux(
        "watch", "pods", "-A", "--all-contexts", "--duration", "1.5", "--kubeconfig", str(hostile)
    )
    assert (code, err) == (0, "")
    assert no_raw_controls(out)
    assert "ctx\\x1b[2J\\x1b]0;pwned\\x07" in out  # shown, as escapes
    assert "web\\x1b]8;;https://evil.example" in out and "ok\\x0dkubemux" in out
    assert "\\u202egnp.exe" in out
    code, out, _ = await kubemux(
        "watch", "pods", "-A", "-o", "json", "--duration", "1.5", "--kubeconfig", str(hostile)
    )
    record = orjson.loads(out.splitlines()[0])  # exact: the JSON escapes are JSON's own
    assert record["context"] == "ctx" + ESC
    assert record["object"]["metadata"]["name"] == "web" + LINK
    assert record["object"]["status"]["phase"] == FORGE + BIDI


async def test_templates_escape_control_characters(hostile: Path) -> None:
    """``-o jsonpath`` prints the cluster's text as kubectl does, but no control character
    (kubectl prints them raw); a template's own newlines and tabs stay."""
    template = '{range .items[*]}{.metadata.name}{"\\t"}{.status.phase}{"\\n"}{end}'
    code, out, err = await kubemux(
        "get", "pods", "-A", "-o", f"jsonpath={template}", "--kubeconfig", str(hostile)
    )
    assert (code, err) == (0, "") and no_raw_controls(out)
    name = "web\\x1b]8;;https://evil.example\\x1b\\click\\x1b]8;;\\x1b\\"
    assert out == name + "\tok\\x0dkubemux: error: forged\\u202egnp.exe\n"
    code, out, err = await kubemux(
        "watch",
        "pods",
        "-A",
        "-o",
        'jsonpath={.metadata.name}{"\\n"}',
        "--duration",
        "1",
        "--kubeconfig",
        str(hostile),
    )
    assert (code, err) == (0, "") and out == name + "\n"


async def test_status_escapes_control_characters(hostile: Path) -> None:
    code, out, _ = await kubemux("status", "--probe", "pods", "--kubeconfig", str(hostile))
    assert code == 0
    assert no_raw_controls(out) and "ctx\\x1b[2J" in out


async def test_status_never_shows_a_password_in_a_server_url(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        server = c.server.replace("http://", "http://admin:hunter2@")
        path = write_kubeconfig(tmp_path / "config", {"prod": FakeContext(cluster=server)})
        _, out, err = await kubemux(
            "status", "--probe", "pods", "--timeout", "5", "--kubeconfig", str(path)
        )
    assert "hunter2" not in out + err
    assert "http://***@127.0.0.1:" in out


# ---------------------------------------------------------------------- the real command
async def kubemux_process(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``kubemux`` as a subprocess (its own logging, stdout and exit)."""
    environ = {**os.environ, **(env or {})}
    with anyio.fail_after(TIMEOUT * 2):
        done = await anyio.run_process(
            [sys.executable, "-m", "kubemux.cli", *argv], env=environ, check=False
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_version() -> None:
    code, out, _ = await kubemux_process("--version")
    assert (code, out) == (0, f"kubemux {kubemux_version}\n")


async def test_an_error_is_printed_once(tmp_path: Path) -> None:
    async with FakeCluster() as dead:
        server = dead.server.replace("http://", "http://admin:hunter2@")
    path = write_kubeconfig(tmp_path / "config", {"dead" + ESC: FakeContext(cluster=server)})
    code, out, err = await kubemux_process("watch", "pods", "--kubeconfig", str(path))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("kubemux: error: ")  # no WARNING before it
    assert "cannot reach http://***@127.0.0.1:" in err
    assert "hunter2" not in err and no_raw_controls(err)


async def test_log_lines_are_terminal_safe_and_verbosity_is_set(tmp_path: Path) -> None:
    async with FakeCluster() as dead:
        server = dead.server.replace("http://", "http://admin:hunter2@")
    async with FakeCluster() as alive:
        path = write_kubeconfig(
            tmp_path / "config", {"ok": alive, "dead" + ESC: FakeContext(cluster=server)}
        )
        argv = ("watch", "pods", "--all-contexts", "--kubeconfig", str(path))
        # four processes at once, each until the dead context's warning is out (1 s more for
        # a repeat to show), then Ctrl-C: each asserts on its own output
        runs: dict[str, tuple[int, str, str]] = {}

        def warned(out: str, err: str) -> bool:
            return "WARNING" in err and "dead" in err

        async def run(name: str, *extra: str, env: dict[str, str] | None = None) -> None:
            command = [sys.executable, "-m", "kubemux.cli", *argv, *extra]
            runs[name] = await run_until(command, warned, env={**os.environ, **(env or {})})

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "plain")
            tg.start_soon(run, "-vv", "-vv")
            tg.start_soon(functools.partial(run, "KUBEMUX_LOG", env={"KUBEMUX_LOG": "debug"}))
            tg.start_soon(run, "-v", "-v")
        code, _, err = runs["plain"]
        assert code == INTERRUPTED, err
        # -A: the failing context is one warning line, escaped, without the password
        warnings = [line for line in err.splitlines() if "dead" in line]
        assert warnings and all(line.startswith("kubemux: WARNING: ") for line in warnings)
        assert "hunter2" not in err and no_raw_controls(err)
        code, _, err = runs["-vv"]
        assert code == INTERRUPTED and "kubemux: DEBUG: " in err and no_raw_controls(err)
        code, _, err = runs["KUBEMUX_LOG"]
        assert code == INTERRUPTED and "kubemux: DEBUG: " in err
        code, _, err = runs["-v"]
        assert code == INTERRUPTED and "DEBUG" not in err
    code, _, err = await kubemux_process("status", env={"KUBEMUX_LOG": "chatty"})
    assert code == 2 and err.startswith("kubemux: error: KUBEMUX_LOG=chatty is not one of")


async def test_a_closed_pipe_ends_watch_quietly(tmp_path: Path) -> None:
    """``kubemux watch pods -A | head -1``: no traceback, no error, a clean exit."""
    async with FakeCluster() as c:
        c.create("pods", make_pod("web-0"))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        errors = tmp_path / "stderr"
        command = (
            f"{shlex.quote(sys.executable)} -m kubemux.cli watch pods -A "
            f"--kubeconfig {shlex.quote(str(path))} 2>{shlex.quote(str(errors))} | head -1; "
            'echo "exit=${PIPESTATUS[0]}"'
        )
        async with await anyio.open_process(["bash", "-c", command]) as process:
            assert process.stdout is not None
            out = b""
            with anyio.fail_after(TIMEOUT):
                while b"NAME" not in out:  # head got its line and is gone
                    out += await process.stdout.receive()
                # more output: the next write finds the pipe closed
                for i in range(1, 20):
                    c.create("pods", make_pod(f"web-{i}"))
                with contextlib.suppress(anyio.EndOfStream):
                    while b"exit=" not in out or not out.endswith(b"\n"):
                        out += await process.stdout.receive()
                await process.wait()
    assert out.decode().splitlines()[-1] == "exit=0"
    assert errors.read_text() == ""


async def test_status_shows_errors_in_its_table_only(tmp_path: Path) -> None:
    async with FakeCluster() as dead:
        server = dead.server
    path = write_kubeconfig(tmp_path / "config", {"dead": FakeContext(cluster=server)})
    runs: dict[str, tuple[int, str, str]] = {}

    async def run(*argv: str) -> None:
        runs[argv[0]] = await kubemux_process("status", *argv, "--kubeconfig", str(path))

    async def follow() -> None:  # until its table shows the error (1 s more), then Ctrl-C
        command = [sys.executable, "-m", "kubemux.cli", "status", "-f", "--probe", "pods"]
        runs["-f"] = await run_until(
            [*command, "--kubeconfig", str(path)], lambda out, _: "cannot reach" in out
        )

    async with anyio.create_task_group() as tg:  # both at once
        tg.start_soon(run, "--probe", "pods", "--timeout", "3")
        tg.start_soon(follow)
    code, out, err = runs["--probe"]
    assert code == 1 and f"cannot reach {server}" in out
    assert err == "kubemux: error: the probe of pods failed in 1 of 1 contexts: 'dead'\n"
    code, out, err = runs["-f"]
    assert code == INTERRUPTED and f"cannot reach {server}" in out and err == ""
