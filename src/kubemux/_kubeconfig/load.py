"""Load and merge kubeconfig files into :class:`ContextConfig` values (sync, no event loop).

The loader is here; the values and the merge are in :mod:`.merge` (re-exported).

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

Field types follow kubectl exactly (:mod:`kubemux._kubeconfig.schema`): a wrong-typed field
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

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from .._errors import KubeconfigError
from .files import (
    MAX_KUBECONFIG_BYTES,
    MAX_REFERENCED_FILE_BYTES,
    read_kubeconfig,
)
from .merge import ContextConfig, KubeconfigSnapshot, merge
from .parse import (
    ParsedFile,
    parse_file,
)

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
        return merge(parsed_files, self.files, errors=errors, missing=tuple(missing))
