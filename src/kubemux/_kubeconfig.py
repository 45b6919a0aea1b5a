"""Load and merge kubeconfig files into :class:`ContextConfig` values (sync, no event loop).

Merging follows kubectl (``kubectl config view --merge``, client-go ``ClientConfigLoadingRules``):

- Files are taken in order; for each context, cluster and user *name* the first file that
  defines it wins, and its whole entry is used (entries are never merged field by field).
- ``current-context`` comes from the first file that sets a non-empty one. It is reported
  as is, even when it names a context that does not exist or is invalid.
- A missing file in the list contributes nothing. A file that cannot be read or parsed is an
  error (kubectl fails the whole command; :class:`KubeconfigLoader` keeps that file's last
  good contents instead and reports the error, see below).
- Two entries with the same name inside one file are an error, as in kubectl.
- File paths in a cluster (``certificate-authority``) or user (``client-certificate``,
  ``client-key``, ``tokenFile``, and ``exec.command`` when it contains a ``/``) that are
  relative are resolved against the folder of the file that defined that entry. ``~`` is not
  expanded (client-go does not either: ``~/ca.crt`` is a relative path).

Validity (client-go is more lenient; we prefer an explicit error to a silently anonymous or
serverless client):

- A context whose cluster is not defined, or whose ``user`` names an undefined user, is
  *invalid* (``"cluster 'x' not found"``, ``"user 'y' not found"``). So is one whose cluster
  has no server (``"no server"``), one with no ``cluster`` field, and one with an empty name.
- A context with no ``user`` (or an empty one) is valid and anonymous, as in client-go, which
  then uses an empty AuthInfo. Its ``user_name`` is ``""``.

Each valid context gets a **fingerprint**: a sha256 over the canonical JSON (sorted keys) of
its resolved context, cluster and user entries and the bytes of every file they reference.
Reformatting or reordering the YAML does not change it; changing the server, a credential, or
the contents of a CA/cert/key/token file does. A referenced file that is missing hashes as a
marker, so it is not an error here (the client reports it when it is used).

:class:`KubeconfigLoader` is meant to be called again and again (by the watcher): each file's
last good parse is kept, and a file that currently fails to load (half-written, invalid YAML,
unreadable) keeps contributing that last good parse while its error shows in
:attr:`KubeconfigSnapshot.errors`. Only a clean parse that lacks a context, or the file being
deleted, removes it. A file that becomes *empty* after having had contents is treated as
half-written too (editors and ``open(path, "w")`` truncate before writing): delete the file to
remove its contexts. :func:`load_kubeconfig` is the strict one-shot variant.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import orjson
import yaml

from ._errors import ContextNotFound, KubeconfigError
from ._kubeconfig_yaml import load_yaml

__all__ = [
    "ContextConfig",
    "KubeconfigLoader",
    "KubeconfigSnapshot",
    "kubeconfig_paths",
    "load_kubeconfig",
]

logger = logging.getLogger(__name__)

PathsArg = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None

MEMORY_SOURCE: Final = "<memory>"
_ANONYMOUS_USER: Final = "kubemux-anonymous"
_MISSING_FILE: Final = b"<missing>"
_CLUSTER_FILE_FIELDS: Final = ("certificate-authority",)
_USER_FILE_FIELDS: Final = ("client-certificate", "client-key", "tokenFile")
_SECTIONS: Final = (("clusters", "cluster"), ("contexts", "context"), ("users", "user"))
_JSON_OPTIONS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ContextConfig:
    """One usable kubeconfig context, fully resolved.

    Attributes:
        name: The context name.
        cluster_name: The name of the cluster entry it uses.
        server: The cluster's API server URL.
        user_name: The name of the user entry, ``""`` for an anonymous context.
        namespace: The context's default namespace, ``None`` if unset.
        source: Absolute path of the file that defined the context (``"<memory>"`` when
            built with :meth:`from_dict`).
        fingerprint: sha256 hex digest of the resolved entries and the referenced files.
        config: A self-contained kubeconfig dict for just this context (one cluster, one
            user, one context, ``current-context`` set, file paths absolute), ready for
            ``kubernetes_asyncio``'s ``KubeConfigLoader(config_dict=...)``. It holds secrets,
            so it never appears in ``repr()``; treat it as read-only. An anonymous context
            gets an empty user entry named ``kubemux-anonymous`` so that the loader accepts
            it.
    """

    name: str
    cluster_name: str
    server: str
    user_name: str
    namespace: str | None
    source: str
    fingerprint: str
    config: Mapping[str, Any] = dataclasses.field(repr=False, compare=False)

    def client_config(self) -> dict[str, Any]:
        """A fresh, plain copy of :attr:`config` (for building a client; holds secrets)."""
        plain: dict[str, Any] = _plain(self.config)
        return plain

    def __repr__(self) -> str:
        return (
            f"ContextConfig(name={self.name!r}, server={self.server!r}, "
            f"cluster_name={self.cluster_name!r}, user_name={self.user_name!r}, "
            f"namespace={self.namespace!r}, source={self.source!r}, "
            f"fingerprint={self.fingerprint[:12]!r})"
        )

    @classmethod
    def from_dict(cls, name: str, config: Mapping[str, Any]) -> ContextConfig:
        """Build the context ``name`` from an in-memory kubeconfig dict.

        For embedding, when the kubeconfig comes from a database or a secret. Relative file
        paths are left as they are (there is no file to resolve them against).

        Raises:
            KubeconfigError: ``config`` is not a valid kubeconfig, or the context is invalid
                (its cluster or user is missing, or it has no server).
            ContextNotFound: ``config`` has no context called ``name``.
        """
        parsed = _parse_document(MEMORY_SOURCE, _plain(config), base_dir=None)
        merged = _merge([parsed], [MEMORY_SOURCE], errors={}, missing=())
        if name in merged.contexts:
            return merged.contexts[name]
        if name in merged.invalid:
            raise KubeconfigError(f"context {name!r} is invalid: {merged.invalid[name]}")
        raise ContextNotFound(name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class KubeconfigSnapshot:
    """The merged kubeconfig at one point in time (an immutable value).

    Attributes:
        contexts: Valid contexts by name, in merge order (file order, then entry order).
        invalid: Context name -> why it cannot be used (``"cluster 'x' not found"``,
            ``"user 'y' not found"``, ``"no server"``, ...).
        current_context: kubectl's current context, ``None`` if no file sets one. It may
            name a context that is missing or invalid.
        errors: File path -> error text, for files that currently fail to load; their last
            good contents (if any) are still used.
        files: The kubeconfig files, in merge order (absolute paths).
        referenced_files: CA, client cert/key and token files that valid contexts reference.
        missing: The files of :attr:`files` that do not exist.
    """

    contexts: Mapping[str, ContextConfig]
    invalid: Mapping[str, str]
    current_context: str | None
    errors: Mapping[str, str]
    files: tuple[str, ...]
    referenced_files: frozenset[str]
    missing: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return (
            f"<KubeconfigSnapshot contexts={len(self.contexts)} invalid={len(self.invalid)} "
            f"errors={len(self.errors)} files={len(self.files)} "
            f"current_context={self.current_context!r}>"
        )


def kubeconfig_paths(paths: PathsArg = None) -> list[Path]:
    """The kubeconfig files to merge, as absolute paths, in merge order.

    Args:
        paths: ``None`` for ``$KUBECONFIG`` (split on ``os.pathsep``), or ``~/.kube/config``
            when it is unset or has no non-empty entry. A string containing ``os.pathsep``
            is split the same way. ``~`` is expanded in paths given here (not in
            ``$KUBECONFIG``, where the shell does it). Empty entries are dropped, and
            duplicates too (the first one is kept).
    """
    raw: list[str]
    if paths is None:
        env = os.environ.get("KUBECONFIG", "")
        raw = env.split(os.pathsep)
        if not any(raw):
            raw = [str(Path.home() / ".kube" / "config")]
    elif isinstance(paths, str | os.PathLike):
        text = os.fspath(paths)
        raw = [os.path.expanduser(p) for p in text.split(os.pathsep)]
    else:
        raw = [os.path.expanduser(os.fspath(p)) for p in paths]
    result: list[Path] = []
    seen: set[str] = set()
    for entry in raw:
        if not entry:
            continue
        absolute = os.path.abspath(entry)
        if absolute not in seen:
            seen.add(absolute)
            result.append(Path(absolute))
    return result


def load_kubeconfig(paths: PathsArg = None) -> KubeconfigSnapshot:
    """Load and merge the kubeconfig once, strictly.

    Args:
        paths: As for :func:`kubeconfig_paths`.

    Raises:
        KubeconfigError: A file cannot be read or parsed (the message names it, with line
            and column for YAML errors), or none of the files exists.
    """
    files = kubeconfig_paths(paths)
    if not files:
        raise KubeconfigError("no kubeconfig file given")
    snapshot = KubeconfigLoader(files).load()
    if snapshot.errors:
        first = next(iter(snapshot.errors))
        raise KubeconfigError("; ".join(snapshot.errors.values()), path=first)
    if len(snapshot.missing) == len(files):
        if len(files) == 1:
            raise KubeconfigError(f"kubeconfig file {files[0]} does not exist", path=str(files[0]))
        tried = ", ".join(str(f) for f in files)
        raise KubeconfigError(f"no kubeconfig file found (tried: {tried})")
    return snapshot


class KubeconfigLoader:
    """Reads and merges the kubeconfig files, remembering each file's last good parse.

    Not thread-safe: call :meth:`load` from one thread at a time (the watcher serialises its
    syncs).
    """

    def __init__(self, paths: PathsArg = None) -> None:
        """Fix the list of files now (``$KUBECONFIG`` is read here, not on every load).

        Args:
            paths: As for :func:`kubeconfig_paths`.
        """
        self.files: tuple[str, ...] = tuple(str(p) for p in kubeconfig_paths(paths))
        self._last_good: dict[str, _ParsedFile] = {}

    def __repr__(self) -> str:
        return f"<KubeconfigLoader files={list(self.files)!r}>"

    def load(self) -> KubeconfigSnapshot:
        """Read every file once, merge them, and return the snapshot. Never raises for bad input.

        A file that fails to load keeps contributing its last good parse (if it ever had one)
        and its error goes into :attr:`KubeconfigSnapshot.errors`; a missing file contributes
        nothing.
        """
        parsed_files: list[_ParsedFile] = []
        errors: dict[str, str] = {}
        missing: list[str] = []
        for path in self.files:
            last = self._last_good.get(path)
            try:
                data = _read_file(path)
            except FileNotFoundError:
                self._last_good.pop(path, None)
                missing.append(path)
                continue
            except KubeconfigError as exc:
                errors[path] = str(exc)
                if last is not None:
                    parsed_files.append(last)
                continue
            if last is not None and last.data == data:
                parsed_files.append(last)
                continue
            try:
                parsed = _parse_file(path, data)
            except KubeconfigError as exc:
                errors[path] = str(exc)
                if last is not None:
                    parsed_files.append(last)
                continue
            if parsed.is_blank and last is not None and not last.is_blank:
                errors[path] = (
                    f"{path}: file is empty (probably being written); keeping its last good "
                    "contents (delete the file to remove its contexts)"
                )
                parsed_files.append(last)
                continue
            self._last_good[path] = parsed
            parsed_files.append(parsed)
        for path, message in errors.items():
            logger.debug("kubeconfig file %s failed to load: %s", path, message)
        return _merge(parsed_files, self.files, errors=errors, missing=tuple(missing))


# --------------------------------------------------------------------------- parsing


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _ParsedFile:
    path: str
    data: bytes
    clusters: dict[str, dict[str, Any]]
    contexts: dict[str, dict[str, Any]]
    users: dict[str, dict[str, Any]]
    current_context: str
    is_blank: bool


def _read_file(path: str) -> bytes:
    """Read a kubeconfig file; FileNotFoundError passes through, other OSErrors convert."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise KubeconfigError(f"{path}: cannot read: {reason}", path=path) from exc


def _parse_file(path: str, data: bytes) -> _ParsedFile:
    try:
        document = load_yaml(data)
    except yaml.MarkedYAMLError as exc:
        # Built by hand: str(exc) can quote a snippet of the file, which may hold a secret.
        where = ""
        if exc.problem_mark is not None:
            where = f" at line {exc.problem_mark.line + 1}, column {exc.problem_mark.column + 1}"
        problem = exc.problem or "syntax error"
        if exc.context:
            problem = f"{problem} ({exc.context})"
        raise KubeconfigError(f"{path}: invalid YAML{where}: {problem}", path=path) from exc
    except yaml.YAMLError as exc:  # ReaderError: bad encoding or control characters
        raise KubeconfigError(f"{path}: invalid YAML: {exc}", path=path) from exc
    return _parse_document(path, document, base_dir=os.path.dirname(path), data=data)


def _parse_document(
    path: str, document: Any, *, base_dir: str | None, data: bytes = b""
) -> _ParsedFile:
    """Check the shape of one kubeconfig document and resolve its relative file paths."""

    def fail(problem: str) -> KubeconfigError:
        return KubeconfigError(
            f"{path}: not a valid kubeconfig: {problem}",
            path=None if path == MEMORY_SOURCE else path,
        )

    is_blank = document is None  # empty, whitespace or comments only
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise fail(f"expected a mapping at the top level, got {_type_name(document)}")
    kind = document.get("kind")
    if kind not in (None, "", "Config"):
        raise fail(f"kind is {kind!r}, expected 'Config'")
    current = document.get("current-context")
    if current is None:
        current = ""
    if not isinstance(current, str):
        raise fail(f"current-context must be a string, got {_type_name(current)}")
    sections: dict[str, dict[str, dict[str, Any]]] = {}
    for section, body_key in _SECTIONS:
        entries = document.get(section)
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise fail(f"{section!r} must be a list, got {_type_name(entries)}")
        by_name: dict[str, dict[str, Any]] = {}
        for index, entry in enumerate(entries):
            where = f"{section}[{index}]"
            if not isinstance(entry, dict):
                raise fail(f"{where} must be a mapping, got {_type_name(entry)}")
            name = entry.get("name")
            if name is None:
                name = ""
            if not isinstance(name, str):
                raise fail(f"{where}.name must be a string, got {_type_name(name)}")
            body = entry.get(body_key)
            if body is None:
                body = {}
            if not isinstance(body, dict):
                raise fail(f"{where}.{body_key} must be a mapping, got {_type_name(body)}")
            if name in by_name:
                raise fail(f"duplicate name {name!r} in {section!r}")
            by_name[name] = body
        sections[section] = by_name
    for name, body in sections["contexts"].items():
        for key in ("cluster", "user", "namespace"):
            _check_str(body, key, f"context {name!r}", fail)
    for name, body in sections["clusters"].items():
        _check_str(body, "server", f"cluster {name!r}", fail)
        _check_str(body, "certificate-authority", f"cluster {name!r}", fail)
        sections["clusters"][name] = _resolve(body, _CLUSTER_FILE_FIELDS, base_dir)
    for name, body in sections["users"].items():
        for key in _USER_FILE_FIELDS:
            _check_str(body, key, f"user {name!r}", fail)
        resolved = _resolve(body, _USER_FILE_FIELDS, base_dir)
        exec_ = resolved.get("exec")
        if exec_ is not None and not isinstance(exec_, dict):
            raise fail(f"user {name!r}: exec must be a mapping, got {_type_name(exec_)}")
        if exec_ is not None:
            _check_str(exec_, "command", f"user {name!r}: exec", fail)
            command = exec_.get("command")
            # client-go resolves the exec command only when it is a path, not a $PATH lookup
            if command and "/" in command:
                resolved["exec"] = _resolve(exec_, ("command",), base_dir)
        sections["users"][name] = resolved
    return _ParsedFile(
        path=path,
        data=data,
        clusters=sections["clusters"],
        contexts=sections["contexts"],
        users=sections["users"],
        current_context=current,
        is_blank=is_blank,
    )


def _check_str(
    body: Mapping[str, Any], key: str, owner: str, fail: Callable[[str], KubeconfigError]
) -> None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise fail(f"{owner}: {key} must be a string, got {_type_name(value)}")


def _resolve(body: dict[str, Any], fields: Sequence[str], base_dir: str | None) -> dict[str, Any]:
    """A copy of ``body`` with its relative file-path ``fields`` made absolute."""
    if base_dir is None:
        return body
    out = body
    for key in fields:
        value = body.get(key)
        if value and not os.path.isabs(value):
            if out is body:
                out = dict(body)
            out[key] = os.path.normpath(os.path.join(base_dir, value))
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


# --------------------------------------------------------------------------- merging


def _merge(
    parsed_files: Sequence[_ParsedFile],
    files: Sequence[str],
    *,
    errors: dict[str, str],
    missing: tuple[str, ...],
) -> KubeconfigSnapshot:
    clusters: dict[str, dict[str, Any]] = {}
    users: dict[str, dict[str, Any]] = {}
    contexts: dict[str, tuple[dict[str, Any], str]] = {}
    current: str | None = None
    for pf in parsed_files:
        for name, body in pf.clusters.items():
            clusters.setdefault(name, body)
        for name, body in pf.users.items():
            users.setdefault(name, body)
        for name, body in pf.contexts.items():
            contexts.setdefault(name, (body, pf.path))
        if current is None and pf.current_context:
            current = pf.current_context

    file_hashes: dict[str, bytes] = {}
    valid: dict[str, ContextConfig] = {}
    invalid: dict[str, str] = {}
    referenced: set[str] = set()
    for name, (ctx, source) in contexts.items():
        cluster_name = ctx.get("cluster") or ""
        user_name = ctx.get("user") or ""
        cluster = clusters.get(cluster_name)
        user = users.get(user_name) if user_name else None
        if not name:
            invalid[name] = "context has no name"
        elif not cluster_name:
            invalid[name] = "context has no cluster"
        elif cluster is None:
            invalid[name] = f"cluster {cluster_name!r} not found"
        elif user_name and user is None:
            invalid[name] = f"user {user_name!r} not found"
        elif not cluster.get("server"):
            invalid[name] = "no server"
        else:
            refs = _file_refs(cluster, _CLUSTER_FILE_FIELDS)
            if user is not None:
                refs.extend(_file_refs(user, _USER_FILE_FIELDS))
            try:
                valid[name] = _build_context(
                    name, ctx, source, cluster_name, cluster, user_name, user, refs, file_hashes
                )
            except orjson.JSONEncodeError as exc:  # e.g. a recursive YAML alias, a huge int
                invalid[name] = f"entries cannot be encoded: {exc}"
            else:
                referenced.update(refs)
    return KubeconfigSnapshot(
        contexts=types.MappingProxyType(valid),
        invalid=types.MappingProxyType(invalid),
        current_context=current,
        errors=types.MappingProxyType(dict(errors)),
        files=tuple(files),
        referenced_files=frozenset(referenced),
        missing=missing,
    )


def _file_refs(body: Mapping[str, Any], fields: Sequence[str]) -> list[str]:
    return [value for key in fields if (value := body.get(key))]


def _build_context(
    name: str,
    ctx: dict[str, Any],
    source: str,
    cluster_name: str,
    cluster: dict[str, Any],
    user_name: str,
    user: dict[str, Any] | None,
    refs: Sequence[str],
    file_hashes: dict[str, bytes],
) -> ContextConfig:
    document = {
        "context": {"name": name, "context": ctx},
        "cluster": {"name": cluster_name, "cluster": cluster},
        "user": None if user is None else {"name": user_name, "user": user},
    }
    canonical = orjson.dumps(document, default=_json_default, option=_JSON_OPTIONS)
    digest = hashlib.sha256(canonical)
    for ref in sorted(set(refs)):
        digest.update(b"\0" + ref.encode("utf-8", "surrogateescape") + b"\0")
        digest.update(_hash_file(ref, file_hashes))
    # A fresh copy (JSON round trip) so that no two contexts share mutable dicts.
    copy = orjson.loads(canonical)
    context_entry = copy["context"]
    if copy["user"] is None:
        context_entry["context"]["user"] = _ANONYMOUS_USER
        copy["user"] = {"name": _ANONYMOUS_USER, "user": {}}
    namespace = ctx.get("namespace") or None
    return ContextConfig(
        name=name,
        cluster_name=cluster_name,
        server=cluster["server"],
        user_name=user_name,
        namespace=namespace,
        source=source,
        fingerprint=digest.hexdigest(),
        config={
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [copy["cluster"]],
            "users": [copy["user"]],
            "contexts": [context_entry],
            "current-context": name,
        },
    )


def _hash_file(path: str, cache: dict[str, bytes]) -> bytes:
    """sha256 of a referenced file, once per load; a missing file is a marker, not an error."""
    cached = cache.get(path)
    if cached is not None:
        return cached
    try:
        with open(path, "rb") as f:
            result = hashlib.file_digest(f, "sha256").digest()
    except FileNotFoundError:
        result = _MISSING_FILE
    except OSError as exc:
        result = f"<unreadable: {exc.errno}>".encode()
    cache[path] = result
    return result


def _json_default(value: Any) -> Any:
    # YAML can produce values JSON cannot hold (timestamps become datetimes in PyYAML,
    # !!binary becomes bytes, !!set a set); kubectl would see strings.
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)
