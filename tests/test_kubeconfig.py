"""Loading and merging kubeconfig files: kubemux._kubeconfig.load (sync, no event loop)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubemux._errors import ContextNotFound, KubeconfigError
from kubemux._kubeconfig.load import (
    ContextConfig,
    KubeconfigLoader,
    KubeconfigSnapshot,
    kubeconfig_paths,
    load_kubeconfig,
)
from kubemux._kubeconfig.yamlread import _YamlLoader as _FullLoader
from kubemux._kubeconfig.yamlread import load_yaml as _load_yaml

SECRET = "s3cr3t-token-value"


def kc(
    contexts: list[dict[str, Any]] | None = None,
    clusters: list[dict[str, Any]] | None = None,
    users: list[dict[str, Any]] | None = None,
    current: str | None = None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    if clusters is not None:
        doc["clusters"] = clusters
    if users is not None:
        doc["users"] = users
    if contexts is not None:
        doc["contexts"] = contexts
    if current is not None:
        doc["current-context"] = current
    return doc


def ctx(name: str, cluster: str, user: str | None = None, namespace: str | None = None) -> Any:
    body: dict[str, Any] = {"cluster": cluster}
    if user is not None:
        body["user"] = user
    if namespace is not None:
        body["namespace"] = namespace
    return {"name": name, "context": body}


def cluster(name: str, server: str | None = "https://k8s.example:6443", **extra: Any) -> Any:
    body = dict(extra)
    if server is not None:
        body["server"] = server
    return {"name": name, "cluster": body}


def user(name: str, **fields: Any) -> Any:
    return {"name": name, "user": fields}


def simple(*names: str, server: str = "https://k8s.example", token: str = SECRET) -> Any:
    """One cluster and one user per context."""
    return kc(
        contexts=[ctx(n, f"c-{n}", f"u-{n}") for n in names],
        clusters=[cluster(f"c-{n}", f"{server}/{n}") for n in names],
        users=[user(f"u-{n}", token=token) for n in names],
    )


def write(path: Path, doc: Any, **dump_options: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, **dump_options))
    return path


# --------------------------------------------------------------------------- paths


def test_paths_default_is_home_kube_config(tmp_path: Path) -> None:
    assert kubeconfig_paths() == [tmp_path / "home" / ".kube" / "config"]


def test_paths_from_env_split_dedup_and_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(["", a, "rel", "", b, a, "rel"]))
    assert kubeconfig_paths() == [Path(a), tmp_path / "rel", Path(b)]


def test_paths_env_with_only_empty_entries_falls_back_to_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", os.pathsep)
    assert kubeconfig_paths() == [tmp_path / "home" / ".kube" / "config"]


def test_paths_explicit_forms(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert kubeconfig_paths(a) == [a]
    assert kubeconfig_paths(str(a)) == [a]
    assert kubeconfig_paths(f"{a}{os.pathsep}{b}{os.pathsep}{a}") == [a, b]
    assert kubeconfig_paths([b, str(a), b]) == [b, a]
    assert kubeconfig_paths("~/x") == [tmp_path / "home" / "x"]
    assert kubeconfig_paths([]) == []


# --------------------------------------------------------------------------- merging


def test_merge_first_file_wins_per_name_and_whole_entries(tmp_path: Path) -> None:
    a = write(
        tmp_path / "a" / "config",
        kc(
            contexts=[ctx("x", "c1", "u1", "ns-a"), ctx("anon", "c1")],
            clusters=[cluster("c1", "https://a")],
            users=[user("u1", token="tok-a")],
            current="",
        ),
    )
    b = write(
        tmp_path / "b" / "config",
        kc(
            contexts=[ctx("x", "c2", "u2"), ctx("y", "c1", "u1", "ns-b"), ctx("z", "c2", "u2")],
            clusters=[
                cluster("c1", "https://b", **{"proxy-url": "http://proxy"}),
                cluster("c2", "https://b2"),
            ],
            users=[user("u1", username="bob", password="pw"), user("u2", token="tok-b")],
            current="y",
        ),
    )
    snap = load_kubeconfig([a, tmp_path / "missing", b])
    assert list(snap.contexts) == ["x", "anon", "y", "z"]
    x = snap.contexts["x"]
    assert (x.cluster_name, x.user_name, x.namespace, x.server) == ("c1", "u1", "ns-a", "https://a")
    assert x.source == str(a)
    y = snap.contexts["y"]
    # y comes from b, but its cluster and user are a's entries, whole: no proxy-url, no username
    assert (y.server, y.namespace, y.source) == ("https://a", "ns-b", str(b))
    assert y.config["clusters"][0]["cluster"] == {"server": "https://a"}
    assert y.config["users"][0]["user"] == {"token": "tok-a"}
    assert snap.contexts["z"].server == "https://b2"
    assert snap.current_context == "y"  # a's empty current-context does not count
    assert snap.files == (str(a), str(tmp_path / "missing"), str(b))
    assert snap.missing == (str(tmp_path / "missing"),)
    assert snap.errors == {}


def test_current_context_is_reported_even_if_missing(tmp_path: Path) -> None:
    a = write(tmp_path / "a", simple("one") | {"current-context": "nope"})
    snap = load_kubeconfig(a)
    assert snap.current_context == "nope"
    assert "nope" not in snap.contexts


def test_no_current_context_is_none(tmp_path: Path) -> None:
    assert load_kubeconfig(write(tmp_path / "a", simple("one"))).current_context is None


def test_relative_paths_resolve_against_the_defining_files_folder(tmp_path: Path) -> None:
    # The context comes from a/, its cluster from b/ and its user from c/.
    a = write(tmp_path / "a" / "config", kc(contexts=[ctx("x", "cl", "us")]))
    b = write(
        tmp_path / "b" / "config",
        kc(clusters=[cluster("cl", **{"certificate-authority": "certs/ca.crt"})]),
    )
    c = write(
        tmp_path / "c" / "config",
        kc(
            users=[
                user(
                    "us",
                    **{
                        "client-certificate": "../shared/tls.crt",
                        "client-key": "/abs/tls.key",
                        "tokenFile": "~/token",
                        "exec": {"command": "./bin/plugin", "apiVersion": "v1"},
                    },
                )
            ]
        ),
    )
    x = load_kubeconfig([a, b, c]).contexts["x"]
    cl = x.config["clusters"][0]["cluster"]
    us = x.config["users"][0]["user"]
    assert cl["certificate-authority"] == str(tmp_path / "b" / "certs" / "ca.crt")
    assert us["client-certificate"] == str(tmp_path / "shared" / "tls.crt")
    assert us["client-key"] == "/abs/tls.key"
    assert us["tokenFile"] == str(tmp_path / "c" / "~" / "token")  # like client-go: no ~
    assert us["exec"]["command"] == str(tmp_path / "c" / "bin" / "plugin")


def test_exec_command_on_path_is_not_resolved(tmp_path: Path) -> None:
    doc = kc(
        contexts=[ctx("x", "cl", "us")],
        clusters=[cluster("cl")],
        users=[user("us", exec={"command": "aws", "args": ["eks", "get-token"]})],
    )
    x = load_kubeconfig(write(tmp_path / "config", doc)).contexts["x"]
    assert x.config["users"][0]["user"]["exec"]["command"] == "aws"


def test_config_is_self_contained(tmp_path: Path) -> None:
    doc = simple("one", "two") | {"current-context": "one"}
    two = load_kubeconfig(write(tmp_path / "config", doc)).contexts["two"]
    assert two.config == {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": "c-two", "cluster": {"server": "https://k8s.example/two"}}],
        "users": [{"name": "u-two", "user": {"token": SECRET}}],
        "contexts": [{"name": "two", "context": {"cluster": "c-two", "user": "u-two"}}],
        "current-context": "two",
    }


def test_snapshot_lists_referenced_files(tmp_path: Path) -> None:
    doc = kc(
        contexts=[ctx("x", "cl", "us"), ctx("bad", "nope", "us")],
        clusters=[cluster("cl", **{"certificate-authority": "ca.crt"})],
        users=[user("us", tokenFile="token", **{"client-key": "/k"})],
    )
    snap = load_kubeconfig(write(tmp_path / "config", doc))
    assert snap.referenced_files == {str(tmp_path / "ca.crt"), str(tmp_path / "token"), "/k"}


# --------------------------------------------------------------------------- validity


def test_invalid_contexts_have_reasons_and_others_still_load(tmp_path: Path) -> None:
    doc = kc(
        contexts=[
            ctx("ok", "c1", "u1"),
            ctx("no-cluster", "missing", "u1"),
            ctx("no-user", "c1", "ghost"),
            ctx("no-server", "c-empty", "u1"),
            {"name": "no-cluster-field", "context": {"user": "u1"}},
            ctx("anonymous", "c1"),
            {"name": "empty-user", "context": {"cluster": "c1", "user": ""}},
        ],
        clusters=[cluster("c1"), cluster("c-empty", None)],
        users=[user("u1", token="t")],
    )
    snap = load_kubeconfig(write(tmp_path / "config", doc))
    assert list(snap.contexts) == ["ok", "anonymous", "empty-user"]
    assert snap.invalid == {
        "no-cluster": "cluster 'missing' not found",
        "no-user": "user 'ghost' not found",
        "no-server": "no server",
        "no-cluster-field": "context has no cluster",
    }
    assert snap.contexts["anonymous"].user_name == ""
    assert snap.contexts["empty-user"].user_name == ""


def test_context_with_empty_name_is_invalid(tmp_path: Path) -> None:
    doc = kc(contexts=[ctx("", "c1"), {"context": {"cluster": "c1"}}], clusters=[cluster("c1")])
    # two nameless entries are duplicates, as in kubectl
    with pytest.raises(KubeconfigError, match="duplicate name ''"):
        load_kubeconfig(write(tmp_path / "dup", doc))
    doc["contexts"].pop()
    assert load_kubeconfig(write(tmp_path / "one", doc)).invalid == {"": "context has no name"}


async def test_config_works_with_kubernetes_asyncio(tmp_path: Path) -> None:
    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.config.kube_config import KubeConfigLoader as KaLoader

    (tmp_path / "ca.crt").write_text("CA")
    (tmp_path / "token").write_text("file-token")
    doc = kc(
        contexts=[ctx("tok", "cl", "us", "ns"), ctx("anon", "cl")],
        clusters=[cluster("cl", "https://k8s.example:6443", **{"certificate-authority": "ca.crt"})],
        users=[user("us", tokenFile="token")],
    )
    snap = load_kubeconfig(write(tmp_path / "config", doc))
    for name, expected_key in [("tok", {"BearerToken": "Bearer file-token"}), ("anon", {})]:
        context = snap.contexts[name]
        config = type.__call__(Configuration)
        loader = KaLoader(config_dict=context.config, config_base_path=None)
        await loader.load_and_set(config)
        assert config.host == "https://k8s.example:6443"
        assert config.ssl_ca_cert == str(tmp_path / "ca.crt")
        assert config.api_key == expected_key


def test_repr_hides_secrets(tmp_path: Path) -> None:
    doc = kc(
        contexts=[ctx("x", "cl", "us", "ns")],
        clusters=[cluster("cl", **{"certificate-authority-data": "Q0FEQVRB"})],
        users=[
            user(
                "us",
                token=SECRET,
                password="hunter2",
                **{"client-key-data": "S0VZREFUQQ=="},
            )
        ],
    )
    snap = load_kubeconfig(write(tmp_path / "config", doc))
    x = snap.contexts["x"]
    text = repr(x) + str(x) + repr(snap)
    for secret in (SECRET, "hunter2", "S0VZREFUQQ", "Q0FEQVRB"):
        assert secret not in text
    for shown in ("'x'", "'cl'", "'us'", "'ns'", "https://k8s.example:6443", x.fingerprint[:12]):
        assert shown in repr(x)
    assert x.fingerprint not in repr(x)


def test_context_config_equality_ignores_config() -> None:
    a = ContextConfig.from_dict("one", simple("one"))
    b = ContextConfig.from_dict("one", simple("one"))
    assert a == b
    assert hash(a) == hash(b)
    assert a.source == "<memory>"


def test_from_dict_errors() -> None:
    with pytest.raises(ContextNotFound):
        ContextConfig.from_dict("two", simple("one"))
    with pytest.raises(KubeconfigError, match="cluster 'nope' not found"):
        ContextConfig.from_dict("x", kc(contexts=[ctx("x", "nope")]))
    with pytest.raises(KubeconfigError, match="'contexts' must be a list"):
        ContextConfig.from_dict("x", {"contexts": {"x": {}}})


# --------------------------------------------------------------------------- fingerprints


def _fingerprints(tmp_path: Path, doc: Any, **dump_options: Any) -> dict[str, str]:
    path = write(tmp_path / "config", doc, **dump_options)
    return {n: c.fingerprint for n, c in load_kubeconfig(path).contexts.items()}


def _fp_doc() -> Any:
    return kc(
        contexts=[ctx("x", "cl", "us", "ns"), ctx("other", "cl2", "us2")],
        clusters=[
            cluster("cl", "https://one", **{"certificate-authority": "ca.crt"}),
            cluster("cl2", "https://two"),
        ],
        users=[user("us", token=SECRET, tokenFile="token"), user("us2", token="t2")],
        current="x",
    )


def test_fingerprint_ignores_formatting_and_order(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA1")
    base = _fingerprints(tmp_path, _fp_doc())
    assert all(len(fp) == 64 for fp in base.values())
    assert _fingerprints(tmp_path, _fp_doc(), default_flow_style=True) == base
    assert _fingerprints(tmp_path, _fp_doc(), sort_keys=False, indent=4) == base
    reordered = _fp_doc()
    for key in ("contexts", "clusters", "users"):
        reordered[key].reverse()
    reordered["clusters"][1]["cluster"] = dict(
        reversed(reordered["clusters"][1]["cluster"].items())
    )
    assert _fingerprints(tmp_path, reordered, sort_keys=False) == base
    # comments and quoting make no difference either
    (tmp_path / "config").write_text(
        "# my kubeconfig\n"
        + yaml.safe_dump(_fp_doc(), default_style='"').replace("\n", "  # c\n", 1)
    )
    assert {n: c.fingerprint for n, c in load_kubeconfig(tmp_path / "config").contexts.items()} == (
        base
    )


@pytest.mark.parametrize(
    "change",
    ["token", "server", "namespace", "ca-bytes", "token-file-path", "ca"],
)
def test_fingerprint_changes(tmp_path: Path, change: str) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA1")
    before = _fingerprints(tmp_path, _fp_doc())
    doc = _fp_doc()
    if change == "token":
        doc["users"][0]["user"]["token"] = "other"
    elif change == "server":
        doc["clusters"][0]["cluster"]["server"] = "https://one:443"
    elif change == "namespace":
        doc["contexts"][0]["context"]["namespace"] = "ns2"
    elif change == "ca-bytes":
        (tmp_path / "ca.crt").write_bytes(b"CA2")
    elif change == "token-file-path":
        doc["users"][0]["user"]["tokenFile"] = "other-token"
    elif change == "ca":
        doc["clusters"][0]["cluster"]["certificate-authority"] = "/elsewhere/ca.crt"
    after = _fingerprints(tmp_path, doc)
    assert after["x"] != before["x"]
    assert after["other"] == before["other"]  # an unrelated context does not move


@pytest.mark.parametrize("change", ["rotated", "created", "deleted"])
def test_fingerprint_ignores_token_file_contents(tmp_path: Path, change: str) -> None:
    # A token file rotates in place (projected service-account tokens): the credential
    # layer re-reads it; the context must not restart. Only its path counts.
    if change != "created":
        (tmp_path / "token").write_bytes(b"T1")
    before = _fingerprints(tmp_path, _fp_doc())
    if change == "deleted":
        (tmp_path / "token").unlink()
    else:
        (tmp_path / "token").write_bytes(b"T2")
    assert _fingerprints(tmp_path, _fp_doc()) == before


def test_fingerprint_unrelated_change_and_other_file_same(tmp_path: Path) -> None:
    before = _fingerprints(tmp_path, _fp_doc())
    doc = _fp_doc()
    doc["users"][1]["user"]["token"] = "changed"
    doc["contexts"].append(ctx("third", "cl2", "us2"))
    doc["current-context"] = "other"
    after = _fingerprints(tmp_path, doc)
    assert after["x"] == before["x"]
    assert after["other"] != before["other"]


def test_referenced_file_hashed_once_per_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA")
    n = 50
    doc = kc(
        contexts=[ctx(f"x{i}", f"c{i}") for i in range(n)],
        clusters=[cluster(f"c{i}", **{"certificate-authority": "ca.crt"}) for i in range(n)],
    )
    path = write(tmp_path / "config", doc)
    calls: list[object] = []
    real = os.open

    def counting(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).endswith("ca.crt"):
            calls.append(file)
        return real(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting)
    loader = KubeconfigLoader(path)
    assert len(loader.load().contexts) == n
    assert len(calls) == 1
    loader.load()
    assert len(calls) == 2  # once per load: a change between loads is seen


# --------------------------------------------------------------------------- bad input


BAD_FILES = [
    pytest.param(
        "clusters:\n- name: a\n  cluster: {server: x\n",
        r"invalid YAML at line 4, column 1",
        id="unclosed-flow",
    ),
    pytest.param(
        "contexts:\n- name: a\n   context: {}\n",
        r"invalid YAML at line 3, column 11: mapping values are not allowed",
        id="bad-indent",
    ),
    pytest.param(
        "users:\n\t- name: a\n",
        "invalid YAML at line 2, column 1: found character that cannot start any token",
        id="tab",
    ),
    pytest.param("- a\n- b\n", "expected a mapping at the top level, got a list", id="list"),
    pytest.param("just text\n", "expected a mapping at the top level, got a string", id="scalar"),
    pytest.param("contexts: {a: 1}\n", "'contexts' must be a list, got a mapping", id="ctx-map"),
    pytest.param("clusters: [1]\n", r"clusters\[0\] must be a mapping, got a number", id="entry"),
    pytest.param("users:\n- name: 5\n", r"users\[0\]\.name must be a string", id="name-type"),
    pytest.param(
        "contexts:\n- name: a\n  context: []\n",
        r"contexts\[0\]\.context must be a mapping, got a list",
        id="body-type",
    ),
    pytest.param(
        "contexts:\n- name: a\n  context: {cluster: 5}\n",
        "context 'a': cluster must be a string, got a number",
        id="field-type",
    ),
    pytest.param(
        "clusters:\n- name: a\n- name: a\n", "duplicate name 'a' in 'clusters'", id="duplicate"
    ),
    pytest.param("kind: Pod\napiVersion: v1\n", "kind is 'Pod', expected 'Config'", id="kind"),
    pytest.param(
        "current-context: [a]\n", "current-context must be a string, got a list", id="current"
    ),
    pytest.param(b"\xff\xfe\x00\x00garbage", "invalid YAML", id="encoding"),
]


@pytest.mark.parametrize(("content", "message"), BAD_FILES)
def test_bad_files_raise_naming_the_file(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    path = tmp_path / "my-config"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(KubeconfigError, match=message) as info:
        load_kubeconfig(path)
    assert str(path) in str(info.value)
    assert info.value.path == str(path)


def test_yaml_error_message_does_not_quote_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(f"users:\n- name: u\n  user: {{token: {SECRET}\n")
    with pytest.raises(KubeconfigError, match="line 4") as info:
        load_kubeconfig(path)
    assert SECRET not in str(info.value)


def test_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(KubeconfigError, match="not a regular file") as info:
        load_kubeconfig([tmp_path / "dir", write(tmp_path / "ok", simple("one"))])
    assert str(tmp_path / "dir") in str(info.value)


def test_missing_only_file(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="does not exist") as info:
        load_kubeconfig(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(info.value)


def test_missing_default_file(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError) as info:
        load_kubeconfig()
    assert str(tmp_path / "home" / ".kube" / "config") in str(info.value)


def test_all_missing_names_every_path(tmp_path: Path) -> None:
    paths = [tmp_path / "a", tmp_path / "b"]
    with pytest.raises(KubeconfigError, match="no kubeconfig file found") as info:
        load_kubeconfig(paths)
    assert all(str(p) in str(info.value) for p in paths)
    with pytest.raises(KubeconfigError, match="no kubeconfig file given"):
        load_kubeconfig([])


def test_some_missing_is_fine(tmp_path: Path) -> None:
    snap = load_kubeconfig([tmp_path / "nope", write(tmp_path / "ok", simple("one"))])
    assert list(snap.contexts) == ["one"]


@pytest.mark.parametrize("content", ["", "   \n", "# only a comment\n", "apiVersion: v1\n"])
def test_empty_files_are_empty_configs(tmp_path: Path, content: str) -> None:
    path = tmp_path / "config"
    path.write_text(content)
    snap = load_kubeconfig(path)
    assert (snap.contexts, snap.errors) == ({}, {})


def test_first_document_only_like_kubectl(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(simple("one")) + "---\n" + yaml.safe_dump(simple("two")))
    assert list(load_kubeconfig(path).contexts) == ["one"]


# --------------------------------------------------------------------------- the loader


def test_loader_keeps_last_good_contents_of_a_broken_file(tmp_path: Path) -> None:
    a = write(tmp_path / "a", simple("one", "two"))
    b = write(tmp_path / "b", simple("three"))
    loader = KubeconfigLoader([a, b])
    first = loader.load()
    assert list(first.contexts) == ["one", "two", "three"]

    good = a.read_text()
    a.write_text(good[: len(good) // 2] + "\n  {[")  # half-written
    broken = loader.load()
    assert broken.contexts == first.contexts
    assert list(broken.errors) == [str(a)]
    assert "invalid YAML at line" in broken.errors[str(a)]

    a.write_text("")  # truncated before being rewritten
    truncated = loader.load()
    assert truncated.contexts == first.contexts
    assert "file is empty" in truncated.errors[str(a)]

    a.write_text(good)
    fixed = loader.load()
    assert fixed.contexts == first.contexts
    assert fixed.errors == {}

    write(a, simple("one"))
    assert list(loader.load().contexts) == ["one", "three"]

    a.unlink()
    gone = loader.load()
    assert list(gone.contexts) == ["three"]
    assert gone.missing == (str(a),)
    assert gone.errors == {}

    a.write_text(good[:20] + "{[")  # re-created broken: nothing to keep
    assert list(loader.load().contexts) == ["three"]


def test_loader_never_raises_on_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("- a\n")
    snap = KubeconfigLoader(path).load()
    assert snap.contexts == {}
    assert "top level" in snap.errors[str(path)]
    assert isinstance(snap, KubeconfigSnapshot)


def test_loader_reads_files_list_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = write(tmp_path / "a", simple("one"))
    monkeypatch.setenv("KUBECONFIG", str(a))
    loader = KubeconfigLoader()
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "other"))
    assert list(loader.load().contexts) == ["one"]


# --------------------------------------------------------------------------- YAML and speed


YAML_SAMPLES = [
    "a: 1\nb: 1.5\nc: true\nd: yes\ne: ~\nf: null\ng: ''\nh: 0x1F\ni: 1_000\nj: 2024-01-02\n",
    "k: 2024-01-02T03:04:05Z\nl: .inf\nm: -.nan\nn: '1'\no: \"yes\"\np: !!str 5\nq: 0o17\n",
    "base: &b {x: 1, y: [1, 2]}\nuse: *b\nmerged: {<<: *b, z: 3}\n",
    "? {complex: key}\n: value\n",
    "? [complex, key]\n: value\n",
    "list:\n- - nested\n  - [flow, {a: b}]\n- {}\n- []\n- 190:20:30\n- +12\n- -0\n",
    "dup: 1\ndup: 2\nempty:\nfold: >\n  folded\n  text\nlit: |\n  lit\n",
    "",
    "# comment only\n",
    "--- 5\n",
    "plain\n",
    "a: 1\n---\nb: 2\n",
]


@pytest.mark.parametrize("text", YAML_SAMPLES)
def test_fast_yaml_matches_safe_load(text: str) -> None:
    # The full loader is SafeLoader but for timestamps, which stay strings (as in Go).
    try:
        expected = next(iter(yaml.load_all(text, Loader=_FullLoader)), None)
    except yaml.YAMLError as exc:
        with pytest.raises(type(exc)):
            _load_yaml(text.encode())
    else:
        assert _load_yaml(text.encode()) == expected


def test_5000_contexts_load(tmp_path: Path) -> None:
    n = 5000
    (tmp_path / "ca.crt").write_text("CA")
    doc = kc(
        contexts=[ctx(f"ctx-{i}", f"c{i}", f"u{i}", "default") for i in range(n)],
        clusters=[
            cluster(f"c{i}", f"https://h{i}:6443", **{"certificate-authority": "ca.crt"})
            for i in range(n)
        ],
        users=[user(f"u{i}", token=f"tok-{i}") for i in range(n)],
        current="ctx-0",
    )
    path = tmp_path / "config"
    path.write_text(yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
    snap = load_kubeconfig(path)  # how fast: bench/scale_contexts.py (tests check behaviour)
    assert len(snap.contexts) == n
    assert len({c.fingerprint for c in snap.contexts.values()}) == n


def test_half_written_yaml_in_textwrap_example(tmp_path: Path) -> None:
    """A file cut mid-line keeps the last good contents (the watcher relies on it)."""
    path = tmp_path / "config"
    path.write_text(
        textwrap.dedent(
            """\
            clusters:
            - name: c
              cluster: {server: "https://x"}
            contexts:
            - name: a
              context: {cluster: c}
            """
        )
    )
    loader = KubeconfigLoader(path)
    assert list(loader.load().contexts) == ["a"]
    path.write_text('clusters:\n- name: c\n  cluster: {server: "https://x')
    snap = loader.load()
    assert list(snap.contexts) == ["a"]
    assert "line 3" in snap.errors[str(path)]
