"""Kubeconfig field types, checked as kubectl checks them (sync, no I/O).

kubectl (client-go ``clientcmd``) turns the YAML into JSON and decodes it into its Go structs
with ``encoding/json``: a value of the wrong type anywhere in a known field refuses the *whole
file* (``json: cannot unmarshal string into Go struct field Cluster.clusters.cluster
.insecure-skip-tls-verify of type bool``). So ``insecure-skip-tls-verify: "false"`` is an
error, never a truthy string; ``exec.args: 5`` is an error at load, not a ``TypeError`` when a
client is built. Unknown fields are ignored and ``null`` is the zero value, as in Go. The
``*-data`` fields are ``[]byte``: standard base64 with padding, where only ``\\r`` and ``\\n``
are skipped (Go's ``base64.StdEncoding``, which accepts non-zero trailing bits but refuses
``CASA=``, a value Python's decoder takes).

:func:`check_entry` raises :class:`SchemaError` for those file-level faults.
:func:`cluster_problem` and :func:`user_problem` find what kubectl accepts in the file but
fails on when the context is used (a token with a line break, a NUL in a path, a removed
auth provider, a socks4 proxy): those make only the contexts using that entry invalid.
"""

from __future__ import annotations

import difflib
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "CLUSTER",
    "CONFIG",
    "CONTEXT",
    "HEADER_UNSAFE",
    "URL_UNSAFE",
    "USER",
    "SchemaError",
    "check_entry",
    "cluster_problem",
    "type_name",
    "unknown_keys",
    "user_problem",
]


class SchemaError(Exception):
    """A field holds a value of the wrong type (``field`` is a dotted path in the entry)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


# A spec is one of these kinds, a ("list", spec), a ("map", spec) or a dict (a Go struct).
STR: Final = "str"
BOOL: Final = "bool"
B64: Final = "base64"
ANY: Final = "any"

_EXTENSIONS: Final = ("list", {"name": STR, "extension": ANY})

CLUSTER: Final[dict[str, Any]] = {
    "server": STR,
    "tls-server-name": STR,
    "insecure-skip-tls-verify": BOOL,
    "certificate-authority": STR,
    "certificate-authority-data": B64,
    "proxy-url": STR,
    "disable-compression": BOOL,
    "extensions": _EXTENSIONS,
}
_EXEC: Final[dict[str, Any]] = {
    "command": STR,
    "args": ("list", STR),
    "env": ("list", {"name": STR, "value": STR}),
    "apiVersion": STR,
    "installHint": STR,
    "provideClusterInfo": BOOL,
    "interactiveMode": STR,
}
USER: Final[dict[str, Any]] = {
    "client-certificate": STR,
    "client-certificate-data": B64,
    "client-key": STR,
    "client-key-data": B64,
    "token": STR,
    "tokenFile": STR,
    "as": STR,
    "as-uid": STR,
    "as-groups": ("list", STR),
    "as-user-extra": ("map", ("list", STR)),
    "username": STR,
    "password": STR,
    "auth-provider": {"name": STR, "config": ("map", STR)},
    "exec": _EXEC,
    "extensions": _EXTENSIONS,
}
CONTEXT: Final[dict[str, Any]] = {
    "cluster": STR,
    "user": STR,
    "namespace": STR,
    "extensions": _EXTENSIONS,
}
# The top level, without clusters/users/contexts (the loader walks those itself).
CONFIG: Final[dict[str, Any]] = {
    "kind": STR,
    "apiVersion": STR,
    "current-context": STR,
    "preferences": {"colors": BOOL, "extensions": _EXTENSIONS},
    "extensions": _EXTENSIONS,
}

# Go's StdEncoding (not Strict): groups of four, padding only at the end; \r and \n skipped.
_BASE64: Final = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_NEWLINES: Final = str.maketrans("", "", "\r\n")


def unknown_keys(body: Mapping[str, Any], spec: Mapping[str, Any], where: str) -> str:
    """A note naming the keys of ``body`` that kubectl does not read (kubectl ignores them,
    so a typo such as ``sever:`` goes unnoticed until the field is missed), each with its
    path (``where`` is the entry's, ``clusters[prod].cluster``) and the known key it is
    closest to; ``""`` if there are none. For explaining why an entry lacks a field."""
    notes = []
    for key in body:
        if type(key) is not str or key in spec:
            continue
        close = difflib.get_close_matches(key, list(spec), n=1, cutoff=0.6)
        hint = f": did you mean {close[0]!r}?" if close else ""
        notes.append(f"{where}.{key} is not a kubeconfig key{hint}")
        if len(notes) == 3:
            break
    return "; ".join(notes)


def check_entry(body: dict[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with every known field type-checked; known fields that are ``null`` dropped.

    Returns ``body`` itself when nothing had to be dropped (the common case costs no copy).

    Raises:
        SchemaError: A known field holds a value of the wrong type (or illegal base64).
    """
    out = body
    for key, value in body.items():
        field_spec = spec.get(key) if type(key) is str else None
        if field_spec is None:
            continue  # unknown fields are ignored, as by kubectl
        if value is None:
            if out is body:
                out = dict(body)
            del out[key]
            continue
        checked = _check(value, field_spec, key)
        if checked is not value:
            if out is body:
                out = dict(body)
            out[key] = checked
    return out


def _check(value: Any, spec: Any, where: str) -> Any:
    if spec is STR:
        if type(value) is not str:
            raise SchemaError(where, f"must be a string, got {type_name(value)}")
        return value
    if spec is BOOL:
        if type(value) is not bool:
            raise SchemaError(where, f"must be true or false (unquoted), got {type_name(value)}")
        return value
    if spec is B64:
        if type(value) is not str:
            raise SchemaError(where, f"must be base64 text, got {type_name(value)}")
        if not _BASE64.fullmatch(value.translate(_NEWLINES)):
            raise SchemaError(where, "is not valid base64 (standard alphabet, with padding)")
        return value
    if spec is ANY:
        return value
    if isinstance(spec, dict):
        if value is None:
            return {}
        if type(value) is not dict:
            raise SchemaError(where, f"must be a mapping, got {type_name(value)}")
        try:
            return check_entry(value, spec)
        except SchemaError as exc:
            raise SchemaError(f"{where}.{exc.field}", exc.problem) from None
    kind, item_spec = spec
    if kind == "list":
        if type(value) is not list:
            raise SchemaError(where, f"must be a list, got {type_name(value)}")
        items = value
        for index, item in enumerate(items):
            checked = _zero(item_spec) if item is None else _check(item, item_spec, where)
            if checked is not item:
                if items is value:
                    items = list(value)
                items[index] = checked
        return items
    if type(value) is not dict:  # a map
        raise SchemaError(where, f"must be a mapping, got {type_name(value)}")
    mapping = value
    for key, item in value.items():
        if type(key) is not str:
            raise SchemaError(where, f"keys must be strings, got {type_name(key)}")
        checked = _zero(item_spec) if item is None else _check(item, item_spec, f"{where}.{key}")
        if checked is not item:
            if mapping is value:
                mapping = dict(value)
            mapping[key] = checked
    return mapping


def _zero(spec: Any) -> Any:
    if spec is STR or spec is B64:
        return ""
    if spec is BOOL:
        return False
    if isinstance(spec, dict):
        return {}
    return None if spec is ANY else ([] if spec[0] == "list" else {})


def type_name(value: Any) -> str:
    """How a value of the wrong type is named in errors (never the value: it may be secret)."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, bytes):
        return "binary data"
    return type(value).__name__


# --------------------------------------------------------------------------- per entry

# Go's net/http refuses header values with control characters other than tab.
HEADER_UNSAFE: Final = re.compile("[\x00-\x08\x0a-\x1f\x7f]")
URL_UNSAFE: Final = re.compile("[\x00-\x20\x7f]")
_REMOVED_PROVIDERS: Final = {
    "azure": "use the kubelogin exec plugin (https://azure.github.io/kubelogin/)",
    "gcp": "use the gke-gcloud-auth-plugin exec plugin",
}
_SOCKS4: Final = ("socks4", "socks4a")
# kubectl: http, https, socks5; kubemux also takes curl's socks5h (the same: Go's socks5
# already lets the proxy resolve the host name)
_PROXY_SCHEMES: Final = ("http", "https", "socks5", "socks5h")


def cluster_problem(body: Mapping[str, Any]) -> str | None:
    """Why a (type-checked) cluster entry cannot be used, or ``None``."""
    server = body.get("server")
    if server and URL_UNSAFE.search(server):
        return "server URL contains a space or a control character"
    path = body.get("certificate-authority")
    if path and "\0" in path:
        return "certificate-authority: the path contains a NUL character"
    proxy = body.get("proxy-url")
    if proxy:
        if URL_UNSAFE.search(proxy):
            return "proxy-url contains a space or a control character"
        scheme = urllib.parse.urlsplit(proxy).scheme.lower()
        if scheme in _SOCKS4:
            return (
                f"proxy-url: {scheme} proxies are not supported (kubectl speaks SOCKS5 only): "
                "use socks5://"
            )
        if scheme not in _PROXY_SCHEMES:
            # kubectl's words (clientcmd's parseProxyURL); the scheme is not secret
            return (
                f"proxy-url: unsupported scheme {scheme[:20]!r}, must be http, "
                "https, socks5 or socks5h"
            )
    return None


def user_problem(body: Mapping[str, Any]) -> str | None:
    """Why a (type-checked) user entry cannot be used, or ``None``."""
    for key in ("token", "as", "as-uid"):
        value = body.get(key)
        if value and HEADER_UNSAFE.search(value):
            return f"{key} contains a line break or a control character"
    for group in body.get("as-groups") or ():
        if HEADER_UNSAFE.search(group):
            return "as-groups contains a line break or a control character"
    for key in ("client-certificate", "client-key", "tokenFile"):
        value = body.get(key)
        if value and "\0" in value:
            return f"{key}: the path contains a NUL character"
    provider = body.get("auth-provider")
    if provider is not None:
        name = provider.get("name") or ""
        if name in _REMOVED_PROVIDERS:
            return (
                f"auth-provider {name!r} was removed from kubectl and client-go: "
                f"{_REMOVED_PROVIDERS[name]}"
            )
        if name != "oidc":
            return f"auth-provider {name!r} is not supported (only 'oidc' is)"
    exec_ = body.get("exec")
    if exec_ is not None:
        words = [exec_.get("command") or "", *(exec_.get("args") or ())]
        for env in exec_.get("env") or ():
            words.extend((env.get("name") or "", env.get("value") or ""))
        if any("\0" in word for word in words):
            return "exec: the command, an argument or an environment variable contains a NUL"
    return None
