"""Writing refreshed credentials back into a kubeconfig file, under kubectl's lock.

client-go (``tools/clientcmd``) serialises every kubeconfig write through a lock file next to
the file: ``lockFile`` creates ``<file>.lock`` with ``O_CREATE|O_EXCL`` and ``unlockFile``
removes it (``ModifyConfig`` takes it for each file it may write, then reads, then writes).
kubectl does not wait for a lock that exists: it fails with ``open <file>.lock: file
exists``. kubemux takes the same lock, by the same name (the path as the kubeconfig list
spells it, so a symlink is locked as kubectl locks it), waiting a bounded time with backoff
for a holder to let go; a stale lock (left by a crashed kubectl) is never broken: that is an
error naming the lock file, as in kubectl.

Inside one process, writers of one file (the providers of the users it holds) also queue on
an in-process gate, so they take turns instead of spinning on the lock file.

Under the lock the file is read with the loader's guarded read (a regular file, capped, and
read again when it changed while being read or was modified moments ago), parsed and
type-checked as the loader does (:func:`kubemux._kubeconfig.parse.parse_file`); after the
change the whole document is checked again, so nothing kubectl would refuse is written.

Writing: client-go truncates the file in place (``os.WriteFile``), which a reader without the
lock (``kubectl get``, an editor, kubemux's own watcher) can catch half written. kubemux
writes a temporary file in the same folder (mode of the original), fsyncs it and renames it
over the original, so an unlocked reader sees the old file or the new one; other writers are
kept out by the lock either way. When a rename would change more than the bytes (the file
has other hard links, belongs to another user, or the rename is refused: a bind-mounted
file, a folder we cannot write), the file is truncated and written in place, as client-go
does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import tempfile
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

import anyio
import yaml

from .._errors import KubeconfigError
from .._kubeconfig.files import read_kubeconfig
from .._kubeconfig.parse import parse_file

__all__ = [
    "LOCK_TIMEOUT",
    "KubeconfigLockError",
    "LockedKubeconfig",
    "kubeconfig_lock",
    "lock_name",
    "read_locked",
    "write_locked",
]

LOCK_TIMEOUT: Final = 15.0
"""Seconds to wait for ``<file>.lock``: more than kubemux itself holds it (one identity
provider request, at most ``oidc.TOKEN_TIMEOUT``), far more than kubectl does."""
_LOCK_RETRY: Final = (0.002, 0.01)  # first delay between attempts, doubling up to the second
_SETTLE_READS: Final = 5  # guarded reads of a file that looks half written, ~20 ms apart


class KubeconfigLockError(Exception):
    """The lock file could not be taken (the message names it; never a file's contents)."""


def lock_name(path: str) -> str:
    """client-go's ``lockName``: the kubeconfig path as given, plus ``.lock``."""
    return path + ".lock"


def _try_lock(path: str) -> bool:
    """Create ``<path>.lock`` exclusively; False when it exists (someone holds it).

    Raises:
        KubeconfigLockError: It cannot be created (the folder is not writable, ...).
    """
    name = lock_name(path)
    try:
        # mode 0, as client-go creates it: the file's existence is the lock
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0)
    except FileExistsError:
        return False
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise KubeconfigLockError(f"cannot create the lock file {name}: {reason}") from exc
    os.close(fd)
    return True


def _unlock(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock_name(path))


class _Gate:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = anyio.Lock()
        self.users = 0


# one gate per event loop and path: anyio locks belong to one loop
_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Gate]] = (
    weakref.WeakKeyDictionary()
)


@contextlib.asynccontextmanager
async def kubeconfig_lock(
    path: str,
    *,
    timeout: float = LOCK_TIMEOUT,  # noqa: ASYNC109 - a lock wait, enforced inside
    on_wait: Callable[[], None] | None = None,
) -> AsyncIterator[None]:
    """Hold client-go's ``<path>.lock`` (and this process's gate for the file) inside.

    Waits with backoff while another program holds the lock, at most ``timeout`` seconds;
    the lock is removed on the way out, whatever happens inside (cancellation included).
    ``on_wait`` is called when cancellation arrives while waiting (to say what was waited for).

    Raises:
        KubeconfigLockError: The lock stayed taken for ``timeout`` seconds, or cannot be made.
    """
    by_path = _gates.setdefault(asyncio.get_running_loop(), {})
    key = path  # the lock file is named after this spelling too
    gate = by_path.get(key)
    if gate is None:
        gate = by_path[key] = _Gate()
    gate.users += 1
    holding = False
    try:
        async with gate.lock:
            deadline = time.monotonic() + timeout
            delay = _LOCK_RETRY[0]
            while not _try_lock(path):
                if time.monotonic() >= deadline:
                    raise KubeconfigLockError(
                        f"{lock_name(path)} exists and was not removed within {timeout:g} s: "
                        "another program (kubectl?) is changing the file, or left its lock "
                        "behind when it stopped; remove the lock file if nothing is running"
                    )
                await anyio.sleep(delay)
                delay = min(delay * 2, _LOCK_RETRY[1])
            holding = True
            try:
                yield
            finally:
                _unlock(path)
    except anyio.get_cancelled_exc_class():
        if not holding and on_wait is not None:
            on_wait()
        raise
    finally:
        gate.users -= 1
        if gate.users == 0 and by_path.get(key) is gate:
            del by_path[key]


@dataclasses.dataclass(slots=True)
class LockedKubeconfig:
    """A kubeconfig file as read under its lock: its document and one user's provider config.

    ``config`` is the ``auth-provider.config`` mapping inside ``document`` (change it, then
    :func:`write_locked`).
    """

    path: str
    document: dict[str, Any]
    config: dict[str, Any]
    user_name: str


def read_locked(path: str, user_name: str, provider: str) -> LockedKubeconfig | None:
    """Read ``path`` (its lock held) with the loader's checks; None when the user is gone.

    The file must be a regular file under the size cap, read whole (read again while it
    looks half written), valid YAML and a valid kubeconfig, and writable; ``user_name`` must
    still have an ``auth-provider`` named ``provider``: None when it does not.

    Raises:
        KubeconfigError: The file cannot be read or does not load (the message names the
            file, never its contents); ``FileNotFoundError`` is one too.
    """
    try:
        data, settled = read_kubeconfig(path, None)
        for _ in range(_SETTLE_READS):
            if settled:
                break
            # written moments ago or changing under us: read again once quiet; the same
            # bytes twice is a finished write (read_kubeconfig's rule for known contents)
            data, settled = read_kubeconfig(path, data)
    except FileNotFoundError as exc:
        raise KubeconfigError(f"{path}: the file no longer exists", path=path) from exc
    if not settled:
        raise KubeconfigError(
            f"{path}: the file keeps changing (a program is writing it without taking "
            f"{lock_name(path)})",
            path=path,
        )
    document = _load(path, data)
    if document is None:
        return None
    if not os.access(path, os.W_OK):
        raise KubeconfigError(f"{path}: the file is not writable", path=path)
    for item in document.get("users") or ():
        if isinstance(item, dict) and item.get("name") == user_name:
            user = item.get("user")
            entry = user.get("auth-provider") if isinstance(user, dict) else None
            if not isinstance(entry, dict) or entry.get("name") != provider:
                return None
            config = entry.get("config")
            if config is None:
                config = entry["config"] = {}
            if not isinstance(config, dict):  # parse_document refuses this; be sure
                return None
            return LockedKubeconfig(path, document, config, user_name)
    return None


def _load(path: str, data: bytes) -> dict[str, Any] | None:
    """The file's document, checked as the loader checks it; None when blank.

    Raises:
        KubeconfigError: Bad YAML (line and column, no snippet) or not a valid kubeconfig.
    """
    from .._kubeconfig.yamlread import load_yaml

    parsed = parse_file(path, data)  # every YAML and schema error as a KubeconfigError
    if parsed.is_blank:
        return None
    try:
        document = load_yaml(data)  # the same bytes: the same (valid) document
    except (yaml.YAMLError, RecursionError) as exc:  # pragma: no cover - parse_file passed
        raise KubeconfigError(f"{path}: invalid YAML", path=path) from exc
    return document if isinstance(document, dict) else None


def write_locked(locked: LockedKubeconfig, updates: Mapping[str, str]) -> None:
    """Set ``updates`` in the user's provider config and write the file (lock held).

    The new document must load as a kubeconfig, and the user entry must stay usable (a token
    kubectl would refuse to send is refused here), else nothing is written.

    Raises:
        KubeconfigError: The result would not load or not be usable: nothing was written.
        OSError: Writing failed (the original file is intact when the rename path was used).
    """
    locked.config.update(updates)
    path = locked.path
    try:
        text = yaml.safe_dump(locked.document, sort_keys=False, default_flow_style=False)
    except (yaml.YAMLError, RecursionError) as exc:
        raise KubeconfigError(f"{path}: the updated file cannot be written as YAML") from exc
    data = text.encode("utf-8")
    check = parse_file(path, data)  # a KubeconfigError if it would not load
    problem = check.user_problems.get(locked.user_name)
    if problem is not None:
        raise KubeconfigError(
            f"{path}: the updated user {locked.user_name!r} would not be usable: {problem}",
            path=path,
        )
    _write(path, data)


def _write(path: str, data: bytes) -> None:
    real = os.path.realpath(path)
    st = os.stat(real)
    if st.st_nlink == 1 and st.st_uid == os.geteuid():
        try:
            _replace(real, data, st.st_mode & 0o7777)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EBUSY, errno.EXDEV, errno.EROFS):
                raise
        else:
            return
    _write_in_place(real, data)


def _replace(real: str, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".kubemux-", dir=os.path.dirname(real))
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_in_place(real: str, data: bytes) -> None:
    # client-go's os.WriteFile: O_TRUNC, then the bytes (the file keeps its inode and mode)
    fd = os.open(real, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
