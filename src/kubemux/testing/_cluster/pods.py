"""FakeCluster's pod methods: container logs (``pods/log``, ``attach``) and forwarded ports."""

from __future__ import annotations

from .._apiserver.http import ApiServer
from .._kubelet.logs import pick_container
from .._state.state import ObjectStore

__all__ = ["PodControls"]


class PodControls:
    """The pod-log and port-forward methods of :class:`FakeCluster`."""

    _api: ApiServer
    _store: ObjectStore

    def _pod_uid(self, namespace: str, pod: str, container: str | None) -> tuple[str, str]:
        obj = self._store.get("pods", namespace, pod)
        if obj is None:
            raise KeyError(f"pods {namespace}/{pod!r} not found")
        chosen = container or next(
            (c.get("name") for c in (obj.get("spec") or {}).get("containers") or []), None
        )
        return str(obj["metadata"].get("uid", "")), pick_container(obj, chosen)

    def append_log(
        self, namespace: str, pod: str, text: str, *, container: str | None = None
    ) -> int:
        """Append ``text`` to a container's log (default: the pod's first container).

        Every ``\\n`` ends a line (a last line without one counts as a line too); each line
        is stamped with the current time (``timestamps=true``, ``sinceSeconds``). Followers
        (``kubectl logs -f``) and attached clients get the lines at once. The log belongs to
        the pod's uid: a pod created again under the same name starts empty. At most 100,000
        lines are kept per container.

        Returns:
            The number of lines appended.

        Raises:
            KeyError: No such pod.
            ValueError: The pod has no such container.
        """
        uid, name = self._pod_uid(namespace, pod, container)
        pods = self._store.state("pods").objects

        def alive(ns: str, pod_name: str, pod_uid: str) -> bool:
            stored = pods.get((ns, pod_name))
            return stored is not None and stored.obj["metadata"].get("uid") == pod_uid

        self._api.logs.prune(alive)
        count = self._api.logs.append(uid, name, text, owner=(namespace, pod))
        self._api.notify()
        return count

    def restart_container(self, namespace: str, pod: str, *, container: str | None = None) -> None:
        """Start a container (default: the pod's first) again, as the kubelet does after it
        exits: its log so far becomes its previous one (``kubectl logs --previous``), a new
        empty one starts, and a follower of the old one sees its stream end. The pod's
        status is the test's (``restartCount``, ``lastState``: :meth:`update` it).

        Raises:
            KeyError: No such pod.
            ValueError: The pod has no such container.
        """
        uid, name = self._pod_uid(namespace, pod, container)
        self._api.logs.restart(uid, name, owner=(namespace, pod))
        self._api.notify()

    def log_lines(self, namespace: str, pod: str, *, container: str | None = None) -> list[str]:
        """The lines of a container's log, oldest first.

        Raises:
            KeyError: No such pod.
            ValueError: The pod has no such container.
        """
        uid, name = self._pod_uid(namespace, pod, container)
        return self._api.logs.lines(uid, name)

    def forward_port(self, port: int, address: tuple[str, int] | None) -> None:
        """Where ``kubectl port-forward`` to pod port ``port`` (of any pod) connects.

        ``address`` is a ``(host, port)`` the fake opens a TCP connection to for every
        forwarded connection; None withdraws it (the kubelet's "connection refused" then).

        Raises:
            ValueError: ``port`` is not a TCP port.
        """
        if not 0 < port < 65536:
            raise ValueError(f"{port} is not a TCP port")
        if address is None:
            self._api.port_targets.pop(port, None)
        else:
            self._api.port_targets[port] = (str(address[0]), int(address[1]))
