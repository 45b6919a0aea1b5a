"""Which context a request is for when its path does not say: the TLS server name (issue 29,
point 5).

kubectl before 1.34 drops the path of the server URL for ``get --raw`` (kubernetes#131165):
``kubectl get --raw /version`` against ``https://127.0.0.1:PORT/clusters/prod`` asks for
``/version``, and the context is lost. Every request kubectl makes, ``--raw`` included,
sends the cluster's ``tls-server-name`` as SNI, though. So the kubeconfig the proxy writes
gives each context its own server name, :func:`server_name`: a readable part of the context
name, then 16 base32 characters of its sha256 (names hold ``:``, ``/``, ``@``, spaces and
capitals, and may be longer than a DNS label), under :data:`SNI_DOMAIN`, a name under
``.invalid`` (RFC 6761: it never resolves, nobody else can own it). The proxy's certificate
covers ``*.kubemux.invalid``, so contexts added later need no new certificate.

:class:`SniRouter` decides, once per request and before anything reads the path:

- no SNI, or one outside :data:`SNI_DOMAIN` (``localhost``, an IP): the path decides, as
  before;
- an SNI naming context C, and a path without ``/clusters/``: the request is for C, its
  path becomes ``/clusters/{C}/...`` (every later step, the router included, sees one
  context);
- an SNI naming C and a path naming C: as it is;
- an SNI naming C and a path naming another context, or an SNI under the domain that names
  no context, with or without a path prefix: refused, ``421 Misdirected Request`` (RFC
  9110: a client may retry on another connection). The SNI is the client's choice as much
  as the path; when they disagree, neither is taken, so no request ever reaches a context
  that the connection and the path do not both name.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from .._api.paths import decode_context, encode_context
from .._api.responses import StatusError

__all__ = ["SNI_DOMAIN", "SNI_EXTENSION", "SniRouter", "server_name"]

SNI_DOMAIN = "kubemux.invalid"
SNI_WILDCARD = f"*.{SNI_DOMAIN}"
SNI_EXTENSION = "kubemux.sni"
"""The ASGI scope extension under which the HTTP protocol puts the connection's SNI."""

_SLUG = re.compile(r"[^a-z0-9]+")
_READABLE = 40  # characters of the name kept in the label (a label holds 63)
_PREFIX = b"/clusters/"


def server_name(context: str) -> str:
    """The TLS server name of ``context`` (see the module docstring)."""
    digest = hashlib.sha256(context.encode("utf-8", "surrogatepass")).digest()
    tag = base64.b32encode(digest).decode("ascii")[:16].lower()
    slug = _SLUG.sub("-", context.lower())[:_READABLE].strip("-") or "context"
    return f"{slug}-{tag}.{SNI_DOMAIN}"


class SniRouter:
    """Maps a connection's SNI to a context and rewrites the request's path to name it (see
    the module docstring)."""

    __slots__ = ("_by_name", "_contexts")

    def __init__(self) -> None:
        self._contexts: Mapping[str, Any] | None = None
        self._by_name: dict[str, str] = {}

    def _names(self, contexts: Mapping[str, Any]) -> dict[str, str]:
        if contexts is not self._contexts:  # a new kubeconfig snapshot: build once
            self._by_name = {server_name(name): name for name in contexts if name}
            self._contexts = contexts
        return self._by_name

    def route(self, scope: dict[str, Any], contexts: Mapping[str, Any]) -> dict[str, Any]:
        """The scope to serve (``scope`` itself, or a copy with the path rewritten).

        Raises:
            StatusError: 421, the SNI names no context or another one than the path.
        """
        sni = (scope.get("extensions") or {}).get(SNI_EXTENSION)
        if not isinstance(sni, str):
            return scope
        sni = sni.lower().rstrip(".")
        if not sni.endswith("." + SNI_DOMAIN):
            return scope
        context = self._names(contexts).get(sni)
        if context is None:
            raise StatusError(
                421,
                "kubemux proxy: the connection's TLS server name names no context",
                reason="BadRequest",
            )
        raw = scope.get("raw_path") or scope["path"].encode("utf-8")
        path, query = raw.partition(b"?")[::2]
        if path.startswith(_PREFIX):
            segment = path[len(_PREFIX) :].partition(b"/")[0]
            if decode_context(segment) == context:
                return scope
            raise StatusError(
                421,
                "kubemux proxy: the path names another context than the connection's TLS "
                "server name; use a connection for that context",
                reason="BadRequest",
            )
        prefix = "/clusters/" + encode_context(context)
        rewritten = dict(scope)
        rewritten["path"] = prefix + scope["path"]
        rewritten["raw_path"] = prefix.encode("ascii") + path + (b"?" + query if query else b"")
        return rewritten
