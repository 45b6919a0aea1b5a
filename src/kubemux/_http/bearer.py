"""A TLS context for requests made with someone else's bearer token: the context's trust,
never its client certificate.

``kubemux proxy --user-tokens`` sends each user's request upstream with the user's own
token. kube-apiserver's authenticators try the client certificate before the bearer token,
so a request that carried the kubeconfig's client certificate would be served as the
kubeconfig's user whatever token it holds. :func:`bearer_ssl` derives, from the TLS context
a context's session connects with, one that trusts the same CAs and checks the server the
same way, with no certificate of its own; aiohttp keys its pooled connections by the TLS
context, so such requests never share a connection with the informers'.
"""

from __future__ import annotations

import ssl
import weakref
from typing import Any

__all__ = ["bearer_ssl"]

_derived: weakref.WeakKeyDictionary[ssl.SSLContext, ssl.SSLContext] = weakref.WeakKeyDictionary()


def _without_certificate(base: ssl.SSLContext) -> ssl.SSLContext:
    """A client context trusting what ``base`` trusts, verifying as it does, with no
    client certificate."""
    cas = base.get_ca_certs(binary_form=True)
    if cas:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cadata=b"".join(cas))
    else:  # the system's trust store (no CA in the kubeconfig)
        context = ssl.create_default_context()
    context.check_hostname = base.check_hostname
    context.verify_mode = base.verify_mode
    context.verify_flags = base.verify_flags
    context.minimum_version = base.minimum_version
    return context


def bearer_ssl(session: Any) -> ssl.SSLContext | None:
    """The TLS context for a bearer-token request on ``session`` (an aiohttp session of a
    context), or None when the session connects without one of its own (plain HTTP, or
    aiohttp's defaults, which present no certificate)."""
    # aiohttp's TCPConnector keeps its TLS context in ``_ssl``, with no public accessor
    base = getattr(session.connector, "_ssl", None)
    if not isinstance(base, ssl.SSLContext):
        return None
    derived = _derived.get(base)
    if derived is None:
        derived = _derived[base] = _without_certificate(base)
    return derived
