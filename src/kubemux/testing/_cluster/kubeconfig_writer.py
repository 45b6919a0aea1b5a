"""Kubeconfig files pointing at FakeClusters."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .fake_cluster import FakeCluster

__all__ = ["FakeContext", "kubeconfig_dict", "write_kubeconfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class FakeContext:
    """How one kubeconfig context reaches a cluster.

    Attributes:
        cluster: A :class:`FakeCluster`, or a server URL.
        token: The bearer token; by default the cluster's first token (sorted), if any.
        token_file: Reference the token through ``user.tokenFile`` instead. When ``token``
            is given it is written to that file; otherwise the default token is written
            only if the file does not exist yet.
        namespace: The context's default namespace.
        cluster_name: The cluster entry's name; default ``<context>-cluster``.
        user_name: The user entry's name; default ``<context>-user``.
    """

    cluster: FakeCluster | str
    token: str | None = None
    token_file: str | None = None
    namespace: str | None = None
    cluster_name: str | None = None
    user_name: str | None = None

    def __repr__(self) -> str:  # never show the token
        target = self.cluster if isinstance(self.cluster, str) else repr(self.cluster)
        return f"FakeContext(cluster={target}, namespace={self.namespace!r})"


def _write_atomic(path: Path, data: str, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _entries(name: str, spec: FakeCluster | FakeContext) -> tuple[dict[str, Any], ...]:
    ctx = spec if isinstance(spec, FakeContext) else FakeContext(cluster=spec)
    cluster_entry: dict[str, Any]
    if isinstance(ctx.cluster, FakeCluster):
        cluster_entry = {"server": ctx.cluster.server}
        if ctx.cluster.ca_file is not None:
            cluster_entry["certificate-authority"] = ctx.cluster.ca_file
        default_token = min(ctx.cluster.tokens) if ctx.cluster.tokens else None
    else:
        cluster_entry = {"server": ctx.cluster}
        default_token = None
    token = ctx.token if ctx.token is not None else default_token
    user: dict[str, Any] = {}
    if ctx.token_file is not None:
        user["tokenFile"] = ctx.token_file
        target = Path(ctx.token_file)
        if token is not None and (ctx.token is not None or not target.exists()):
            _write_atomic(target, token)
    elif token is not None:
        user["token"] = token
    context: dict[str, Any] = {
        "cluster": ctx.cluster_name or f"{name}-cluster",
        "user": ctx.user_name or f"{name}-user",
    }
    if ctx.namespace is not None:
        context["namespace"] = ctx.namespace
    return (
        {"name": context["cluster"], "cluster": cluster_entry},
        {"name": context["user"], "user": user},
        {"name": name, "context": context},
    )


def _add(entries: dict[str, dict[str, Any]], entry: dict[str, Any], what: str) -> None:
    existing = entries.get(entry["name"])
    if existing is None:
        entries[entry["name"]] = entry
    elif existing != entry:
        raise ValueError(f"two different {what} entries named {entry['name']!r}")


def kubeconfig_dict(
    contexts: Mapping[str, FakeCluster | FakeContext], *, current_context: str | None = None
) -> dict[str, Any]:
    """A kubeconfig (as a dict) with one context per entry of ``contexts``.

    Each context gets its own cluster and user entries unless ``cluster_name`` or
    ``user_name`` make them shared. TLS clusters reference their CA file. Writes token
    files for contexts that use ``token_file`` (see :class:`FakeContext`).

    Args:
        contexts: Context name -> a FakeCluster (default token) or a FakeContext.
        current_context: The current context; default: the first one.

    Raises:
        ValueError: Two entries share a name but differ, or ``current_context`` is unknown.
        RuntimeError: A FakeCluster has no port yet (start it first).
    """
    clusters: dict[str, dict[str, Any]] = {}  # by name, in order
    users: dict[str, dict[str, Any]] = {}
    ctx_entries: list[dict[str, Any]] = []
    for name, spec in contexts.items():
        cluster, user, context = _entries(name, spec)
        _add(clusters, cluster, "cluster")
        _add(users, user, "user")
        ctx_entries.append(context)
    current = current_context if current_context is not None else next(iter(contexts), "")
    if current and current not in contexts:
        raise ValueError(f"current_context {current!r} is not one of the contexts")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": list(clusters.values()),
        "users": list(users.values()),
        "contexts": ctx_entries,
        "current-context": current,
    }


def write_kubeconfig(
    path: str | os.PathLike[str],
    contexts: Mapping[str, FakeCluster | FakeContext],
    *,
    current_context: str | None = None,
) -> Path:
    """Write :func:`kubeconfig_dict` as YAML to ``path``, atomically; return the path.

    The file is written to a temporary file in the same folder, then renamed over
    ``path``, so a watcher never sees it half-written. Mode 0600, like kubectl's.
    """
    target = Path(path)
    data = kubeconfig_dict(contexts, current_context=current_context)
    dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when available
    _write_atomic(target, yaml.dump(data, Dumper=dumper, sort_keys=False))
    return target
