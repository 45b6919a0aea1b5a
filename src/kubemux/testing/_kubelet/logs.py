"""``pods/log``: per-container logs a test appends to, served as the kubelet serves them.

Logs live in a ``LogBook`` (``_log_book``). The options are the API's: ``container``,
``follow``, ``tailLines``, ``sinceSeconds``, ``sinceTime``, ``timestamps``, ``limitBytes``
and ``previous`` (the log of the container's last instance, kept by
``FakeCluster.restart_container``; 400 for a container that never restarted).
``follow=true`` streams lines as they are appended and ends when the pod is deleted, the
container restarts or its status says it terminated; a previous log is not followed (its
container ended).
"""

from __future__ import annotations

import datetime as dt
import itertools
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from .._state.api_state import ApiState
from .._state.log_book import ContainerLog
from .._state.resource import ResourceState
from .._wire.protocol import BadRequest
from .._wire.responses import abort, int_param, status_response

__all__ = ["containers_of", "pick_container", "serve_log"]

_TEXT = "text/plain"


def containers_of(pod: Mapping[str, Any]) -> list[str]:
    """The names of a pod's containers (init containers after them)."""
    spec = pod.get("spec") or {}
    names = []
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or []:
            if isinstance(container, Mapping) and container.get("name"):
                names.append(str(container["name"]))
    return names


def pick_container(pod: Mapping[str, Any], container: str | None) -> str:
    """The container a request names, or the pod's only container.

    Raises:
        BadRequest: none named and the pod has several, or the name is not the pod's.
    """
    name = (pod.get("metadata") or {}).get("name", "")
    names = containers_of(pod)
    main = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
    if not container:
        if len(main) == 1:
            return main[0]
        raise BadRequest(
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(main)}]"
        )
    if container not in names:
        raise BadRequest(f"container {container} is not valid for pod {name}")
    return container


def _stamp(when: float) -> str:
    whole = int(when)
    nanos = round((when - whole) * 1e9)
    base = dt.datetime.fromtimestamp(whole, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{min(nanos, 999_999_999):09d}Z"


def _terminated(pod: Mapping[str, Any], container: str) -> bool:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if isinstance(status, Mapping) and status.get("name") == container:
            return "terminated" in (status.get("state") or {})
    return False


def _since(query: Mapping[str, str]) -> float | None:
    if query.get("sinceSeconds"):
        seconds = int_param(query, "sinceSeconds")
        if seconds < 1:
            raise BadRequest("sinceSeconds: Invalid value: must be greater than 0")
        return time.time() - seconds
    if query.get("sinceTime"):
        try:
            return dt.datetime.fromisoformat(query["sinceTime"]).timestamp()
        except ValueError:
            raise BadRequest(f"invalid sinceTime: {query['sinceTime']!r}") from None
    return None


async def serve_log(
    api: ApiState, request: web.BaseRequest, state: ResourceState, namespace: str, name: str
) -> web.StreamResponse:
    """GET pods/{name}/log."""
    query = dict(request.query.items())
    stored = state.objects.get((namespace, name))
    if stored is None:
        return status_response(
            404, "NotFound", f'pods "{name}" not found', details={"name": name, "kind": "pods"}
        )
    pod = stored.obj
    uid = str(pod["metadata"].get("uid", ""))
    container = pick_container(pod, query.get("container"))
    key = (uid, container)
    previous = query.get("previous", "").lower() in ("true", "1")
    if previous and key not in api.logs.previous:
        raise BadRequest(f'previous terminated container "{container}" in pod "{name}" not found')
    follow = query.get("follow", "").lower() in ("true", "1") and not previous
    stamps = query.get("timestamps", "").lower() in ("true", "1")
    tail = int_param(query, "tailLines") if query.get("tailLines") else None
    limit = int_param(query, "limitBytes") if query.get("limitBytes") else None
    since = _since(query)
    book = api.logs.previous if previous else api.logs.logs
    log = book.get(key) or ContainerLog()
    restarts = api.logs.restarts.get(key, 0)
    entries = [entry for entry in log.lines if since is None or entry[0] >= since]
    if tail is not None:
        entries = entries[max(0, len(entries) - tail) :] if tail >= 0 else entries
    position = log.dropped + len(log.lines)  # the next line a follow sends

    def render(batch: list[tuple[float, str]]) -> bytes:
        if stamps:
            return "".join(f"{_stamp(t)} {line}\n" for t, line in batch).encode()
        return "".join(f"{line}\n" for _, line in batch).encode()

    sent = 0
    data = render(entries)
    if not follow:
        if limit is not None:
            data = data[: max(0, limit)]
        return web.Response(body=data, content_type=_TEXT)
    response = web.StreamResponse(headers={"Content-Type": _TEXT})
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        while True:
            if limit is not None:
                data = data[: max(0, limit - sent)]
            if data:
                await response.write(data)
                sent += len(data)
            if limit is not None and sent >= limit:
                break
            current = state.objects.get((namespace, name))
            if current is None or current.obj["metadata"].get("uid") != uid:
                break
            if _terminated(current.obj, container) or api.logs.restarts.get(key, 0) != restarts:
                break
            if api.stopping:
                abort(request)
                return response
            await api.wait_changed(1.0)
            log = api.logs.logs.get(key) or ContainerLog()
            start = max(0, position - log.dropped)
            fresh = list(itertools.islice(log.lines, start, None))
            position = log.dropped + len(log.lines)
            data = render(fresh)
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away
    return response
