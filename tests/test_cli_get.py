"""``kubemux get`` and ``get -w`` against kubectl 1.32, line by line, on the same FakeCluster.

Objects are created two days ago (fixed timestamps), so the server's AGE cells read "2d"
for both; a row created during a test is compared with its AGE loosely. kubectl sends
credentials only to https servers: the cluster is TLS with a token.

The cluster serves every kind of kubectl's ``all`` category, and two CRDs in it (widgets
also in ``toys``; gadgets at two versions, to be listed once): ``get all``, comma lists and
categories are compared with kubectl too.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from kubemux.cli import run
from kubemux.cli._output import TabWriter, cell_text, human_duration
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from kubemux.testing._hostile import HostileServer
from support import TIMEOUT
from test_cli import Output
from test_fake_cluster_kubectl import KUBECTL, kubectl_process, kubectl_result

pytestmark = pytest.mark.skipif(KUBECTL == "kubectl", reason="kubectl 1.32 not found")

TOKEN = "get-token"
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
            categories=["all", "toys"],
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
        fake.add_crd("example.com", "gadgets", "Gadget", versions=("v1", "v2"), categories=["all"])
        gadget = {"apiVersion": "example.com/v2", "kind": "Gadget", "metadata": {"name": "g1"}}
        gadget["metadata"]["namespace"] = "data"
        fake.create("gadgets.example.com", aged(gadget))
        fake.create("horizontalpodautoscalers.v2.autoscaling", aged(autoscaler("web")))
        yield fake


def autoscaler(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": 3,
        },
    }


@pytest.fixture
def kubeconfig(cluster: FakeCluster, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", {"fake": cluster})


async def kubemux(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with anyio.fail_after(2 * TIMEOUT):
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
        # comma lists: one table per resource, kind/name when several kinds are asked for
        ["get", "pods,cm"],
        ["get", "pods,deployments.apps", "-A"],
        ["get", "pods,nodes"],
        ["get", "pods,cm", "-n", "data"],
        ["get", "pods,deploy,pods"],
        ["get", "pods,po"],
        ["get", "deploy,pods", "-o", "wide", "-A"],
        ["get", "pods,cm", "-n", "empty"],
        ["get", "pods,nodes", "-n", "empty"],
        ["get", "pods,deploy,wd", "-o", "name", "-A"],
        # categories, in discovery order; kinds without objects left out
        ["get", "all"],
        ["get", "all", "-A"],
        ["get", "all", "-n", "data"],
        ["get", "all", "-n", "empty"],
        ["get", "all", "-o", "name", "-A"],
        ["get", "all,cm", "-A", "-o", "wide"],
        ["get", "toys"],
        ["get", "pods,toys"],
        ["get", "hpa"],
        ["get", "crd"],
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


@pytest.mark.parametrize(
    "argv",
    [
        ["get", "pods,x,cm"],
        ["get", "x,y"],
        ["get", "ALL"],
        ["get", "pods,"],
        ["get", ",pods"],
        ["get", "pods,deploy", "-w"],
        ["get", "all", "-w"],
        ["get", "pods,po", "-w"],
    ],
    ids=lambda argv: " ".join(argv),
)
async def test_get_errors_as_kubectl_words_them(kubeconfig: Path, argv: list[str]) -> None:
    """An unknown name among known ones (or -w with several): kubectl's error, one line,
    and nothing listed."""
    code, out, err = await kubectl_result(kubeconfig, *argv)
    got = await kubemux(*argv, "--kubeconfig", str(kubeconfig), "--duration", "5")
    assert (code, out) == (1, "") and err.startswith("error: ") and err.count("\n") == 1
    assert got[:2] == (1, "") and got[2].count("\n") == 1
    assert got[2].startswith("kubemux: " + err.rstrip())


async def test_get_lists_nothing_before_an_unknown_name(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    """Hundreds of names, one unknown: the error names it, and nothing was listed."""
    names = ",".join(["pods", "deploy", "cm", "svc", "wd"] * 100 + ["nope\x1b[2J", "pods"])
    cluster.clear_requests()
    code, out, err = await kubemux("get", names, "--kubeconfig", str(kubeconfig))
    assert (code, out) == (1, "")
    assert err == 'kubemux: error: the server doesn\'t have a resource type "nope\\x1b[2J"\n'
    assert not [r for r in cluster.requests if r.path.startswith("/api/v1/namespaces")]


async def test_get_lists_each_resource_once(tmp_path: Path) -> None:
    """A category of more resources than are listed at once, named with hundreds of
    duplicates (short names, the category again): each resource is listed once, its table
    in discovery order if it has objects; names from the cluster are shown terminal-safe.
    (Each context's requests stay rate-limited: a category of hundreds of resources takes
    its time, without a request storm.)"""
    async with FakeCluster(tokens={TOKEN}, tls=True, name="many") as fake:
        for i in range(12):
            fake.add_crd("many.example.com", f"things{i}", f"Thing{i}", categories=["lots"])
        for i in (7, 11):
            obj = {"metadata": {"name": f"t-\x1b]0;{i}", "namespace": "default"}}
            fake.create(f"things{i}.many.example.com", aged({"kind": f"Thing{i}", **obj}))
        path = write_kubeconfig(tmp_path / "config", {"many": fake})
        fake.clear_requests()
        names = ",".join(["lots", "things11.many.example.com", "thing7"] * 200)
        code, out, err = await kubemux("get", names, "--kubeconfig", str(path))
        lists = [r.path.rpartition("/")[2] for r in fake.requests if not r.is_watch]
    assert (code, err) == (0, "")
    assert sorted(lists) == sorted({"api", "apis"} | {f"things{i}" for i in range(12)})
    seven, eleven = (f"thing{i}.many.example.com/t-\\x1b]0;{i}" for i in (7, 11))
    assert out.splitlines() == [
        "NAME".ljust(len(seven) + 3) + "AGE",
        seven + "   2d",
        "",
        "NAME".ljust(len(eleven) + 3) + "AGE",
        eleven + "   2d",
    ]


async def test_get_json_and_yaml_of_several_kinds_is_one_list(kubeconfig: Path) -> None:
    """``-o json|yaml`` of several kinds: the one List kubectl prints (compared as data)."""
    for argv in (
        ["get", "pods,deploy", "-o", "json"],
        ["get", "all", "-A", "-o", "yaml"],
        ["get", "pods,deploy", "web", "-o", "json"],  # one item, still a List
        ["get", "pods,cm,deploy", "-n", "empty", "-o", "json"],
    ):
        want = await kubectl_result(kubeconfig, *argv)
        got = await kubemux(*argv, "--kubeconfig", str(kubeconfig))
        assert (got[0], got[2]) == (want[0], want[2])
        assert yaml.safe_load(got[1]) == yaml.safe_load(want[1])
        assert yaml.safe_load(got[1])["kind"] == "List"


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


async def test_get_all_across_contexts(cluster: FakeCluster, tmp_path: Path) -> None:
    """``get all`` (and a comma list) with several contexts: one table per kind, CONTEXT
    first, a kind's rows from every context; a context's cells are kubectl's."""
    async with FakeCluster(tokens={TOKEN}, tls=True, name="other") as other:
        other.create("pods", aged(make_pod("other-pod")))
        other.create("deployments.apps", deployment("other-deploy"))
        path = write_kubeconfig(tmp_path / "config", {"fake": cluster, "second": other})
        code, out, err = await kubemux("get", "all", "--all-contexts", "--kubeconfig", str(path))
        assert (code, err) == (0, "")
        _, single, _ = await kubectl_result(path, "get", "all", "--context", "fake")
        code, names, err = await kubemux(
            "get", "deploy,pods", "-o", "name", "--context", "second", "--context", "fake",
            "--kubeconfig", str(path),
        )  # fmt: skip
        assert (code, err) == (0, "")
    tables = [t.splitlines() for t in out.split("\n\n")]
    assert [t[0].split()[:2] for t in tables] == [["CONTEXT", "NAME"]] * 4
    assert [t[1].split()[1] for t in tables] == [  # no gadgets: they live in "data"
        "pod/a-much-longer-pod-name",
        "deployment.apps/frontend-with-long-name",
        "horizontalpodautoscaler.autoscaling/web",
        "widget.example.com/large-widget",
    ]
    assert [line.split()[:2] for line in tables[0][1:]] == [
        ["fake", "pod/a-much-longer-pod-name"],
        ["fake", "pod/web-1"],
        ["second", "pod/other-pod"],
    ]
    # fake's rows are kubectl's, after the CONTEXT column (columns aligned per table)
    mine = [line.split()[1:] for t in tables for line in t[1:] if line.startswith("fake ")]
    theirs = [line.split() for line in single.splitlines() if line and not line.startswith("NAME")]
    assert mine == theirs
    assert names.splitlines() == [
        "deployment.apps/other-deploy",
        "deployment.apps/frontend-with-long-name",
        "deployment.apps/web",
        "pod/other-pod",
        "pod/a-much-longer-pod-name",
        "pod/web-1",
    ]


async def test_get_a_float_cell_beyond_int64_prints_as_kubectl(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    """A ``number`` cell of 1e308 (issue 18): printed as kubectl prints it, no traceback."""
    cluster.add_crd(
        "example.com",
        "gauges",
        "Gauge",
        printer_columns=[{"name": "Value", "type": "number", "jsonPath": ".spec.value"}],
    )
    for name, value in (("huge", 1e308), ("whole", 2.0), ("half", 0.5), ("tiny", -1e300)):
        obj = {"metadata": {"name": name, "namespace": "default"}, "spec": {"value": value}}
        cluster.create("gauges.example.com", aged(obj))
    want = await kubectl_result(kubeconfig, "get", "gauges")
    got = await kubemux("get", "gauges", "--kubeconfig", str(kubeconfig))
    assert got == want
    assert "1e+308" in got[1]


async def test_get_all_contexts_with_a_poisoned_row(cluster: FakeCluster, tmp_path: Path) -> None:
    """A row with a 400-digit cell in one context (issue 18): every context's rows are
    printed (the number reads as inf) and the command succeeds."""
    async with HostileServer("hostile-table", poison=("big-number",)) as bad:
        path = write_kubeconfig(tmp_path / "config", {"fake": cluster, "bad": bad.server})
        code, out, err = await kubemux(
            "get", "pods", "-A", "--all-contexts", "--kubeconfig", str(path)
        )
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()[1:]]
    assert {(r[0], r[2]) for r in rows} >= {
        ("fake", "web-1"),
        ("fake", "db-1"),
        ("bad", "p-0"),
        ("bad", "big-number"),
    }
    big = next(r for r in rows if r[2] == "big-number")
    assert big[-1] == "inf"


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
            with anyio.fail_after(2 * TIMEOUT):
                while kubectl_out.count(b"\n") < 3:
                    kubectl_out += await proc.stdout.read(4096)
                await out.wait_for(r"^(.*\n){3}")
            assert out.getvalue() == kubectl_out.decode()  # header and current rows
            cluster.create("pods", make_pod("an-even-longer-name-for-a-new-pod", phase="Pending"))
            cluster.delete("pods", "default", "web-1")
            with anyio.fail_after(2 * TIMEOUT):
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


async def test_get_watch_from_nothing_prints_as_kubectl_does(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    """An empty start: ``kubectl get -w`` prints nothing, not even "No resources found",
    and the header comes with the first row; kubemux's output is the same, stderr empty."""
    out, err = Output(), io.StringIO()
    watches = "/api/v1/namespaces/empty/pods"
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(kubeconfig.parent / "c"),
        "get", "pods", "-w", "-n", "empty",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    try:
        async with anyio.create_task_group() as tg:
            argv = ["get", "pods", "-w", "-n", "empty", "--kubeconfig", str(kubeconfig)]
            tg.start_soon(lambda: run(argv, stdout=out, stderr=err))
            await cluster.wait_for(  # both listed nothing and watch
                lambda: sum(r.is_watch and r.path == watches for r in cluster.requests) >= 2,
                timeout=2 * TIMEOUT,
            )
            assert out.getvalue() == err.getvalue() == ""
            cluster.create("pods", make_pod("new-pod", "empty"))
            kubectl_out = b""
            with anyio.fail_after(2 * TIMEOUT):
                while kubectl_out.count(b"\n") < 2:
                    kubectl_out += await proc.stdout.read(4096)
            await out.wait_for(r"^(.*\n){2}")
            tg.cancel_scope.cancel()
    finally:
        proc.kill()
        kubectl_err = await proc.stderr.read()
        await proc.wait()
    assert kubectl_err == b"" and err.getvalue() == ""
    want, got = kubectl_out.decode().splitlines(), out.getvalue().splitlines()
    assert want[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert got[0] == want[0]
    assert AGE.search(got[1]) and AGE.search(want[1])
    assert AGE.sub("", got[1]) == AGE.sub("", want[1])


async def test_get_watch_a_category_of_one_resource(kubeconfig: Path) -> None:
    """``get -w toys``: the one resource the category stands for, as kubectl watches it."""
    out = Output()
    async with kubectl_process(kubeconfig, "get", "toys", "-w") as proc:
        assert proc.stdout is not None
        async with anyio.create_task_group() as tg:
            argv = ["get", "toys", "-w", "--kubeconfig", str(kubeconfig)]
            tg.start_soon(lambda: run(argv, stdout=out))
            kubectl_out = b""
            with anyio.fail_after(2 * TIMEOUT):
                while kubectl_out.count(b"\n") < 3:
                    kubectl_out += await proc.stdout.read(4096)
            await out.wait_for(r"^(.*\n){3}")
            tg.cancel_scope.cancel()
    assert out.getvalue() == kubectl_out.decode()
    assert out.getvalue().startswith("NAME           SIZE   COLOR   AGE\n")


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
