"""A registry's authorizers: one per context, each following its context's RBAC informers in
the registry's lifetime.

:class:`Authorizers` owns a task group (opened in the registry's ``async with``), starts an
:class:`~.authorizer.Authorizer` the first time a context's is asked for, and hands it out
once its informers have synced. The registry is reached through a small protocol
(:class:`ContextSource`): this layer sits below the registry.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import aiohttp
import anyio
import anyio.abc

from .._cache.store import Store
from .._errors import ContextNotFound, ResponseTooLarge
from .._http.upstream import Upstream
from .._resources import Resource
from .authorizer import Authorizer, AuthorizerSettings
from .reviews import MAX_ANSWER

__all__ = ["Authorizers", "ContextSource"]

log = logging.getLogger(__name__)

_REVIEW_TIMEOUT = aiohttp.ClientTimeout(total=30, sock_connect=10)
_JSON = (("Content-Type", "application/json"), ("Accept", "application/json"))


class ContextSource(Protocol):
    """What :class:`Authorizers` needs of a registry."""

    @property
    def contexts(self) -> Mapping[str, object]: ...

    async def watch(self, context: str, resource: Resource, /) -> Store: ...

    def upstream(self, context: str, /) -> AbstractAsyncContextManager[Upstream]: ...


class _Source:
    """One context of the registry, as an :class:`~.authorizer.AuthzSource`."""

    def __init__(self, registry: ContextSource, context: str) -> None:
        self._registry = registry
        self._context = context

    async def watch(self, resource: Resource) -> Store:
        return await self._registry.watch(self._context, resource)

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        async with (
            self._registry.upstream(self._context) as upstream,
            upstream.request(
                "POST", path, headers=_JSON, body=body, timeouts=_REVIEW_TIMEOUT
            ) as resp,
        ):
            chunks: list[bytes] = []
            size = 0
            while chunk := await resp.content.read(64 * 1024):
                size += len(chunk)
                if size > MAX_ANSWER:
                    raise ResponseTooLarge(upstream.server, "a review's answer", MAX_ANSWER)
                chunks.append(chunk)
            return resp.status, b"".join(chunks)


class Authorizers:
    """The authorizers of one registry, by context name."""

    def __init__(self, registry: ContextSource) -> None:
        self._registry = registry
        self._by_context: dict[str, Authorizer] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    def __len__(self) -> int:
        return len(self._by_context)

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """Run authorizers until the block ends (every one stops with it)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield
            finally:
                self._tg = None
                tg.cancel_scope.cancel("registry closed")

    async def get(self, context: str, settings: AuthorizerSettings | None = None) -> Authorizer:
        """``context``'s authorizer, started if needed, once synced.

        Raises:
            ContextNotFound: no such context in the kubeconfig.
            RuntimeError: the registry is not open.
            NotSynced, and what starting the RBAC informers raises (see
            :meth:`Authorizer.wait_synced`).
        """
        if context not in self._registry.contexts:
            raise ContextNotFound(context)
        found = self._by_context.get(context)
        if found is None:
            if self._tg is None:
                raise RuntimeError("the registry is not open")
            found = Authorizer(context, _Source(self._registry, context), settings)
            self._by_context[context] = found
            self._tg.start_soon(found.run, name=f"kubemux authorizer {context!r}")
        elif settings is not None and settings != found.settings:
            log.warning("context %r: its authorizer runs with other settings", context)
        await found.wait_synced()
        return found
