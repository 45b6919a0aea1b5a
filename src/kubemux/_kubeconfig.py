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
token with a line break, a NUL in a path, ``auth-provider: azure``/``gcp``, a socks4 proxy, a
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
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from ._errors import ContextNotFound, KubeconfigError
from ._kubeconfig_files import (
    MAX_KUBECONFIG_BYTES,
    MAX_REFERENCED_FILE_BYTES,
    RefProblem,
    check_token_file,
    hash_file,
    read_kubeconfig,
)
from ._kubeconfig_parse import (
    CLUSTER_FILE_FIELDS,
    MEMORY_SOURCE,
    ParsedFile,
    parse_document,
    parse_file,
)
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

log = logging.getLogger(__name__)

PathsArg = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None

_ANONYMOUS_USER: Final = "kubemux-anonymous"
_HASHED_USER_FIELDS: Final = ("client-certificate", "client-key")  # not tokenFile
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
    user_source: str | None = dataclasses.field(default=None, compare=False)
    """The file that defined the user entry, when it is not :attr:`source` (merged
    kubeconfigs): where a refreshed OIDC token is written back."""

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
        parsed = parse_document(MEMORY_SOURCE, _plain(config), base_dir=None)
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
        invalid_sources: Invalid context name -> the file that defined it.
    """

    contexts: Mapping[str, ContextConfig]
    invalid: Mapping[str, str]
    current_context: str | None
    errors: Mapping[str, str]
    files: tuple[str, ...]
    referenced_files: frozenset[str]
    missing: tuple[str, ...] = ()
    invalid_sources: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )

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
        self._last_good: dict[str, ParsedFile] = {}
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
        parsed_files: list[ParsedFile] = []
        errors: dict[str, str] = {}
        missing: list[str] = []
        unsettled: list[str] = []
        for path in self.files:
            last = self._last_good.get(path)
            try:
                data, settled = read_kubeconfig(path, None if last is None else last.data)
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
                    log.debug("kubeconfig file %s is still changing; read it later", path)
                    parsed_files.append(last)
                    continue
            try:
                parsed = parse_file(path, data)
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
            log.debug("kubeconfig file %s failed to load: %s", path, message)
        self._unsettled = tuple(unsettled)
        return _merge(parsed_files, self.files, errors=errors, missing=tuple(missing))


# --------------------------------------------------------------------------- helpers


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- merging


def _merge(
    parsed_files: Sequence[ParsedFile],
    files: Sequence[str],
    *,
    errors: dict[str, str],
    missing: tuple[str, ...],
) -> KubeconfigSnapshot:
    clusters: dict[str, dict[str, Any]] = {}
    users: dict[str, dict[str, Any]] = {}
    user_files: dict[str, str] = {}  # user name -> the file that defined it
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
                user_files[name] = pf.path
                if name in pf.user_problems:
                    user_problems[name] = pf.user_problems[name]
        for name, body in pf.contexts.items():
            contexts.setdefault(name, (body, pf.path))
        if current is None and pf.current_context:
            current = pf.current_context

    file_hashes: dict[str, bytes | RefProblem] = {}
    defined_in: dict[str, str] = {}
    valid: dict[str, ContextConfig] = {}
    invalid: dict[str, str] = {}
    referenced: set[str] = set()
    for name, (ctx, source) in contexts.items():
        defined_in[name] = source
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
            refs = _file_refs(cluster, CLUSTER_FILE_FIELDS)
            if user is not None:
                refs.extend(_file_refs(user, _HASHED_USER_FIELDS))
            token_file = user.get("tokenFile") if user is not None else None
            try:
                if token_file:
                    check_token_file(token_file)
                valid[name] = _build_context(
                    name, ctx, source, cluster_name, cluster, user_name, user, refs, file_hashes
                )
                if user_files.get(user_name, source) != source:
                    valid[name] = dataclasses.replace(
                        valid[name], user_source=user_files[user_name]
                    )
            except RefProblem as exc:
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
        invalid_sources=types.MappingProxyType({n: defined_in[n] for n in invalid}),
        current_context=current,
        errors=types.MappingProxyType(dict(errors)),
        files=tuple(files),
        referenced_files=frozenset(referenced),
        missing=missing,
    )


_AUTH_PROVIDER_MATERIAL: Final = frozenset(
    {"id-token", "refresh-token", "access-token", "expiry", "expires-in", "expires-on"}
)


def credential_insensitive(user_entry: Mapping[str, Any]) -> dict[str, Any]:
    """``user_entry`` without what a refresh rewrites in place, for fingerprints.

    The id-token, refresh-token (and the access-token and expiry of removed providers) of
    an ``auth-provider`` entry change when kubemux or kubectl refresh them; a fingerprint
    computed over this view does not, so such a write-back does not restart the context.
    Everything else (an inline ``token``, certificate data, exec settings) is kept.
    """
    out = dict(user_entry)
    provider = out.get("auth-provider")
    if isinstance(provider, Mapping):
        provider = dict(provider)
        config = provider.get("config")
        if isinstance(config, Mapping):
            provider["config"] = {
                k: v for k, v in config.items() if k not in _AUTH_PROVIDER_MATERIAL
            }
        out["auth-provider"] = provider
    return out


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
    file_hashes: dict[str, bytes | RefProblem],
) -> ContextConfig:
    document = {
        "context": {"name": name, "context": ctx},
        "cluster": {"name": cluster_name, "cluster": cluster},
        "user": None if user is None else {"name": user_name, "user": user},
    }
    canonical = orjson.dumps(document, default=_json_default, option=_JSON_OPTIONS)
    if user is not None and "auth-provider" in user:  # refreshed in place: not identity
        stable = {**document, "user": {"name": user_name, "user": credential_insensitive(user)}}
        digest = hashlib.sha256(orjson.dumps(stable, default=_json_default, option=_JSON_OPTIONS))
    else:
        digest = hashlib.sha256(canonical)
    for ref in sorted(set(refs)):
        digest.update(b"\0" + ref.encode("utf-8", "surrogateescape") + b"\0")
        digest.update(hash_file(ref, file_hashes))
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


def _json_default(value: Any) -> Any:
    # YAML can produce values JSON cannot hold (timestamps become datetimes in PyYAML,
    # !!binary becomes bytes, !!set a set); kubectl would see strings.
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)
