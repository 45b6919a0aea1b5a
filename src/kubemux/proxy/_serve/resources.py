"""Which resource an API path names, for the reads the cache answers: the built-in table,
else the group version's discovery document (cached per context generation)."""

from __future__ import annotations

import orjson

from ..._errors import KubemuxError
from ..._http.upstream import Upstream
from ..._informer.discovery import parse_resource_list
from ..._resources import BUILTIN_RESOURCES, Resource
from .._api.paths import ApiPath
from .._upstream.discovery_cache import DiscoveryCache

__all__ = ["ResourceTable"]

_BUILTINS = {(r.group, r.version, r.plural): r for r in BUILTIN_RESOURCES}
_RESOURCE_VERBS = frozenset({"list", "watch", "get"})
_MAX_KEPT = 4096


class ResourceTable:
    """The resources paths name (see the module docstring)."""

    def __init__(self, discovery: DiscoveryCache, request_timeout: float) -> None:
        self._discovery = discovery
        self._request_timeout = request_timeout
        self._found: dict[tuple[str, int, str, str, str], Resource | None] = {}

    @staticmethod
    def builtin(path: ApiPath) -> Resource | None:
        """The built-in resource ``path`` names, or None."""
        return _BUILTINS.get((path.group, path.version, path.plural))

    async def find(self, up: Upstream, path: ApiPath) -> Resource | None:
        """The resource ``path`` names on ``up``'s server; None if it does not serve it
        (or not for list and watch)."""
        gv = f"/apis/{path.group}/{path.version}" if path.group else f"/api/{path.version}"
        key = (up.context, up.generation, path.group, path.version, path.plural)
        if key in self._found:
            return self._found[key]
        try:
            body = await self._discovery.document(up, gv, request_timeout=self._request_timeout)
        except KubemuxError:
            return None
        found: Resource | None = None
        if body is not None:
            try:
                doc = orjson.loads(body)
            except orjson.JSONDecodeError:
                doc = None
            if isinstance(doc, dict):
                for res in parse_resource_list(doc):
                    if res.plural == path.plural and set(res.verbs) >= _RESOURCE_VERBS:
                        found = res
                        break
        if len(self._found) > _MAX_KEPT:
            self._found.clear()
        self._found[key] = found
        return found
