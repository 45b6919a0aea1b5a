"""Fuzzing the kubeconfig loader with hypothesis: random documents, types, unicode, controls.

The contract: :func:`load_kubeconfig` returns a snapshot or raises :class:`KubeconfigError`;
:meth:`KubeconfigLoader.load` never raises; every valid context's client config is plain JSON
data with the types the client expects. Nothing else escapes, nothing hangs.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any

import orjson
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubemux._errors import KubeconfigError
from kubemux._kubeconfig.load import KubeconfigLoader, load_kubeconfig
from kubemux._kubeconfig.schema import CLUSTER, CONTEXT, USER

NAMES = st.sampled_from(["a", "b", "c", "", "ctx", "ü", "a\x1b[2J"])
TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
        st.sampled_from(list("\0\r\n\t\x1b\x7f\u202e" + string.ascii_letters)),
    ),
    max_size=12,
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    TEXT,
    st.sampled_from(["QUJD", "CASA=", "https://u:p@h", "socks5://p", "false", "no", "2024-01-01"]),
)
ANY = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.one_of(TEXT, NAMES), inner, max_size=3)
    ),
    max_leaves=8,
)


def _body(fields: dict[str, Any], base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A usable entry (``base``) with known fields (and a few unknown ones) set to anything."""
    keys = st.one_of(st.sampled_from(sorted(fields)), TEXT)
    values = st.one_of(ANY, SCALARS, st.lists(SCALARS, max_size=3))
    return st.dictionaries(keys, values, max_size=4).map(lambda extra: {**base, **extra})


def _entries(body_key: str, name: str, body: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    usable = st.fixed_dictionaries({"name": st.just(name), body_key: body})
    other = st.fixed_dictionaries({"name": NAMES, body_key: ANY})
    return st.one_of(st.lists(st.one_of(usable, other, ANY), min_size=1, max_size=3), ANY)


# Mostly one usable context (x -> cluster c, user u) whose entries hold random fields, so that
# the checks on what a *valid* context carries get exercised; sometimes anything at all.
DOCUMENTS = st.one_of(
    st.fixed_dictionaries(
        {
            "clusters": _entries("cluster", "c", _body(CLUSTER, {"server": "https://h"})),
            "users": _entries("user", "u", _body(USER, {})),
            "contexts": _entries("context", "x", _body(CONTEXT, {"cluster": "c", "user": "u"})),
        },
        optional={"current-context": ANY, "kind": ANY, "preferences": ANY, "extensions": ANY},
    ),
    ANY,
)

# What kubectl's Go types allow, written out independently of the loader's own table.
_BOOLS = {"insecure-skip-tls-verify", "disable-compression"}
_STRINGS = {
    "server", "tls-server-name", "certificate-authority", "proxy-url", "client-certificate",
    "client-key", "token", "tokenFile", "as", "as-uid", "username", "password", "cluster",
    "user", "namespace",
}  # fmt: skip
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def _assert_go_types(body: dict[str, Any]) -> None:
    for key, value in body.items():
        if key in _BOOLS:
            assert type(value) is bool, (key, value)
        elif key in _STRINGS:
            assert type(value) is str, (key, value)
            assert "\0" not in value, key
        elif key.endswith("-data"):
            assert _BASE64.fullmatch(value.replace("\r", "").replace("\n", "")), key
    assert not re.search("[\r\n\0]", body.get("token", "")), "token with a line break"
    exec_ = body.get("exec")
    if exec_ is not None:
        assert all(type(a) is str for a in exec_.get("args", [])), exec_
        assert all(type(v) is str for e in exec_.get("env", []) for v in e.values()), exec_
    provider = body.get("auth-provider")
    if provider is not None:
        assert provider.get("name") == "oidc", provider
        assert all(type(v) is str for v in provider.get("config", {}).values()), provider


def _check(path: Path) -> None:
    try:
        snapshot = load_kubeconfig(path)
    except KubeconfigError:
        pass
    else:
        for context in snapshot.contexts.values():
            config = context.client_config()
            orjson.dumps(config)  # plain JSON data, whatever the file held
            _assert_go_types(config["clusters"][0]["cluster"])
            _assert_go_types(config["users"][0]["user"])
            _assert_go_types(config["contexts"][0]["context"])
            assert "p@" not in repr(context)  # https://u:p@h
    snapshot = KubeconfigLoader(path).load()  # never raises
    assert set(snapshot.contexts).isdisjoint(snapshot.invalid)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(document=DOCUMENTS)
def test_random_documents(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(document, allow_unicode=True))
    _check(path)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.binary(max_size=200), prefix=st.sampled_from([b"", b"clusters:\n- ", b"a: &x "]))
def test_random_bytes(tmp_path: Path, data: bytes, prefix: bytes) -> None:
    path = tmp_path / "config"
    path.write_bytes(prefix + data)
    _check(path)
