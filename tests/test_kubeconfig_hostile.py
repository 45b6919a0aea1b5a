"""Hostile kubeconfigs: wrong types, bad base64, alias bombs, FIFOs, NULs, secrets in URLs.

Each case is checked against what kubectl does with the same file (``kubectl config view``
refuses a file whose fields have the wrong type, and accepts one that only fails when a
context is used); the cross-check runs when a kubectl binary is found.
"""

from __future__ import annotations

import logging
import os
import resource
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from kubemux._errors import KubeconfigError
from kubemux._kubeconfig.load import (
    MAX_REFERENCED_FILE_BYTES,
    ContextConfig,
    KubeconfigLoader,
    load_kubeconfig,
)


def _find_kubectl() -> str | None:
    found = shutil.which("kubectl")
    if found is None:
        return None
    pinned = Path(os.path.realpath(found)).parent / "kubectl.1.32"
    return str(pinned) if pinned.exists() else found


KUBECTL = _find_kubectl()


def document(cluster: str = "", user: str = "", context: str = "", top: str = "") -> str:
    """A one-context kubeconfig with extra lines in the cluster, user, context or top level."""

    def block(lines: str) -> str:
        return textwrap.indent(textwrap.dedent(lines).strip("\n"), "    ") + "\n" if lines else ""

    return (
        "apiVersion: v1\nkind: Config\n"
        "clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"
        + block(cluster)
        + "users:\n- name: u\n  user:\n    username: someone\n"
        + block(user)
        + "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n"
        + block(context)
        + "current-context: x\n"
        + textwrap.dedent(top)
    )


V1 = "apiVersion: client.authentication.k8s.io/v1"

# (id, cluster lines, user lines, context lines, top-level lines, outcome, message)
# outcome: "file" = kubectl refuses the whole file; "context" = kubectl loads it but the
# context cannot work (we refuse the context); "ok".
CASES = [
    ("skip-tls-quoted-false", 'insecure-skip-tls-verify: "false"', "", "", "", "file",
     r"cluster 'c' \(used by context 'x'\): insecure-skip-tls-verify must be true or false"),
    ("skip-tls-quoted-no", 'insecure-skip-tls-verify: "no"', "", "", "", "file",
     "insecure-skip-tls-verify must be true or false"),
    ("skip-tls-number", "insecure-skip-tls-verify: 1", "", "", "", "file",
     r"insecure-skip-tls-verify must be true or false \(unquoted\), got a number"),
    ("skip-tls-bare-no", "insecure-skip-tls-verify: no", "", "", "", "ok", ""),
    ("skip-tls-null", "insecure-skip-tls-verify: null", "", "", "", "ok", ""),
    ("tls-server-name-number", "tls-server-name: 5", "", "", "", "file",
     "tls-server-name must be a string, got a number"),
    ("proxy-url-number", "proxy-url: 5", "", "", "", "file", "proxy-url must be a string"),
    ("disable-compression-string", 'disable-compression: "true"', "", "", "", "file",
     "disable-compression must be true or false"),
    ("ca-data-number", "certificate-authority-data: 5", "", "", "", "file",
     "certificate-authority-data must be base64 text"),
    ("ca-data-CASA=", "certificate-authority-data: CASA=", "", "", "", "file",
     "certificate-authority-data is not valid base64"),
    ("ca-data-no-padding", "certificate-authority-data: QUI", "", "", "", "file",
     "not valid base64"),
    ("ca-data-urlsafe", 'certificate-authority-data: "-_-_"', "", "", "", "file",
     "not valid base64"),
    ("ca-data-space", 'certificate-authority-data: "QU JD"', "", "", "", "file",
     "not valid base64"),
    ("ca-data-padding-inside", 'certificate-authority-data: "QQ==QUJD"', "", "", "", "file",
     "not valid base64"),
    ("ca-data-binary-tag", "certificate-authority-data: !!binary QUJD", "", "", "", "file",
     "certificate-authority-data must be base64 text, got binary data"),
    ("ca-data-newlines", 'certificate-authority-data: "QUJD\\r\\nQUJD"', "", "", "", "ok", ""),
    ("ca-data-trailing-bits", 'certificate-authority-data: "QR=="', "", "", "", "ok", ""),
    ("ca-data-empty", 'certificate-authority-data: ""', "", "", "", "ok", ""),
    ("cluster-extensions-number", "extensions: 5", "", "", "", "file",
     "extensions must be a list"),
    ("cluster-extension-name", "extensions: [{name: 5, extension: {}}]", "", "", "", "file",
     "extensions.name must be a string"),
    ("unknown-field", "bogus: [1, {a: 2}]", "", "", "", "ok", ""),
    ("socks5-proxy", "proxy-url: socks5://127.0.0.1:1080", "", "", "", "ok", ""),
    ("socks5h-proxy", "proxy-url: socks5h://127.0.0.1:1080", "", "", "", "ok", ""),
    ("socks4-proxy", "proxy-url: socks4://127.0.0.1:1080", "", "", "", "context",
     "socks4 proxies are not supported"),
    ("ftp-proxy", "proxy-url: ftp://127.0.0.1:21", "", "", "", "context",
     "unsupported scheme 'ftp', must be http, https, socks5 or socks5h"),
    ("token-number", "", "token: 5", "", "", "file",
     r"user 'u' \(used by context 'x'\): token must be a string, got a number"),
    ("token-bool", "", "token: true", "", "", "file", "token must be a string, got a boolean"),
    ("token-hex", "", "token: 0x1F", "", "", "file", "token must be a string"),
    ("token-crlf", "", 'token: "a\\r\\nb"', "", "", "context",
     "user 'u': token contains a line break"),
    ("exec-args-number", "", f"exec: {{command: x, {V1}, args: 5}}", "", "", "file",
     "exec.args must be a list, got a number"),
    ("exec-args-items", "", f"exec: {{command: x, {V1}, args: [5, true]}}", "", "", "file",
     "exec.args must be a string, got a number"),
    ("exec-env-string", "", f'exec: {{command: x, {V1}, env: "x"}}', "", "", "file",
     "exec.env must be a list, got a string"),
    ("exec-env-item", "", f"exec: {{command: x, {V1}, env: [5]}}", "", "", "file",
     "exec.env must be a mapping"),
    ("exec-env-value", "", f"exec: {{command: x, {V1}, env: [{{name: a, value: 5}}]}}", "",
     "", "file", "exec.env.value must be a string"),
    ("exec-provide-cluster-info", "", f'exec: {{command: x, {V1}, provideClusterInfo: "yes"}}',
     "", "", "file", "exec.provideClusterInfo must be true or false"),
    ("exec-interactive-mode", "", f"exec: {{command: x, {V1}, interactiveMode: 5}}", "", "",
     "file", "exec.interactiveMode must be a string"),
    ("exec-not-mapping", "", "exec: [x]", "", "", "file", "exec must be a mapping"),
    ("auth-provider-config-number", "", "auth-provider: {name: oidc, config: 5}", "", "",
     "file", "auth-provider.config must be a mapping"),
    ("auth-provider-config-value", "", "auth-provider: {name: oidc, config: {a: 5}}", "", "",
     "file", "auth-provider.config.a must be a string"),
    ("auth-provider-name", "", "auth-provider: {name: 5}", "", "", "file",
     "auth-provider.name must be a string"),
    ("auth-provider-azure", "", "auth-provider: {name: azure, config: {a: b}}", "", "",
     "context", "auth-provider 'azure' was removed .*kubelogin"),
    ("auth-provider-gcp", "", "auth-provider: {name: gcp}", "", "", "context",
     "auth-provider 'gcp' was removed .*gke-gcloud-auth-plugin"),
    ("as-groups-string", "", "as-groups: x", "", "", "file", "as-groups must be a list"),
    ("as-user-extra", "", "as-user-extra: {a: b}", "", "", "file",
     "as-user-extra.a must be a list"),
    ("client-key-data-CASA=", "", "client-key-data: CASA=", "", "", "file",
     "client-key-data is not valid base64"),
    ("client-cert-number", "", "client-certificate: 5", "", "", "file",
     "client-certificate must be a string"),
    ("namespace-number", "", "", "namespace: 5", "", "file",
     "context 'x': namespace must be a string, got a number"),
    ("namespace-yes", "", "", "namespace: yes", "", "file",
     "namespace must be a string, got a boolean"),
    ("namespace-date", "", "", "namespace: 2024-01-01", "", "ok", ""),
    ("current-context-number", "", "", "", "", "file", "current-context must be a string"),
    ("preferences-colors", "", "", "", 'preferences: {colors: "x"}\n', "file",
     "preferences.colors must be true or false"),
]  # fmt: skip


def _case_text(case: tuple[str, ...]) -> str:
    _, cluster, user, context, top, _, _ = case
    text = document(cluster, user, context, top)
    if case[0] == "current-context-number":
        text = text.replace("current-context: x", "current-context: 5")
    return text


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_field_types_as_kubectl(tmp_path: Path, case: tuple[str, ...]) -> None:
    path = tmp_path / "config"
    path.write_text(_case_text(case))
    outcome, message = case[5], case[6]
    if outcome == "file":
        with pytest.raises(KubeconfigError, match=message) as info:
            load_kubeconfig(path)
        assert str(path) in str(info.value)
        return
    snapshot = load_kubeconfig(path)
    if outcome == "context":
        assert "x" not in snapshot.contexts
        assert snapshot.invalid["x"]
        assert __import__("re").search(message, snapshot.invalid["x"]), snapshot.invalid["x"]
    else:
        assert list(snapshot.contexts) == ["x"]
        ContextConfig.client_config(snapshot.contexts["x"])
    if case[0] == "namespace-date":
        assert snapshot.contexts["x"].namespace == "2024-01-01"  # Go keeps it a string


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_field_types_kubectl_agrees(tmp_path: Path, case: tuple[str, ...]) -> None:
    path = tmp_path / "config"
    path.write_text(_case_text(case))
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "config", "view", "--kubeconfig", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    refused = result.returncode != 0
    assert refused == (case[5] == "file"), result.stderr


def test_type_error_keeps_last_good_contexts(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(document())
    loader = KubeconfigLoader(path)
    good = loader.load()
    assert list(good.contexts) == ["x"]
    path.write_text(document(cluster='insecure-skip-tls-verify: "false"'))
    snapshot = loader.load()
    assert snapshot.contexts["x"] == good.contexts["x"]  # the last good parse, untouched
    assert "insecure-skip-tls-verify" in snapshot.errors[str(path)]
    assert "insecure-skip-tls-verify" not in snapshot.contexts["x"].config["clusters"][0]


def test_null_known_fields_are_dropped(tmp_path: Path) -> None:
    # Go reads null as the zero value; the client must not see None where it expects a list.
    path = tmp_path / "config"
    path.write_text(document(user=f"exec: {{command: x, {V1}, args: null, env: [null]}}"))
    user = load_kubeconfig(path).contexts["x"].client_config()["users"][0]["user"]
    assert "args" not in user["exec"]
    assert user["exec"]["env"] == [{}]


# --------------------------------------------------------------------------- secrets


def test_server_password_never_shown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = "https://admin:hunter2@k8s.example:6443"
    path = tmp_path / "config"
    path.write_text(document().replace("https://127.0.0.1:1", url))
    loader = KubeconfigLoader(path)
    context = loader.load().contexts["x"]
    assert context.server == url  # kept for connecting
    assert context.display_server == "https://***@k8s.example:6443"
    assert "hunter2" not in repr(context)
    # a broken edit of the same file: the error text never quotes the file
    path.write_text(document(cluster="tls-server-name: 5").replace("https://127.0.0.1:1", url))
    snapshot = loader.load()
    path.write_text(document().replace("https://127.0.0.1:1", url) + "  bad: [\n")
    snapshot2 = loader.load()
    for text in (*snapshot.errors.values(), *snapshot2.errors.values(), caplog.text):
        assert "hunter2" not in text


def test_token_with_line_break_not_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(document(user='token: "s3cr3t\\r\\nX-Evil: 1"'))
    snapshot = load_kubeconfig(path)
    assert "s3cr3t" not in snapshot.invalid["x"]


# --------------------------------------------------------------------------- alias bombs

BOMB = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:1
    bomb: &a9 [&a8 [&a7 [&a6 [&a5 [&a4 [&a3 [&a2 [&a1 [&a0 [xxxxxxxxxxxxxxxxxxxxxxxx,
      xxxxxxxxxxxxxxxxxxxxxxxx], *a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0],
      *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1], *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2,
      *a2], *a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3], *a4, *a4, *a4, *a4, *a4, *a4, *a4,
      *a4, *a4], *a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5], *a6, *a6, *a6, *a6, *a6, *a6,
      *a6, *a6, *a6], *a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7], *a8, *a8, *a8, *a8, *a8,
      *a8, *a8, *a8, *a8]
contexts:
- name: x
  context: {cluster: c}
"""


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_alias_bomb_refused_before_expansion(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(BOMB)
    assert path.stat().st_size < 1024
    loader = KubeconfigLoader(path)
    rss = _max_rss_mb()
    snapshot = loader.load()
    assert "alias" in snapshot.errors[str(path)]
    assert not snapshot.contexts
    assert _max_rss_mb() - rss < 100  # 10^9 scalars expanded would be gigabytes
    with pytest.raises(KubeconfigError, match="alias"):
        load_kubeconfig(path)


def test_recursive_alias_refused(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(document(user="loop: &l [*l]"))
    with pytest.raises(KubeconfigError, match="cycle"):
        load_kubeconfig(path)


def test_modest_aliases_still_work(tmp_path: Path) -> None:
    # Sharing a CA between clusters with an anchor is legitimate.
    text = (
        "clusters:\n"
        "- {name: a, cluster: {server: 'https://a', certificate-authority-data: &ca QUJD}}\n"
        "- {name: b, cluster: {server: 'https://b', certificate-authority-data: *ca}}\n"
        "contexts:\n- {name: a, context: {cluster: a}}\n- {name: b, context: {cluster: b}}\n"
    )
    path = tmp_path / "config"
    path.write_text(text)
    assert list(load_kubeconfig(path).contexts) == ["a", "b"]


# --------------------------------------------------------------------------- odd files


def test_nul_in_referenced_path_is_a_context_error(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(
        "clusters:\n"
        "- {name: c, cluster: {server: 'https://a', certificate-authority: \"ca\\0.crt\"}}\n"
        "- {name: c2, cluster: {server: 'https://b'}}\n"
        "contexts:\n- {name: x, context: {cluster: c}}\n- {name: y, context: {cluster: c2}}\n"
    )
    snapshot = KubeconfigLoader(path).load()  # documented never to raise
    assert "NUL" in snapshot.invalid["x"]
    assert list(snapshot.contexts) == ["y"]


@pytest.mark.parametrize("field", ["client-certificate", "client-key", "tokenFile"])
def test_nul_in_user_paths(tmp_path: Path, field: str) -> None:
    path = tmp_path / "config"
    path.write_text(document(user=f'{field}: "a\\0b"'))
    snapshot = KubeconfigLoader(path).load()
    assert "NUL" in snapshot.invalid["x"]


def test_nul_in_exec_is_a_context_error(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(document(user=f'exec: {{command: "/bin/x\\0", {V1}}}'))
    assert "NUL" in KubeconfigLoader(path).load().invalid["x"]


@pytest.mark.parametrize("field", ["certificate-authority", "client-certificate", "tokenFile"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_endless_referenced_file(tmp_path: Path, field: str, kind: str) -> None:
    target = tmp_path / "target"
    if kind == "fifo":
        os.mkfifo(target)  # opened for reading with nobody writing: would block for ever
    elif kind == "folder":
        target.mkdir()
    else:
        target = Path("/dev/zero")
    where = "cluster" if field == "certificate-authority" else "user"
    path = tmp_path / "config"
    path.write_text(document(**{where: f"{field}: {target}"}))  # type: ignore[arg-type]
    rss = _max_rss_mb()
    snapshot = KubeconfigLoader(path).load()
    assert "not a regular file" in snapshot.invalid["x"]
    assert str(target) in snapshot.invalid["x"]
    assert _max_rss_mb() - rss < 100


def test_huge_referenced_file(tmp_path: Path) -> None:
    big = tmp_path / "ca.crt"
    with big.open("wb") as f:
        f.truncate(MAX_REFERENCED_FILE_BYTES + 1)  # sparse: costs no disk
    path = tmp_path / "config"
    path.write_text(document(cluster=f"certificate-authority: {big}"))
    snapshot = KubeconfigLoader(path).load()
    assert "larger than" in snapshot.invalid["x"]
    assert str(big) in snapshot.invalid["x"]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_endless_kubeconfig_file(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        target = tmp_path / "config"
        os.mkfifo(target)
    else:
        target = Path("/dev/zero")
    good = tmp_path / "good"
    good.write_text(document())
    snapshot = KubeconfigLoader([target, good]).load()
    assert "not a regular file" in snapshot.errors[str(target)]
    assert list(snapshot.contexts) == ["x"]
    with pytest.raises(KubeconfigError, match="not a regular file"):
        load_kubeconfig(target)


def test_nul_in_kubeconfig_path_is_a_file_error(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_text(document())
    bad = str(tmp_path / "a\0b")
    snapshot = KubeconfigLoader([bad, good]).load()
    assert "not a valid file name" in snapshot.errors[bad]
    assert list(snapshot.contexts) == ["x"]


def test_loader_marks_a_file_still_changing(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(document())
    loader = KubeconfigLoader(path)
    assert list(loader.load().contexts) == ["x"]  # a first read is used even if just written
    assert loader.unsettled == (str(path),)  # ... and marked, so the watcher reads it again
    os.utime(path, (1_000_000_000, 1_000_000_000))  # quiet for long
    loader.load()
    assert loader.unsettled == ()


def test_from_dict_checks_types_too() -> None:
    doc = {
        "clusters": [{"name": "c", "cluster": {"server": "https://a", "proxy-url": 5}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"auth-provider": {"name": "gcp"}}}],
    }
    with pytest.raises(KubeconfigError, match="proxy-url must be a string"):
        ContextConfig.from_dict("x", doc)
    doc["clusters"][0]["cluster"]["proxy-url"] = "http://proxy:3128"  # type: ignore[index]
    with pytest.raises(KubeconfigError, match="gke-gcloud-auth-plugin"):
        ContextConfig.from_dict("x", doc)
