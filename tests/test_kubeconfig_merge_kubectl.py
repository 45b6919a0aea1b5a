"""Our merge against the real thing: ``kubectl config view --merge`` on random file sets.

Skipped when kubectl is not on PATH. Names are drawn from small pools so that files overlap on
context, cluster and user names; some files in each list do not exist, some set an empty or a
dangling current-context, some contexts point at missing clusters or users, and a few sets hold
a broken file (kubectl then fails, and so must :func:`load_kubeconfig`).

Names are chosen so that YAML 1.1 and 1.2 agree on them: kubectl (go-yaml) reads a bare ``y``
or ``n`` as a boolean, PyYAML as a string.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubemux._errors import KubeconfigError
from kubemux._kubeconfig.load import KubeconfigSnapshot, load_kubeconfig

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

SETS = 100
CONTEXTS = [f"ctx-{c}" for c in "abcdefg"]
CLUSTERS = [f"cl-{i}" for i in range(5)]
USERS = [f"user-{i}" for i in range(5)]


def _random_file(rng: random.Random, tag: str) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    clusters = []
    for name in rng.sample(CLUSTERS, rng.randint(0, 4)):
        body: dict[str, Any] = {}
        if rng.random() < 0.9:
            body["server"] = f"https://{tag}.{name}.example:6443"
        if rng.random() < 0.5:
            body["proxy-url"] = f"http://proxy.{tag}"  # proves entries are not merged by field
        clusters.append({"name": name, "cluster": body})
    users = []
    for name in rng.sample(USERS, rng.randint(0, 4)):
        body = {"token": f"token-{tag}-{name}"} if rng.random() < 0.8 else {}
        users.append({"name": name, "user": body})
    contexts = []
    for name in rng.sample(CONTEXTS, rng.randint(0, 5)):
        body = {"cluster": rng.choice([*CLUSTERS, "cl-missing"])}
        roll = rng.random()
        if roll < 0.75:
            body["user"] = rng.choice([*USERS, "user-missing"])
        elif roll < 0.85:
            body["user"] = ""
        if rng.random() < 0.5:
            body["namespace"] = f"ns-{tag}"
        contexts.append({"name": name, "context": body})
    for key, entries in (("clusters", clusters), ("users", users), ("contexts", contexts)):
        if entries or rng.random() < 0.5:
            doc[key] = entries
    roll = rng.random()
    if roll < 0.3:
        doc["current-context"] = rng.choice(CONTEXTS)
    elif roll < 0.5:
        doc["current-context"] = ""
    return doc


def _make_set(rng: random.Random, folder: Path) -> tuple[list[Path], bool]:
    files: list[Path] = []
    broken = False
    for i in range(rng.randint(1, 4)):
        path = folder / f"dir{i}" / f"config-{i}"
        files.append(path)
        if rng.random() < 0.15:
            continue  # listed but missing
        path.parent.mkdir(parents=True)
        if rng.random() < 0.04:
            path.write_text("contexts:\n- name: x\n  context: {cluster: [\n")
            broken = True
        else:
            flow = rng.random() < 0.3
            path.write_text(yaml.safe_dump(_random_file(rng, f"f{i}"), default_flow_style=flow))
    return files, broken


def _kubectl_view(files: list[Path], home: Path) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "KUBECONFIG": os.pathsep.join(str(f) for f in files),
    }
    return subprocess.run(
        [KUBECTL, "config", "view", "--merge", "-o", "json", "--raw"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _compare(
    ours: KubeconfigSnapshot, theirs: dict[str, Any], label: str, seen: collections.Counter[str]
) -> None:
    clusters = {c["name"]: c["cluster"] for c in theirs.get("clusters") or []}
    users = {u["name"]: u["user"] for u in theirs.get("users") or []}
    contexts = {c["name"]: c["context"] for c in theirs.get("contexts") or []}

    assert set(ours.contexts) | set(ours.invalid) == set(contexts), label
    assert not set(ours.contexts) & set(ours.invalid), label
    assert ours.current_context == (theirs.get("current-context") or None), label

    for name, body in contexts.items():
        cluster_name = body.get("cluster", "")
        user_name = body.get("user", "")
        if name in ours.invalid:
            reason = ours.invalid[name]
            seen[reason.split()[0]] += 1
            if cluster_name not in clusters:
                assert reason == f"cluster {cluster_name!r} not found", label
            elif user_name and user_name not in users:
                assert reason == f"user {user_name!r} not found", label
            else:
                assert reason == "no server", label
                assert not clusters[cluster_name].get("server"), label
            continue
        seen["valid"] += 1
        seen["anonymous" if not user_name else "with-user"] += 1
        context = ours.contexts[name]
        assert context.cluster_name == cluster_name, label
        assert context.user_name == user_name, label
        assert context.namespace == (body.get("namespace") or None), label
        cluster = clusters[cluster_name]
        assert context.server == cluster["server"], label
        ours_cluster = context.config["clusters"][0]["cluster"]
        assert ours_cluster.get("proxy-url") == cluster.get("proxy-url"), label
        if user_name:
            ours_user = context.config["users"][0]["user"]
            assert ours_user.get("token") == users[user_name].get("token"), label


def test_merge_matches_kubectl(tmp_path: Path) -> None:
    rng = random.Random(20240611)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    compared = broken_sets = 0
    seen: collections.Counter[str] = collections.Counter()
    sets = [_make_set(rng, tmp_path / f"set{index}") for index in range(SETS)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # kubectl runs mostly wait
        results = list(pool.map(lambda made: _kubectl_view(made[0], home), sets))
    for index, ((files, broken), result) in enumerate(zip(sets, results, strict=True)):
        label = f"set {index}: " + ", ".join(
            f"{f.name}{'' if f.exists() else ' (missing)'}" for f in files
        )
        if broken:
            broken_sets += 1
            assert result.returncode != 0, label
            with pytest.raises(KubeconfigError, match="invalid YAML at line 4"):
                load_kubeconfig(files)
            continue
        assert result.returncode == 0, f"{label}: {result.stderr}"
        theirs = json.loads(result.stdout)
        if not any(f.exists() for f in files):
            assert not theirs.get("contexts"), label
            with pytest.raises(KubeconfigError, match=r"no kubeconfig file found|does not exist"):
                load_kubeconfig(files)
            continue
        _compare(load_kubeconfig(files), theirs, label, seen)
        compared += 1
    # the seed gives a healthy mix; keep it that way if the generator changes
    assert compared >= 70
    assert broken_sets >= 1
    assert min(seen[k] for k in ("valid", "anonymous", "with-user", "cluster", "user", "no")) >= 5
    print(f"compared {compared} sets, {broken_sets} broken: {dict(seen)}")
