"""The proxy's own TLS: a CA and a server certificate, made fresh for each run.

kubectl sends a bearer token only over HTTPS (against an ``http://`` server it sends no
``Authorization`` header at all), so ``kubemux proxy`` serves TLS. It makes an ECDSA P-256
CA and a server certificate signed by it for ``127.0.0.1``, ``::1`` and ``localhost`` (plus
the address it listens on, and ``*.kubemux.invalid``: each context's ``tls-server-name``,
whose SNI tells the proxy the context when a client drops the server URL's path, see
:mod:`.sni`); the kubeconfig it writes carries the CA as
``certificate-authority-data``. The CA's key is dropped once it has signed (nothing can
mint another certificate it vouches for); the server's key lives in memory, and only for
the moment :meth:`ProxyCertificates.server_context` loads it (the :mod:`ssl` module reads
keys from files) in a 0600 file inside a private folder, removed before it returns.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import os
import shutil
import ssl
import tempfile
import weakref
from collections.abc import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ProxyCertificates", "make_certificates", "server_name_of"]

LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")
CONTEXT_NAMES = "*.kubemux.invalid"  # each context's tls-server-name (see .sni)
SERVER_NAMES: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
"""A TLS connection's SSL object -> the server name (SNI) its client sent, if any."""
_VALIDITY = dt.timedelta(days=365)


@dataclasses.dataclass(frozen=True, repr=False)
class ProxyCertificates:
    """A CA and a server certificate it signed (PEM). ``repr`` never shows a key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    hosts: tuple[str, ...]

    def __repr__(self) -> str:
        return f"<ProxyCertificates hosts={list(self.hosts)}>"

    def server_context(self) -> ssl.SSLContext:
        """A server-side TLS context with this certificate (TLS 1.2 or later)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # no TLS 1.3 session tickets: kubectl and client-go keep no session cache to resume
        # from, and two tickets per handshake cost CPU and ~3 KiB per held connection
        context.num_tickets = 0
        context.sni_callback = _remember_server_name
        folder = tempfile.mkdtemp(prefix="kubemux-proxy-")
        try:
            cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
            for path, data in ((cert, self.cert_pem + self.ca_pem), (key, self.key_pem)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
            context.load_cert_chain(cert, key)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client-side TLS context that trusts only this CA (for tests and tools)."""
        return ssl.create_default_context(cadata=self.ca_pem.decode("ascii"))


def _remember_server_name(ssl_object: object, name: str | None, _: ssl.SSLContext) -> None:
    if name is not None:
        SERVER_NAMES[ssl_object] = name[:255]


def server_name_of(ssl_object: object) -> str | None:
    """The SNI a TLS connection's client sent (None: none, or not TLS)."""
    try:
        return SERVER_NAMES.get(ssl_object)
    except TypeError:  # not weakly referable: not one of ours
        return None


def make_certificates(hosts: Iterable[str] = ()) -> ProxyCertificates:
    """A fresh CA and a server certificate for the loopback names plus ``hosts``, and every
    context's server name (``*.kubemux.invalid``)."""
    names = list(dict.fromkeys([*LOOPBACK_NAMES, *(h for h in hosts if h), CONTEXT_NAMES]))
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubemux proxy CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubemux proxy")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return ProxyCertificates(
        ca_pem=ca.public_bytes(pem),
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        hosts=tuple(names),
    )
