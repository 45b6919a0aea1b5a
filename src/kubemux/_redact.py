"""Keeping secrets and terminal escapes out of what kubemux shows.

Plain functions at the bottom of the layering: every module that writes a message, a
``repr()``, a status value, a log record or a line on a terminal goes through these.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["redact_text", "redact_url", "terminal_safe"]

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#@\s]*)@")


def redact_url(url: str) -> str:
    """``url`` with any userinfo (``user:password@``) replaced by ``***@``.

    >>> redact_url("https://admin:hunter2@k8s.example.com:6443/api")
    'https://***@k8s.example.com:6443/api'
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return redact_text(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"***@{host}"))


def redact_text(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***@``."""
    return _USERINFO.sub(r"\g<scheme>***@", text)


# C0 controls (but tab and newline), DEL, C1 controls, and the bidirectional and
# zero-width format characters that can make a line read differently from what it holds.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str, *, newlines: bool = False) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``), so that
    nothing from a cluster can move the cursor, retitle a window or forge a line.

    Newlines are escaped too unless ``newlines`` is True.
    """
    out = _UNSAFE.sub(_escape, text)
    if not newlines:
        out = out.replace("\n", "\\n")
    return out
