"""Reading kubeconfig files and the files they reference, guarded (sync).

Every file goes through :func:`read_regular`: opened non-blocking (a FIFO returns at once
instead of waiting for a writer), refused unless ``fstat`` says it is a regular file, and read
up to a cap. :func:`read_kubeconfig` adds the check that a kubeconfig file did not change
while it was read (see :mod:`kubemux._kubeconfig.load`).
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from typing import Final

from .._errors import KubeconfigError

__all__ = [
    "MAX_KUBECONFIG_BYTES",
    "MAX_REFERENCED_FILE_BYTES",
    "FileProblem",
    "RefProblem",
    "check_token_file",
    "hash_file",
    "read_kubeconfig",
]

MAX_KUBECONFIG_BYTES: Final = 64 * 1024 * 1024
"""The largest kubeconfig file read (5,000 contexts with inline certificates is ~30 MB)."""
MAX_REFERENCED_FILE_BYTES: Final = 4 * 1024 * 1024
"""The largest CA, client certificate/key or token file read (CA bundles are ~200 KB)."""
_SETTLE_DELAY: Final = 0.02  # a file modified more recently than this may be half written
_READ_ATTEMPTS: Final = 3
_MISSING_FILE: Final = b"<missing>"


class FileProblem(Exception):
    """A file that exists cannot be read as one (not a regular file, too large, bad path)."""


def read_regular(path: str, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most ``limit`` bytes, and its fstat before reading.

    Opened non-blocking, so that a FIFO returns at once (and is refused) instead of waiting
    for a writer; devices and folders are refused before anything is read.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        FileProblem: Anything else (message without the path).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise FileProblem(f"cannot read: {exc.strerror or type(exc).__name__}") from exc
    except ValueError as exc:  # a NUL in the path; a lone surrogate
        raise FileProblem("the path is not a valid file name (a NUL character?)") from exc
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise FileProblem("not a regular file (a FIFO, a device or a folder?)")
        if before.st_size > limit:
            raise FileProblem(f"larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, min(limit + 1 - size, 1 << 20) or 1)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise FileProblem(f"larger than {limit} bytes")
        return b"".join(chunks), before
    except OSError as exc:
        raise FileProblem(f"cannot read: {exc.strerror or type(exc).__name__}") from exc
    finally:
        os.close(fd)


def read_kubeconfig(path: str, known: bytes | None) -> tuple[bytes, bool]:
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
            data, before = read_regular(path, MAX_KUBECONFIG_BYTES)
        except FileProblem as exc:
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


class RefProblem(Exception):
    """A file a context references exists but cannot be used (the message names it)."""


def hash_file(path: str, cache: dict[str, bytes | RefProblem]) -> bytes:
    """sha256 of a referenced file, once per load; a missing file is a marker, not an error.

    Raises:
        RefProblem: The file is not a regular file, is too large, or its path is invalid.
    """
    cached = cache.get(path)
    if cached is None:
        try:
            data, _ = read_regular(path, MAX_REFERENCED_FILE_BYTES)
        except FileNotFoundError:
            cached = _MISSING_FILE
        except FileProblem as exc:
            if str(exc).startswith("cannot read"):  # e.g. permissions: the client says more
                cached = f"<{exc}>".encode()
            else:
                cached = RefProblem(f"{path}: {exc}")
        else:
            cached = hashlib.sha256(data).digest()
        cache[path] = cached
    if isinstance(cached, RefProblem):
        raise cached
    return cached


def check_token_file(path: str) -> None:
    """A token file may be missing (it is read when used) but not a FIFO or huge.

    Raises:
        RefProblem: It exists and is not a regular file of at most the size cap.
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return
    if not stat.S_ISREG(st.st_mode):
        raise RefProblem(f"{path}: not a regular file (a FIFO, a device or a folder?)")
    if st.st_size > MAX_REFERENCED_FILE_BYTES:
        raise RefProblem(f"{path}: larger than {MAX_REFERENCED_FILE_BYTES} bytes")
