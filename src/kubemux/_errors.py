"""The kubemux exception tree.

::

    KubemuxError
    ├── KubeconfigError            a kubeconfig file is missing, unreadable or malformed
    │   └── InvalidContext         a context the kubeconfig defines but kubemux cannot use
    ├── ContextNotFound            (also LookupError) no such context in the kubeconfig
    ├── ContextRemoved             the context was removed or reloaded while you used it
    ├── NotSynced                  a store was read before its first LIST completed
    ├── SubscriberOverflow         a subscriber fell behind and its buffer filled up
    ├── ClusterUnreachable         (also ConnectionError) the server could not be reached
    │   ├── TooManyOpenFiles       this process hit its open-file limit (EMFILE) connecting
    │   └── ServerTimeout          the server was reached but did not answer, or stalled, in time
    ├── CredentialError            a credential could not be obtained (exec plugin, token
    │                              file, OIDC refresh)
    ├── StartTimeout               (also TimeoutError) a context did not start in time
    ├── RegistryClosed             (also RuntimeError) the registry is not open
    ├── ProtocolError              the server's answer breaks the protocol (malformed response,
    │   │                          a LIST whose continue token repeats or never ends)
    │   └── ResponseTooLarge       a response or a watch line exceeded its size limit
    ├── InternalError              an unexpected exception (a bug here or in a library, a user
    │                              transform); the original is chained as ``__cause__``
    └── ApiError                   the API server answered with an error Status
        ├── ResourceExpired        410 Gone: the resourceVersion is too old
        ├── Unauthorized           401
        ├── Forbidden              403
        └── ResourceNotFound       (also LookupError) 404: unknown resource type or object
            └── UnknownResource    a resource name the cluster's discovery does not know

Foreign exceptions (aiohttp, yaml, OSError) are converted at the boundary with
``raise ... from exc`` so callers only need to catch :class:`KubemuxError`; anything
unexpected becomes an :class:`InternalError` in one place (:func:`as_kubemux_error`). What
comes out of a task group is unwrapped in one place too (:func:`unwrap`), keeping every
error it holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = [
    "ApiError",
    "ClusterUnreachable",
    "ContextNotFound",
    "ContextRemoved",
    "CredentialError",
    "Forbidden",
    "InternalError",
    "InvalidContext",
    "KubeconfigError",
    "KubemuxError",
    "NotSynced",
    "ProtocolError",
    "RegistryClosed",
    "ResourceExpired",
    "ResourceNotFound",
    "ResponseTooLarge",
    "ServerTimeout",
    "StartTimeout",
    "SubscriberOverflow",
    "TooManyOpenFiles",
    "Unauthorized",
    "UnknownResource",
    "api_error_from_status",
    "as_kubemux_error",
    "exception_leaves",
    "unwrap",
    "unwrapped",
]


class KubemuxError(Exception):
    """Base class of every error kubemux raises on purpose.

    Every subclass copies and pickles faithfully (its attributes, not its constructor's
    arguments, are what is kept).
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, dict(self.__dict__))


def _rebuild(cls: type[KubemuxError], args: tuple[Any, ...], state: dict[str, Any]) -> KubemuxError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class KubeconfigError(KubemuxError):
    """A kubeconfig file could not be used.

    Attributes:
        path: The file at fault, or ``None`` when the problem is not tied to one file.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class InvalidContext(KubeconfigError):
    """The kubeconfig defines the context, but it cannot be used: its cluster or user entry
    is missing, it uses a removed ``auth-provider`` (azure, gcp), an unsupported field, or
    a file it references cannot be read.

    Attributes:
        context: The context name.
        path: The file that defines it (None when not known).
        reason: Why it cannot be used, naming the entry (``user 'u': ...``).
    """

    def __init__(self, context: str, reason: str, path: str | None = None) -> None:
        where = f" in {path}" if path else ""
        super().__init__(f"context {context!r}{where} cannot be used: {reason}", path=path)
        self.context = context
        self.reason = reason


class ContextNotFound(KubemuxError, LookupError):
    """The kubeconfig has no context of that name (or it is invalid)."""

    def __init__(self, context: str, detail: str | None = None) -> None:
        msg = f"context {context!r} not found in the kubeconfig"
        if detail:
            msg = f"{msg}: {detail}"
        super().__init__(msg)
        self.context = context


class ContextRemoved(KubemuxError):
    """The context was stopped (removed or reloaded) while the call was in flight."""

    def __init__(self, context: str, reason: str = "stopped") -> None:
        super().__init__(f"context {context!r} was {reason}")
        self.context = context
        self.reason = reason


class NotSynced(KubemuxError):
    """A store was used before its informer finished the first LIST."""


class SubscriberOverflow(KubemuxError):
    """A subscriber fell more than its buffer size behind and was closed.

    Resubscribe (with ``snapshot=True``) to start again from the current state.
    """


class StartTimeout(KubemuxError, TimeoutError):
    """A context did not start (client built, credentials obtained) within its time limit.

    Attributes:
        context: The context's name.
        timeout: The limit, in seconds (``start_timeout``).
        detail: What the start was waiting for when it was cut short, when known (``exec
            plugin aws was stopped after 30 s, waiting for the end of its output (0 bytes of
            output read); its process group was killed``); also in the message.
    """

    def __init__(self, context: str, timeout: float, detail: str | None = None) -> None:
        message = f"context {context!r} did not start within {timeout:g}s"
        super().__init__(f"{message}: {detail}" if detail else message)
        self.context = context
        self.timeout = timeout
        self.detail = detail


class RegistryClosed(KubemuxError, RuntimeError):
    """The registry is not open: use it inside ``async with registry:``."""


def as_kubemux_error(exc: BaseException, where: str) -> KubemuxError:
    """``exc`` itself if it is a :class:`KubemuxError`, else an :class:`InternalError`
    naming ``where`` and the original's type and message (chained as ``__cause__``)."""
    if isinstance(exc, KubemuxError):
        return exc
    detail = str(exc)[:300] or type(exc).__name__
    error = InternalError(f"{where}: unexpected {type(exc).__name__}: {detail}")
    error.__cause__ = exc
    return error


def exception_leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``, however nested in groups, in order (``[exc]`` for one
    that is not a group)."""
    if not isinstance(exc, BaseExceptionGroup):
        return [exc]
    return [leaf for inner in exc.exceptions for leaf in exception_leaves(inner)]


def unwrap(exc: BaseException) -> BaseException:
    """The exception a task group's wrapping holds, every error kept.

    The lone exception inside ``exc`` (``ExceptionGroup``\\ s however nested); of several
    errors, the first, with a note (``__notes__``) naming each of the others (type and
    message, cut to 300 characters); ``exc`` itself if it is not a group, or if what it
    holds is more than one exception and not all are errors (a cancellation among them
    must propagate as it is).
    """
    leaves = exception_leaves(exc)
    if len(leaves) == 1:
        return leaves[0]
    if not leaves or not all(isinstance(leaf, Exception) for leaf in leaves):
        return exc
    first = leaves[0]
    notes = getattr(first, "__notes__", ())
    for other in leaves[1:]:
        note = f"also raised: {type(other).__name__}: {str(other)[:300]}"
        if note not in notes:
            first.add_note(note)
    return first


@contextlib.contextmanager
def unwrapped() -> Iterator[None]:
    """Raise what a task group's wrapping (an ``ExceptionGroup`` leaving the block) holds,
    as :func:`unwrap` gives it: the caller sees ``Unauthorized``, not a group around it."""
    try:
        yield
    except BaseExceptionGroup as group:
        inner = unwrap(group)
        if inner is group:
            raise
        raise inner from inner.__cause__


class ClusterUnreachable(KubemuxError, ConnectionError):
    """The API server could not be reached (DNS, TCP, TLS or a dropped connection)."""

    def __init__(self, server: str, detail: str) -> None:
        super().__init__(f"cannot reach {server}: {detail}")
        self.server = server
        self.detail = detail


class TooManyOpenFiles(ClusterUnreachable):
    """This process reached its limit of open files (``EMFILE``) while connecting to the
    server (or opening a file it needs to): nothing is wrong with the cluster.

    Each watch holds one connection, so the limit caps the number of watches. It is retried
    with backoff like any unreachable server, and succeeds once descriptors are free again.
    Raise the soft limit (``ulimit -n``, or :func:`kubemux.raise_fd_limit` at start-up).

    Attributes:
        limit: The process's soft ``RLIMIT_NOFILE`` when it happened; None when it was the
            system-wide table that was full (``ENFILE``).
        hard_limit: The hard limit then (None if unknown), up to which the soft one can be
            raised without privileges.
        open_watches: Watches this process had open at that moment.
    """

    def __init__(
        self,
        server: str,
        detail: str,
        *,
        limit: int | None,
        open_watches: int,
        hard_limit: int | None = None,
    ) -> None:
        if limit is None:
            what = "the system's table of open files is full"
            fix = "close other programs, or raise fs.file-max"
        elif hard_limit is not None and hard_limit <= limit:
            what = f"this process may open {limit} files, and that is its hard limit too"
            fix = "raise the hard limit (LimitNOFILE= in a systemd unit, ulimit -Hn as root)"
        else:
            what = f"this process may open {limit} files"
            fix = "raise the limit (ulimit -n, or kubemux.raise_fd_limit())"
        text = (
            f"{detail}: too many open files ({what}; {open_watches} watches are open, one "
            f"connection each): {fix}"
        )
        KubemuxError.__init__(self, f"{server}: {text}")  # not "cannot reach": it is us
        self.server = server
        self.detail = text
        self.limit = limit
        self.hard_limit = hard_limit
        self.open_watches = open_watches


class CredentialError(KubemuxError):
    """A credential could not be obtained or refreshed.

    The message names the user entry and the source (``exec plugin aws``, ``token file
    ...``, ``OIDC provider ...``) and never holds the credential itself.
    """


class ServerTimeout(ClusterUnreachable):
    """The server accepted the connection but did not answer, or stopped making progress,
    within the time allowed (no response headers; a LIST body or a watch line trickling)."""

    def __init__(self, server: str, detail: str) -> None:
        KubemuxError.__init__(self, f"{server} is too slow: {detail}")
        self.server = server
        self.detail = detail


class ProtocolError(KubemuxError):
    """The server's answer is not what the Kubernetes API protocol says it must be.

    Attributes:
        server: The API server, as the kubeconfig names it.
        detail: What was wrong.
    """

    def __init__(self, server: str, detail: str) -> None:
        super().__init__(f"{server}: {detail}")
        self.server = server
        self.detail = detail


class ResponseTooLarge(ProtocolError):
    """A response body or a watch line exceeded its size limit; it was not read further.

    Attributes:
        limit: The limit in bytes (see :class:`~kubemux.WatchSettings`).
    """

    def __init__(self, server: str, detail: str, limit: int) -> None:
        super().__init__(server, detail)
        self.limit = limit


class InternalError(KubemuxError):
    """An unexpected exception: a bug in kubemux or a library it uses, or a user function
    (a transform) that raised. The original exception is the ``__cause__``."""


class ApiError(KubemuxError):
    """The API server answered with an error.

    Attributes:
        status: HTTP status code (or the ``code`` of an in-stream ERROR Status).
        reason: The Status ``reason`` (``"Expired"``, ``"Unauthorized"``, ...).
        message: The Status ``message``, as the server wrote it.
    """

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        text = f"{status} {reason}".strip()
        if message:
            text = f"{text}: {message}"
        super().__init__(text)
        self.status = status
        self.reason = reason
        self.message = message


class ResourceExpired(ApiError):
    """410 Gone: the requested resourceVersion is no longer in the server's history."""


class Unauthorized(ApiError):
    """401: the credentials were rejected."""


class Forbidden(ApiError):
    """403: the credentials are valid but lack permission."""


class ResourceNotFound(ApiError, LookupError):
    """404: the resource type (or the object) does not exist on this server."""


class UnknownResource(ResourceNotFound):
    """A resource name that no resource served by the cluster matches (kubectl's rules).

    Attributes:
        name: The name as given.
        context: The context whose discovery was asked, or None.
        suggestions: Close names the cluster does serve (``widgets.example.com``), best first.
    """

    def __init__(
        self, name: str, context: str | None = None, suggestions: tuple[str, ...] = ()
    ) -> None:
        where = f" (context {context!r})" if context else ""
        message = f"the server doesn't have a resource type {name!r}{where}"
        if suggestions:
            message += "; did you mean " + " or ".join(repr(s) for s in suggestions) + "?"
        super().__init__(404, "NotFound", message)
        self.name = name
        self.context = context
        self.suggestions = suggestions


_BY_STATUS: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: ResourceNotFound,
    410: ResourceExpired,
}


def api_error_from_status(status: int, body: Any = None) -> ApiError:
    """Build the right :class:`ApiError` subclass from a status code and a Status body.

    ``body`` may be a decoded Status dict, raw bytes, or ``None``; anything unparseable
    is kept (truncated) as the message.
    """
    reason = ""
    message = ""
    if isinstance(body, bytes | bytearray):
        try:
            import orjson

            body = orjson.loads(body)
        except ValueError:
            message = bytes(body[:300]).decode("utf-8", "replace").strip()
            body = None
    if isinstance(body, dict):
        code = body.get("code")
        if isinstance(code, int) and code >= 400:
            status = code
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or "")
    cls = _BY_STATUS.get(status, ApiError)
    return cls(status, reason, message)
