"""``kubemux get`` and ``get -w`` against kubectl 1.32, line by line, on the same FakeCluster.

Objects are created two days ago (fixed timestamps), so the server's AGE cells read "2d"
for both; a row created during a test is compared with its AGE loosely. kubectl sends
credentials only to https servers: the cluster is TLS with a token.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from kubemux.cli import run
from kubemux.cli._output import TabWriter, cell_text, human_duration
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from test_cli import Output
from test_fake_cluster_kubectl import KUBECTL, kubectl_process, kubectl_result

pytestmark = pytest.mark.skipif(KUBECTL == "kubectl", reason="kubectl 1.32 not found")

TOKEN = "get-token"
TIMEOUT = 20
CREATED = (dt.datetime.now(dt.UTC) - dt.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")


def aged(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["creationTimestamp"] = CREATED
    return obj


def deployment(name: str, replicas: int = 2) -> dict[str, Any]:
    return aged(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "main", "image": f"{name}:1.0"}]},
                },
            },
            "status": {"readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1},
        }
    )


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={TOKEN}, tls=True, name="get") as fake:
        fake.create("pods", aged(make_pod("web-1", labels={"app": "web"})))
        fake.create("pods", aged(make_pod("a-much-longer-pod-name", labels={"app": "db"})))
        fake.create("pods", aged(make_pod("db-1", "data", labels={"app": "db"}, phase="Pending")))
        fake.create("deployments.apps", deployment("web"))
        fake.create("deployments.apps", deployment("frontend-with-long-name", 3))
        fake.add_crd(
            "example.com",
            "widgets",
            "Widget",
            short_names=["wd"],
            printer_columns=[
                {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                {"name": "Shape", "type": "string", "jsonPath": ".spec.shape", "priority": 1},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        )
        for name, size, color in (("small", 1, "red"), ("large-widget", 1000, "blue")):
            widget = {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"size": size, "color": color, "shape": "round"},
            }
            fake.create("widgets.example.com", aged(widget))
        yield fake


@pytest.fixture
def kubeconfig(cluster: FakeCluster, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", {"fake": cluster})


async def kubemux(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with anyio.fail_after(TIMEOUT):
        code = await run(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "argv",
    [
        ["get", "pods"],
        ["get", "po", "-A"],
        ["get", "pods", "--all-namespaces", "-o", "wide"],
        ["get", "deploy"],
        ["get", "deploy", "-o", "wide"],
        ["get", "widgets"],
        ["get", "wd", "-o", "wide"],
        ["get", "widgets.example.com", "-o", "name"],
        ["get", "pods", "-l", "app=db", "-A"],
        ["get", "pods", "-l", "app in (web,db)"],
        ["get", "pods", "--field-selector", "metadata.name=web-1"],
        ["get", "pods", "-o", "name", "-A"],
        ["get", "pods", "-n", "empty"],
        ["get", "pods", "-A", "-l", "app=nothing"],
        ["get", "nodes"],
        ["get", "ns"],
        ["get", "cm", "-A"],
        ["get", "svc", "--all-namespaces"],
        ["get", "events", "-A"],
        ["get", "pods", "web-1", "nope"],
    ],
    ids=lambda argv: " ".join(argv),
)
async def test_get_prints_what_kubectl_prints(kubeconfig: Path, argv: list[str]) -> None:
    want = await kubectl_result(kubeconfig, *argv)
    got = await kubemux(*argv, "--kubeconfig", str(kubeconfig))
    if argv[-2:] == ["web-1", "nope"]:  # kubectl GETs a named object without the Table
        assert got[0] == want[0] == 1 and got[2] == want[2]
        assert got[1].split("\n")[1].startswith("web-1 ")
        return
    assert got == want


async def test_get_several_contexts_adds_a_context_column(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with FakeCluster(tokens={TOKEN}, tls=True, name="other") as other:
        other.create("pods", aged(make_pod("other-pod")))
        path = write_kubeconfig(tmp_path / "config", {"fake": cluster, "second": other})
        code, out, err = await kubemux(
            "get", "pods", "--context", "fake", "--context", "second", "--kubeconfig", str(path)
        )
        assert (code, err) == (0, "")
        kubectl_code, single, _ = await kubectl_result(path, "get", "pods", "--context", "fake")
        assert kubectl_code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["CONTEXT", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [line.split()[:2] for line in lines[1:]] == [
        ["fake", "a-much-longer-pod-name"],
        ["fake", "web-1"],
        ["second", "other-pod"],
    ]
    # the same cells as kubectl's, after the CONTEXT column
    mine = [line.split()[1:] for line in lines if not line.startswith("second")]
    assert mine == [line.split() for line in single.splitlines()]
    assert lines[1].index("a-much") == lines[0].index("NAME")  # one alignment for all


async def test_get_json_and_yaml_are_the_objects(kubeconfig: Path) -> None:
    code, out, _ = await kubemux("get", "pods", "-o", "json", "--kubeconfig", str(kubeconfig))
    assert code == 0
    doc = json.loads(out)
    assert doc["kind"] == "List"
    assert sorted(i["metadata"]["name"] for i in doc["items"]) == [
        "a-much-longer-pod-name",
        "web-1",
    ]
    code, out, _ = await kubemux(
        "get", "deploy", "web", "-o", "yaml", "--kubeconfig", str(kubeconfig)
    )
    assert code == 0 and "kind: Deployment\n" in out and "name: web\n" in out


AGE = re.compile(r"\s(\d+[smhdy])+\s*$")


async def test_get_watch_prints_rows_as_kubectl_does(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    """The first lines (current rows), then the row of each change, aligned as kubectl's
    remembered widths align them; the AGE of a new row is compared loosely."""
    out = Output()

    async with kubectl_process(kubeconfig, "get", "pods", "-w") as proc:
        assert proc.stdout is not None
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: run(["get", "pods", "-w", "--kubeconfig", str(kubeconfig)], stdout=out)
            )
            kubectl_out = b""
            with anyio.fail_after(TIMEOUT):
                while kubectl_out.count(b"\n") < 3:
                    kubectl_out += await proc.stdout.read(4096)
                await out.wait_for(r"^(.*\n){3}")
            assert out.getvalue() == kubectl_out.decode()  # header and current rows
            cluster.create("pods", make_pod("an-even-longer-name-for-a-new-pod", phase="Pending"))
            cluster.delete("pods", "default", "web-1")
            with anyio.fail_after(TIMEOUT):
                while kubectl_out.count(b"\n") < 5:
                    kubectl_out += await proc.stdout.read(4096)
                await out.wait_for(r"^(.*\n){5}")
            tg.cancel_scope.cancel()
    want = kubectl_out.decode().splitlines()[:5]
    got = out.getvalue().splitlines()[:5]
    assert got[:3] == want[:3]
    for mine, theirs in zip(got[3:], want[3:], strict=True):
        assert AGE.search(mine) and AGE.search(theirs)
        assert AGE.sub("", mine) == AGE.sub("", theirs)


def test_tabwriter_matches_kubectl_padding_and_remembers_widths() -> None:
    out = io.StringIO()
    writer = TabWriter(out)
    writer.write([["NAME", "OK", "AGE"], ["a", "1", "5h"]])
    writer.write([["a-longer-name", "1", "1s"]])
    writer.write([["b", "1", "2s"]])
    assert out.getvalue().splitlines() == [
        "NAME   OK    AGE",
        "a      1     5h",
        "a-longer-name   1     1s",
        "b               1     2s",
    ]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-5, "<invalid>"), (0, "0s"), (119, "119s"), (150, "2m30s"), (600, "10m"), (3 * 3600, "3h"),
     (3 * 3600 + 60, "3h1m"), (30 * 3600, "30h"), (50 * 3600, "2d2h"), (400 * 86400, "400d"),
     (3 * 365 * 86400, "3y"), (10 * 365 * 86400, "10y")],
)  # fmt: skip
def test_ages_read_as_kubectl_writes_them(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_cells_are_terminal_safe_and_dates_become_ages() -> None:
    assert cell_text("ok\x1b[2J") == "ok\\x1b[2J"
    assert cell_text(None) == "<none>" and cell_text(True) == "true" and cell_text(3.0) == "3"
    assert cell_text(CREATED, "date") == "2d"


async def test_watch_all_contexts_follows_a_context_added_later(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """``watch --all-contexts``: a CONTEXT column; a context the kubeconfig gains shows its
    rows; a deletion prints the object's last row, as ``kubectl get -w`` does."""
    out, err = Output(), io.StringIO()
    async with FakeCluster(tokens={TOKEN}, tls=True, name="later") as later:
        later.create("pods", aged(make_pod("later-pod")))
        path = write_kubeconfig(tmp_path / "config", {"fake": cluster})
        argv = ["watch", "pods", "--all-contexts", "--kubeconfig", str(path)]
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: run(argv, stdout=out, stderr=err))
            await out.wait_for(r"^CONTEXT +NAME +READY +STATUS +RESTARTS +AGE\n")
            await out.wait_for(r"\nfake +web-1 +1/1 +Running +0 +2d\n")
            write_kubeconfig(path, {"fake": cluster, "later": later})
            await out.wait_for(r"\nlater +later-pod +1/1 +Running +0 +2d\n")
            later.delete("pods", "default", "later-pod")
            await out.wait_for(r"\nlater +later-pod +1/1 +Running +0 +2d\n(.*\n)*later +later-pod ")
            tg.cancel_scope.cancel()
    lines = out.getvalue().splitlines()
    starts = {m.end() for line in lines if (m := re.match(r"\S+ +", line))}
    assert starts == {len("CONTEXT   ")}  # one alignment, kubectl's 3 spaces of padding
    assert sum(line.split()[:2] == ["fake", "web-1"] for line in lines) == 1  # shown once
    assert err.getvalue() == ""


async def test_get_watch_names_json_lines(cluster: FakeCluster, kubeconfig: Path) -> None:
    """``get -w NAME -o json``: that object's changes only, one JSON record a line."""
    out = Output()
    argv = ["get", "pods", "web-1", "-w", "-o", "json", "--kubeconfig", str(kubeconfig)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: run(argv, stdout=out))
        await out.wait_for(r'"name":"web-1"')
        cluster.create("pods", aged(make_pod("web-2")))
        pod = cluster.get("pods", "default", "web-1")
        assert pod is not None
        pod["metadata"]["labels"]["touched"] = "yes"
        cluster.update("pods", pod)
        await out.wait_for(r'"touched":"yes"')
        tg.cancel_scope.cancel()
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["type"], r["object"]["metadata"]["name"]) for r in records] == [
        ("ADDED", "web-1"),
        ("MODIFIED", "web-1"),
    ]
