"""``kubemux get``'s kubectl output flags against kubectl 1.33, line by line, on the same
FakeCluster (the cluster and kubeconfig of tests/test_cli_get.py): ``-o jsonpath=``,
``-o custom-columns=``, ``--no-headers``, ``-L``; and the template language alone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kubectl_support import run_kubectl
from kubemux.cli._formats import label_header, request_timeout
from kubemux.cli._jsonpath import JSONPathError, Template, go_text
from test_cli_get import cluster, kubeconfig, kubemux

__all__ = ["cluster", "kubeconfig"]  # the fixtures, shared


def kubectl_133() -> str | None:
    found = shutil.which("kubectl")
    if not found:
        return None
    pinned = os.path.join(os.path.dirname(os.path.realpath(found)), "kubectl.1.33")
    return pinned if os.access(pinned, os.X_OK) else None


KUBECTL = kubectl_133()
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl 1.33 not found")


@needs_kubectl
@pytest.mark.parametrize(
    "argv",
    [
        ["get", "pods", "-o", "jsonpath={.items[*].metadata.name}"],
        [
            "get",
            "pods",
            "-A",
            "-o",
            'jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{"\\n"}{end}',
        ],
        ["get", "pods", "-o", "jsonpath={.items[0].metadata.labels}"],
        ["get", "pods", "-o", "jsonpath={.items[*].spec.containers[0].ports}"],
        ["get", "pods", "-o", 'jsonpath={.items[?(@.metadata.name=="web-1")].status.phase}'],
        ["get", "pods", "-o", "jsonpath={.items[-1:].metadata.name} {.kind} {.nope}"],
        ["get", "pods", "web-1", "-o", "jsonpath={.metadata.name} {.spec.containers[*].image}"],
        ["get", "deploy", "-o", "jsonpath={..replicas}"],
        ["get", "wd", "-o", "jsonpath={range .items[*]}{.spec.size}:{.spec.color} {end}"],
        ["get", "pods", "-o", "custom-columns=NAME:.metadata.name,Labels:.metadata.labels"],
        [
            "get",
            "pods",
            "-A",
            "-o",
            "custom-columns=NS:.metadata.namespace,C:.spec.containers[*].name,X:.nope",
        ],
        ["get", "wd", "-o", "custom-columns=N:{.metadata.name},SIZE:spec.size", "--no-headers"],
        ["get", "pods", "--no-headers"],
        ["get", "pods", "-A", "-o", "wide", "--no-headers"],
        ["get", "pods", "-L", "app"],
        ["get", "pods", "-A", "-L", "app,app.kubernetes.io/name", "-L", "tier"],
        ["get", "deploy", "-L", "app", "--no-headers"],
    ],
    ids=lambda argv: " ".join(argv),
)
async def test_output_flags_print_what_kubectl_prints(kubeconfig: Path, argv: list[str]) -> None:
    assert KUBECTL is not None
    want = await run_kubectl(KUBECTL, kubeconfig, *argv, cache="kubectl-133", run_timeout=20)
    got = await kubemux(*argv, "--kubeconfig", str(kubeconfig))
    assert got == want


@needs_kubectl
@pytest.mark.parametrize(
    "argv",
    [
        ["get", "pods", "-o", "jsonpath={.items[*].metadata.name"],
        ["get", "pods", "-o", "custom-columns=NAME"],
        ["get", "pods", "-o", "custom-columns="],
    ],
    ids=lambda argv: " ".join(argv),
)
async def test_bad_templates_fail_as_in_kubectl(kubeconfig: Path, argv: list[str]) -> None:
    assert KUBECTL is not None
    code, _, err = await run_kubectl(KUBECTL, kubeconfig, *argv, cache="kubectl-133")
    got = await kubemux(*argv, "--kubeconfig", str(kubeconfig))
    assert code == got[0] == 1 and got[1] == ""
    assert err.startswith("error: ") and got[2].startswith("kubemux: error: ")
    assert got[2].removeprefix("kubemux: error: ") == err.removeprefix("error: ")


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{.a}", "1"),
        ("{.f}", "0.5"),
        ("{.big}", "1e+21"),
        ("{.whole}", "3"),
        ("{.t} {.n}", "true null"),
        ("{.m}", '{"x":[1,"y"]}'),
        ("{.l[1:]}", "b c"),
        ("{.l[*]}", "a b c"),
        ("{.l[0,2]}", "a c"),
        ("{range .l[*]}[{@}]{end}", "[a][b][c]"),
        ("{range .none[*]}x{end}after", ""),
        ('{"\\t"}{.a}', "\t1"),
        ("{['a']}", "1"),
        ("{.m.x[?(@==1)]}", "1"),
    ],
)
def test_template_values_as_go_prints_them(template: str, expected: str) -> None:
    data = {"a": 1, "f": 0.5, "big": 1e21, "whole": 3.0, "t": True, "n": None}
    data |= {"m": {"x": [1, "y"]}, "l": ["a", "b", "c"]}
    assert Template(template).render(data) == expected


def test_hostile_templates_are_refused_not_run() -> None:
    with pytest.raises(JSONPathError):
        Template("{" * 20_000)
    with pytest.raises(JSONPathError, match="unclosed action"):
        Template("{.a")
    deep: dict[str, object] = {}
    node = deep
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    with pytest.raises(JSONPathError, match="nested too deeply"):
        Template("{..a}").render(deep)
    assert go_text({"b": 1, "a": [True]}) == "map[a:[true] b:1]"


def test_labels_and_durations_as_kubectl_reads_them() -> None:
    assert label_header("app.kubernetes.io/name") == "NAME"
    assert label_header("tier") == "TIER"
    assert request_timeout("1m30s") == 90.0
    assert request_timeout("500ms") == 0.5
    assert request_timeout("5") == 5.0
    assert request_timeout("0") == 0.0
