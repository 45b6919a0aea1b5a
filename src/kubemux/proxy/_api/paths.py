"""Context names in URL paths, and what a Kubernetes API path names.

**Context names.** The proxy serves each context under ``/clusters/{context}/`` (Headlamp's
path shape), and the kubeconfig it writes points each context's ``server`` there. Context
names hold ``:``, ``/``, ``@`` and spaces (EKS names contexts by ARN,
``arn:aws:eks:eu-west-1:123456789012:cluster/prod``; GKE ``gke_project_zone_name``).
client-go decodes a ``%2F`` in the server URL into a ``/`` (measured with kubectl 1.32: the
request arrived as ``/clusters/a/b/api``), and normalises other escapes, so percent-encoding
cannot carry a ``/``. :func:`encode_context` therefore writes every byte outside the
unreserved characters (and ``:`` and ``@``, which every client keeps) as ``~XX`` (``~``
itself as ``~7E``, a leading ``.`` as ``~2E``, so no segment is ``.`` or ``..``): such a
segment reaches the server exactly as written, through kubectl, client-go, Python clients
and browsers. :func:`decode_context` reverses it, after percent-decoding the segment (so a
frontend that writes ``encodeURIComponent(name)`` works too, for names without ``~``).

**API paths.** :func:`parse_api_path` splits the rest of the path (``/api/v1/namespaces/
default/pods/web-1/log``) into what it names, refusing paths that could mean something else
upstream than here (``.``/``..`` segments, empty segments, encoded ``/``, ``\\`` or NUL).
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse

__all__ = ["ApiPath", "decode_context", "encode_context", "parse_api_path", "split_raw_path"]

_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._:@")
_TILDE = re.compile(rb"~([0-9A-Fa-f]{2})")
MAX_CONTEXT_SEGMENT = 4096  # bytes of an encoded context name we look at


def encode_context(name: str) -> str:
    """The path segment for a context name (see the module docstring).

    Raises:
        ValueError: the name is empty (no path segment can stand for it).
    """
    if not name:
        raise ValueError("an empty context name has no path segment")
    out = []
    for i, byte in enumerate(name.encode("utf-8")):
        if byte in _KEPT and not (i == 0 and byte == 0x2E):
            out.append(chr(byte))
        else:
            out.append(f"~{byte:02X}")
    return "".join(out)


def decode_context(segment: bytes) -> str | None:
    """The context name a raw path segment stands for, or None if it is malformed.

    The segment is percent-decoded first, then every ``~XX`` is decoded; a ``~`` not
    followed by two hex digits, bytes that are not UTF-8, or a NUL make it malformed.
    """
    if not segment or len(segment) > MAX_CONTEXT_SEGMENT:
        return None
    raw = urllib.parse.unquote_to_bytes(segment) if b"%" in segment else segment
    if raw.count(b"~") != len(_TILDE.findall(raw)):
        return None
    decoded = _TILDE.sub(lambda m: bytes((int(m.group(1), 16),)), raw)
    if b"\x00" in decoded:
        return None
    try:
        return decoded.decode("utf-8")
    except UnicodeDecodeError:
        return None


def split_raw_path(raw_path: bytes, root_path: str) -> bytes | None:
    """``raw_path`` without the ``root_path`` the app is mounted under (both as the ASGI
    server gives them: the first raw, the second decoded); None if they disagree."""
    if not root_path:
        return raw_path
    depth = root_path.rstrip("/").count("/")
    parts = raw_path.split(b"/", depth + 1)
    if len(parts) <= depth:
        return None
    prefix = b"/".join(parts[: depth + 1])
    if urllib.parse.unquote(prefix.decode("latin-1")) != root_path.rstrip("/"):
        return None
    return b"/" + parts[depth + 1] if len(parts) > depth + 1 else b"/"


@dataclasses.dataclass(frozen=True, slots=True)
class ApiPath:
    """What an API path names. Every field is decoded; ``raw`` is the path as received.

    ``kind`` is ``"discovery"`` (``/api``, ``/apis``, ``/api/v1``, ``/apis/g``,
    ``/apis/g/v``, ``/version``, ``/openapi/...``), ``"resource"`` (a collection, an
    object, or a subresource of one) or ``"other"`` (``/healthz``, ``/metrics``, ...).
    """

    raw: str
    kind: str
    group: str = ""
    version: str = ""
    namespace: str | None = None
    plural: str = ""
    name: str | None = None
    subresource: str | None = None
    segments: tuple[str, ...] = ()

    @property
    def is_collection(self) -> bool:
        return self.kind == "resource" and self.name is None

    @property
    def is_object(self) -> bool:
        return self.kind == "resource" and self.name is not None and self.subresource is None


_BAD_ESCAPES = re.compile(rb"%(2[fF]|5[cC]|00)")


def parse_api_path(raw: bytes) -> ApiPath | None:
    """What ``raw`` (the path below the context, starting with ``/``) names; None for a
    path that must not be forwarded (see the module docstring)."""
    if not raw.startswith(b"/") or _BAD_ESCAPES.search(raw) or b"\\" in raw or b"\x00" in raw:
        return None
    text = raw.decode("latin-1")
    if raw == b"/":
        return ApiPath(text, "other")
    pieces = raw[1:].split(b"/")
    if pieces and pieces[-1] == b"":  # one trailing slash is harmless (`/api/`)
        pieces.pop()
    segments: list[str] = []
    for piece in pieces:
        try:
            seg = urllib.parse.unquote_to_bytes(piece).decode("utf-8")
        except UnicodeDecodeError:
            return None
        if seg in ("", ".", ".."):
            return None
        segments.append(seg)
    segs = tuple(segments)
    head = segs[0]
    if head == "version" and len(segs) == 1:
        return ApiPath(text, "discovery", segments=segs)
    if head == "openapi":
        return ApiPath(text, "discovery", segments=segs)
    if head == "api":
        if len(segs) <= 2:
            return ApiPath(
                text, "discovery", version=segs[1] if len(segs) == 2 else "", segments=segs
            )
        return _resource(text, "", segs[1], segs[2:], segs)
    if head == "apis":
        if len(segs) <= 3:
            return ApiPath(
                text,
                "discovery",
                group=segs[1] if len(segs) > 1 else "",
                version=segs[2] if len(segs) > 2 else "",
                segments=segs,
            )
        return _resource(text, segs[1], segs[2], segs[3:], segs)
    return ApiPath(text, "other", segments=segs)


def _resource(
    text: str, group: str, version: str, rest: tuple[str, ...], segs: tuple[str, ...]
) -> ApiPath:
    namespace: str | None = None
    # kube-apiserver's RequestInfoFactory: /namespaces/{ns}/status and /finalize are the
    # namespace's own subresources, anything else below a namespace is a namespaced resource
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = "/".join(rest[2:]) if len(rest) > 2 else None
    return ApiPath(text, "resource", group, version, namespace, plural, name, sub, segs)
