"""The merged kubeconfig (:class:`KubeconfigSnapshot` of :class:`ContextConfig` values) and
kubectl's merge of parsed files into it (:func:`merge`; the rules are in :mod:`.load`'s
docstring): validity, fingerprints and each context's self-contained client config.
"""

from __future__ import annotations

import dataclasses
import hashlib
import types
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from .._errors import ContextNotFound, KubeconfigError
from .._redact import redact_url
from .files import RefProblem, check_token_file, hash_file
from .parse import CLUSTER_FILE_FIELDS, MEMORY_SOURCE, ParsedFile, parse_document
from .schema import CLUSTER, CONTEXT, unknown_keys

__all__ = ["ContextConfig", "KubeconfigSnapshot", "credential_insensitive", "merge"]


_ANONYMOUS_USER: Final = "kubemux-anonymous"
_HASHED_USER_FIELDS: Final = ("client-certificate", "client-key")  # not tokenFile
_JSON_OPTIONS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
_CLUSTER_IDENTITY: Final = (  # which cluster, whatever the credentials (ContextConfig.cluster_key)
    "server",
    "certificate-authority-data",
    "tls-server-name",
    "insecure-skip-tls-verify",
    "proxy-url",
)


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
    cluster_key: str = dataclasses.field(default="", compare=False)
    """sha256 hex digest of what says *which cluster* the context talks to: the server, the
    CA's bytes (inline or the file's), ``tls-server-name``, ``insecure-skip-tls-verify``
    and ``proxy-url``. Two generations with the same key watch the same cluster, whatever
    their credentials: a reload that keeps it hands the caches over (watches go on)."""

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
        merged = merge([parsed], [MEMORY_SOURCE], errors={}, missing=())
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


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def merge(
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
            invalid[name] = "context has no cluster" + _typos(ctx, CONTEXT, f"contexts[{name}]")
        elif cluster is None:
            invalid[name] = f"cluster {cluster_name!r} not found"
        elif user_name and user is None:
            invalid[name] = f"user {user_name!r} not found"
        elif not cluster.get("server"):
            where = f"clusters[{cluster_name}].cluster"
            invalid[name] = "no server" + _typos(cluster, CLUSTER, where)
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
    cluster_digest = hashlib.sha256(
        orjson.dumps(
            {k: cluster.get(k) for k in _CLUSTER_IDENTITY},
            default=_json_default,
            option=_JSON_OPTIONS,
        )
    )
    if ca_file := cluster.get("certificate-authority"):
        cluster_digest.update(b"\0" + hash_file(ca_file, file_hashes))
    return ContextConfig(
        name=name,
        cluster_name=cluster_name,
        server=cluster["server"],
        user_name=user_name,
        namespace=namespace,
        source=source,
        fingerprint=digest.hexdigest(),
        cluster_key=cluster_digest.hexdigest(),
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


def _typos(body: Mapping[str, Any], spec: Mapping[str, Any], where: str) -> str:
    """`` (clusters[c].cluster.sever is not a kubeconfig key: did you mean 'server'?)``, or
    ``""``: what may explain a missing field."""
    note = unknown_keys(body, spec, where)
    return f" ({note})" if note else ""
