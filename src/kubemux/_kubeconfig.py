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

Field types follow kubectl exactly (:mod:`kubemux._kubeconfig_schema`): a wrong-typed field
or illegal base64 anywhere in a file refuses the whole file, as kubectl does (its last good
contexts are kept). What kubectl accepts in the file but fails on when a context is used (a
token with a line break, a NUL in a path, ``auth-provider: azure``/``gcp``, a socks proxy, a
CA file that is a FIFO) makes the contexts using that entry invalid instead.

Each valid context gets a **fingerprint**: a sha256 over the canonical JSON (sorted keys) of
its resolved context, cluster and user entries and the bytes of the CA and client cert/key
files they reference. A ``tokenFile`` counts by its path only: its contents rotate in place
(projected service-account tokens) and the credential layer re-reads it without a restart.
Reformatting or reordering the YAML does not change it; changing the server, a credential, or
the contents of a CA/cert/key file does. A referenced file that is missing hashes as a
marker, so it is not an error here (the client reports it when it is used).

Every file is read through one guarded open: only regular files (opened non-blocking, so a
FIFO cannot hang the reader), at most :data:`MAX_KUBECONFIG_BYTES` for a kubeconfig and
:data:`MAX_REFERENCED_FILE_BYTES` for a CA, cert, key or token file. A kubeconfig file that
changed while it was read, or less than ``_SETTLE_DELAY`` before (a rewrite in place may be
half done), is read again once it has been quiet that long; if it is still moving, its last
good parse is kept and :attr:`KubeconfigLoader.unsettled` names it so that the watcher reads
it again after its debounce. (A first read has nothing to keep: it is used, and marked.)

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
import stat
import time
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import orjson
import yaml

from . import _kubeconfig_schema as schema
from ._errors import ContextNotFound, KubeconfigError
from ._kubeconfig_yaml import load_yaml
from ._redact import redact_url

__all__ = [
    "MAX_KUBECONFIG_BYTES",
    "MAX_REFERENCED_FILE_BYTES",
    "ContextConfig",
    "KubeconfigLoader",
    "KubeconfigSnapshot",
    "kubeconfig_paths",
    "load_kubeconfig",
]

logger = logging.getLogger(__name__)

PathsArg = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None

MEMORY_SOURCE: Final = "<memory>"
MAX_KUBECONFIG_BYTES: Final = 64 * 1024 * 1024
"""The largest kubeconfig file read (5,000 contexts with inline certificates is ~30 MB)."""
MAX_REFERENCED_FILE_BYTES: Final = 4 * 1024 * 1024
"""The largest CA, client certificate/key or token file read (CA bundles are ~200 KB)."""
_SETTLE_DELAY: Final = 0.02  # a file modified more recently than this may be half written
_READ_ATTEMPTS: Final = 3
_ANONYMOUS_USER: Final = "kubemux-anonymous"
_MISSING_FILE: Final = b"<missing>"
_CLUSTER_FILE_FIELDS: Final = ("certificate-authority",)
_USER_FILE_FIELDS: Final = ("client-certificate", "client-key", "tokenFile")
_HASHED_USER_FILE_FIELDS: Final = ("client-certificate", "client-key")  # not tokenFile
_SECTIONS: Final = (("clusters", "cluster"), ("contexts", "context"), ("users", "user"))
_SINGULAR: Final = {"clusters": "cluster", "contexts": "context", "users": "user"}
_JSON_OPTIONS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ContextConfig:
    """One usable kubeconfig context, fully resolved.

    Attributes:
        name: The context name.
        cluster_name: The name of the cluster entry it uses.
        server: The cluster's API server URL, exactly as in the kubeconfig (for connecting:
            it may hold a ``user:password@``). Show :attr:`display_server` instead.
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

    @property
    def display_server(self) -> str:
        """:attr:`server` with any ``user:password@`` replaced by ``***@``, for showing."""
        return redact_url(self.server)

    def client_config(self) -> dict[str, Any]:
        """A fresh, plain copy of :attr:`config` (for building a client; holds secrets)."""
        plain: dict[str, Any] = _plain(self.config)
        return plain

    def __repr__(self) -> str:
        return (
            f"ContextConfig(name={self.name!r}, server={self.display_server!r}, "
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
        self._unsettled: tuple[str, ...] = ()

    @property
    def unsettled(self) -> tuple[str, ...]:
        """Files the last :meth:`load` found still changing: read them again after a pause.

        Their last good parse was used (or, with none yet, the unsettled read itself).
        """
        return self._unsettled

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
        unsettled: list[str] = []
        for path in self.files:
            last = self._last_good.get(path)
            try:
                data, settled = _read_kubeconfig(path, None if last is None else last.data)
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
            if not settled:
                unsettled.append(path)
                if last is not None:  # maybe half written: not the truth until it settles
                    logger.debug("kubeconfig file %s is still changing; read it later", path)
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
        self._unsettled = tuple(unsettled)
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
    # entry name -> why it cannot be used (kubectl loads it but fails when it is used)
    cluster_problems: dict[str, str] = dataclasses.field(default_factory=dict)
    user_problems: dict[str, str] = dataclasses.field(default_factory=dict)


class _FileProblem(Exception):
    """A file that exists cannot be read as one (not a regular file, too large, bad path)."""


def _read_regular(path: str, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most ``limit`` bytes, and its fstat before reading.

    Opened non-blocking, so that a FIFO returns at once (and is refused) instead of waiting
    for a writer; devices and folders are refused before anything is read.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        _FileProblem: Anything else (message without the path).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _FileProblem(f"cannot read: {exc.strerror or type(exc).__name__}") from exc
    except ValueError as exc:  # a NUL in the path; a lone surrogate
        raise _FileProblem("the path is not a valid file name (a NUL character?)") from exc
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise _FileProblem("not a regular file (a FIFO, a device or a folder?)")
        if before.st_size > limit:
            raise _FileProblem(f"larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, min(limit + 1 - size, 1 << 20) or 1)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise _FileProblem(f"larger than {limit} bytes")
        return b"".join(chunks), before
    except OSError as exc:
        raise _FileProblem(f"cannot read: {exc.strerror or type(exc).__name__}") from exc
    finally:
        os.close(fd)


def _read_kubeconfig(path: str, known: bytes | None) -> tuple[bytes, bool]:
    """Read a kubeconfig file; ``(data, settled)``.

    ``settled`` is false when the file changed while it was read, or was modified less than
    ``_SETTLE_DELAY`` seconds ago: an in-place rewrite may be half done, and its prefix may be
    valid YAML. With ``known`` (the last good contents), a new unsettled read is retried once
    the file has been quiet for that long (``_READ_ATTEMPTS`` reads in all); without it (a
    first read) only a read that changed under us is retried, at once.

    Raises:
        FileNotFoundError: The file does not exist.
        KubeconfigError: It cannot be read (the message names it).
    """
    for attempt in range(_READ_ATTEMPTS):
        try:
            data, before = _read_regular(path, MAX_KUBECONFIG_BYTES)
        except _FileProblem as exc:
            raise KubeconfigError(f"{path}: {exc}", path=path) from exc
        try:
            after = os.stat(path)
        except OSError:
            stable, age = False, 0.0
        else:
            stable = len(data) == before.st_size and (
                before.st_ino,
                before.st_size,
                before.st_mtime_ns,
                before.st_ctime_ns,
            ) == (after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns)
            age = time.time() - after.st_mtime_ns / 1e9
        hot = -_SETTLE_DELAY < age < _SETTLE_DELAY
        if stable and (not hot or data == known):
            return data, True
        if attempt + 1 == _READ_ATTEMPTS or (stable and known is None):
            break
        if known is not None:
            time.sleep(min(max(_SETTLE_DELAY - age, 0.001), _SETTLE_DELAY))
    return data, False


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
    except RecursionError as exc:
        raise KubeconfigError(f"{path}: invalid YAML: nested too deeply", path=path) from exc
    try:
        return _parse_document(path, document, base_dir=os.path.dirname(path), data=data)
    except RecursionError as exc:
        raise KubeconfigError(f"{path}: not a valid kubeconfig: nested too deeply") from exc


def _parse_document(
    path: str, document: Any, *, base_dir: str | None, data: bytes = b""
) -> _ParsedFile:
    """Type-check one kubeconfig document as kubectl does and resolve its relative paths."""

    def fail(problem: str) -> KubeconfigError:
        return KubeconfigError(
            f"{path}: not a valid kubeconfig: {problem}",
            path=None if path == MEMORY_SOURCE else path,
        )

    is_blank = document is None  # empty, whitespace or comments only
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise fail(f"expected a mapping at the top level, got {schema.type_name(document)}")
    try:
        top = schema.check_entry(document, schema.CONFIG)
    except schema.SchemaError as exc:
        raise fail(str(exc)) from None
    kind = top.get("kind")
    if kind not in (None, "", "Config"):
        raise fail(f"kind is {kind!r}, expected 'Config'")
    current = top.get("current-context") or ""
    sections: dict[str, dict[str, dict[str, Any]]] = {}
    for section, body_key in _SECTIONS:
        entries = document.get(section)
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise fail(f"{section!r} must be a list, got {schema.type_name(entries)}")
        by_name: dict[str, dict[str, Any]] = {}
        for index, entry in enumerate(entries):
            where = f"{section}[{index}]"
            if entry is None:
                entry = {}
            if not isinstance(entry, dict):
                raise fail(f"{where} must be a mapping, got {schema.type_name(entry)}")
            name = entry.get("name")
            if name is None:
                name = ""
            if not isinstance(name, str):
                raise fail(f"{where}.name must be a string, got {schema.type_name(name)}")
            body = entry.get(body_key)
            if body is None:
                body = {}
            if not isinstance(body, dict):
                raise fail(f"{where}.{body_key} must be a mapping, got {schema.type_name(body)}")
            if name in by_name:
                raise fail(f"duplicate name {name!r} in {section!r}")
            by_name[name] = body
        sections[section] = by_name

    def check(section: str, name: str, body: dict[str, Any], spec: Any) -> dict[str, Any]:
        try:
            return schema.check_entry(body, spec)
        except schema.SchemaError as exc:
            owner = f"{_SINGULAR[section]} {name!r}"
            if section != "contexts":
                key = "cluster" if section == "clusters" else "user"
                users = [c for c, b in sections["contexts"].items() if b.get(key) == name]
                if users:
                    shown = ", ".join(repr(c) for c in users[:3])
                    more = f" and {len(users) - 3} more" if len(users) > 3 else ""
                    owner = f"{owner} (used by context {shown}{more})"
            raise fail(f"{owner}: {exc}") from None

    contexts = sections["contexts"]
    for name, body in contexts.items():
        contexts[name] = check("contexts", name, body, schema.CONTEXT)
    clusters = sections["clusters"]
    cluster_problems: dict[str, str] = {}
    for name, body in clusters.items():
        body = check("clusters", name, body, schema.CLUSTER)
        problem = schema.cluster_problem(body)
        if problem is not None:
            cluster_problems[name] = problem
            clusters[name] = body
        else:
            clusters[name] = _resolve(body, _CLUSTER_FILE_FIELDS, base_dir)
    users = sections["users"]
    user_problems: dict[str, str] = {}
    for name, body in users.items():
        body = check("users", name, body, schema.USER)
        problem = schema.user_problem(body)
        if problem is not None:
            user_problems[name] = problem
            users[name] = body
            continue
        resolved = _resolve(body, _USER_FILE_FIELDS, base_dir)
        exec_ = resolved.get("exec")
        command = exec_.get("command") if exec_ is not None else None
        # client-go resolves the exec command only when it is a path, not a $PATH lookup
        if exec_ is not None and command and "/" in command:
            if resolved is body:
                resolved = dict(body)
            resolved["exec"] = _resolve(exec_, ("command",), base_dir)
        users[name] = resolved
    return _ParsedFile(
        path=path,
        data=data,
        clusters=clusters,
        contexts=contexts,
        users=users,
        current_context=current,
        is_blank=is_blank,
        cluster_problems=cluster_problems,
        user_problems=user_problems,
    )


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
    cluster_problems: dict[str, str] = {}
    user_problems: dict[str, str] = {}
    current: str | None = None
    for pf in parsed_files:
        for name, body in pf.clusters.items():
            if name not in clusters:
                clusters[name] = body
                if name in pf.cluster_problems:
                    cluster_problems[name] = pf.cluster_problems[name]
        for name, body in pf.users.items():
            if name not in users:
                users[name] = body
                if name in pf.user_problems:
                    user_problems[name] = pf.user_problems[name]
        for name, body in pf.contexts.items():
            contexts.setdefault(name, (body, pf.path))
        if current is None and pf.current_context:
            current = pf.current_context

    file_hashes: dict[str, bytes | _RefProblem] = {}
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
        elif cluster_name in cluster_problems:
            invalid[name] = f"cluster {cluster_name!r}: {cluster_problems[cluster_name]}"
        elif user_name in user_problems:
            invalid[name] = f"user {user_name!r}: {user_problems[user_name]}"
        else:
            refs = _file_refs(cluster, _CLUSTER_FILE_FIELDS)
            if user is not None:
                refs.extend(_file_refs(user, _HASHED_USER_FILE_FIELDS))
            token_file = user.get("tokenFile") if user is not None else None
            try:
                if token_file:
                    _check_token_file(token_file)
                valid[name] = _build_context(
                    name, ctx, source, cluster_name, cluster, user_name, user, refs, file_hashes
                )
            except _RefProblem as exc:
                invalid[name] = str(exc)
            except (orjson.JSONEncodeError, RecursionError) as exc:  # a huge int, deep nesting
                invalid[name] = f"entries cannot be encoded: {exc}"
            else:
                referenced.update(refs)
                if token_file:
                    referenced.add(token_file)
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
    file_hashes: dict[str, bytes | _RefProblem],
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


class _RefProblem(Exception):
    """A file a context references exists but cannot be used (the message names it)."""


def _hash_file(path: str, cache: dict[str, bytes | _RefProblem]) -> bytes:
    """sha256 of a referenced file, once per load; a missing file is a marker, not an error.

    Raises:
        _RefProblem: The file is not a regular file, is too large, or its path is invalid.
    """
    cached = cache.get(path)
    if cached is None:
        try:
            data, _ = _read_regular(path, MAX_REFERENCED_FILE_BYTES)
        except FileNotFoundError:
            cached = _MISSING_FILE
        except _FileProblem as exc:
            if str(exc).startswith("cannot read"):  # e.g. permissions: the client says more
                cached = f"<{exc}>".encode()
            else:
                cached = _RefProblem(f"{path}: {exc}")
        else:
            cached = hashlib.sha256(data).digest()
        cache[path] = cached
    if isinstance(cached, _RefProblem):
        raise cached
    return cached


def _check_token_file(path: str) -> None:
    """A token file may be missing (it is read when used) but not a FIFO or huge.

    Raises:
        _RefProblem: It exists and is not a regular file of at most the size cap.
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return
    if not stat.S_ISREG(st.st_mode):
        raise _RefProblem(f"{path}: not a regular file (a FIFO, a device or a folder?)")
    if st.st_size > MAX_REFERENCED_FILE_BYTES:
        raise _RefProblem(f"{path}: larger than {MAX_REFERENCED_FILE_BYTES} bytes")


def _json_default(value: Any) -> Any:
    # YAML can produce values JSON cannot hold (timestamps become datetimes in PyYAML,
    # !!binary becomes bytes, !!set a set); kubectl would see strings.
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)
