"""A huge Table cell (issue 18, point 8): ``kubemux get`` cuts a printed cell to
``MAX_CELL_WIDTH`` characters with ``...``, so one cell cannot widen every line;
``-o json|yaml`` print the objects whole."""

from __future__ import annotations

import io
import json
from pathlib import Path

import anyio
import pytest
import yaml

from kubemux.cli import run
from kubemux.cli._output import MAX_CELL_WIDTH, TabWriter, cell_text, fit_cell, table
from kubemux.testing import FakeCluster, write_kubeconfig

TIMEOUT = 60
HUGE = 30 * 1024 * 1024  # the 30 MB cell of the issue


def test_a_cell_is_cut_to_the_cap_with_an_ellipsis() -> None:
    assert MAX_CELL_WIDTH == 1000
    assert fit_cell("x" * 1000) == "x" * 1000  # at the cap: whole
    cut = fit_cell("x" * 1001)
    assert len(cut) == 1000 and cut.endswith("...") and cut.startswith("x" * 997)
    # the cap counts what is printed: escapes are still escaped, and count
    escaped = fit_cell("\x1b" * 600)
    assert len(escaped) <= 1000 and "\x1b" not in escaped and escaped.endswith("...")
    assert fit_cell("ok\x1b[2J") == "ok\\x1b[2J"


def test_one_huge_cell_does_not_widen_every_line() -> None:
    out = io.StringIO()
    TabWriter(out).write(
        [["NAME", "BLOB", "SIZE"], ["a", "y" * HUGE, "1"], ["b", "small", "2"], ["c", "z", "3"]]
    )
    lines = out.getvalue().splitlines()
    assert len(out.getvalue()) < 5 * (MAX_CELL_WIDTH + 20)
    assert lines[0] == "NAME   BLOB" + " " * (MAX_CELL_WIDTH + 3 - 4) + "SIZE"
    assert lines[1] == "a      " + "y" * (MAX_CELL_WIDTH - 3) + "...   1"
    assert all(len(line) <= MAX_CELL_WIDTH + 20 for line in lines)
    # the last column is cut too, and status tables as well
    out = io.StringIO()
    TabWriter(out).write([["NAME", "BLOB"], ["a", "y" * HUGE]])
    assert len(out.getvalue()) < 2 * (MAX_CELL_WIDTH + 20)
    assert len(table(["A", "B"], [["y" * HUGE, "b"]])) < 3 * (MAX_CELL_WIDTH + 20)
    assert len(cell_text({"k": "v" * HUGE})) == MAX_CELL_WIDTH


@pytest.mark.parametrize("output", ["table", "wide", "json", "yaml"])
async def test_get_prints_a_30_mb_cell_cut_and_the_objects_whole(
    tmp_path: Path, output: str
) -> None:
    size = HUGE if output != "yaml" else 1024 * 1024  # PyYAML takes 30 s over 30 MB
    blob = "b" * size
    async with FakeCluster() as cluster:
        cluster.add_crd(
            "example.com",
            "blobs",
            "Blob",
            printer_columns=[
                {"name": "Data", "type": "string", "jsonPath": ".spec.data"},
                {"name": "Size", "type": "string", "jsonPath": ".spec.size"},
            ],
        )
        for name, data in (("huge", blob), ("small", "tiny")):
            cluster.create(
                "blobs.example.com",
                {
                    "apiVersion": "example.com/v1",
                    "kind": "Blob",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"data": data, "size": str(len(data))},
                },
            )
        path = write_kubeconfig(tmp_path / "config", {"c": cluster})
        argv = ["get", "blobs", "--kubeconfig", str(path)]
        if output != "table":
            argv += ["-o", output]
        out, err = io.StringIO(), io.StringIO()
        with anyio.fail_after(TIMEOUT):
            code = await run(argv, stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    text = out.getvalue()
    if output in ("json", "yaml"):
        doc = json.loads(text) if output == "json" else yaml.safe_load(text)
        datas = {i["metadata"]["name"]: i["spec"]["data"] for i in doc["items"]}
        assert datas == {"huge": blob, "small": "tiny"}  # exact, not cut
        return
    lines = text.splitlines()
    assert len(text) < 4 * (MAX_CELL_WIDTH + 40), len(text)  # not 60 MB
    assert lines[0].split() == ["NAME", "DATA", "SIZE"]
    huge = next(line for line in lines if line.startswith("huge "))
    assert "b" * (MAX_CELL_WIDTH - 3) + "..." in huge and huge.endswith(str(HUGE))
    small = next(line for line in lines if line.startswith("small "))
    assert "tiny" in small and len(small) < MAX_CELL_WIDTH + 40
