"""TLS for client connections: nats-server sends INFO in clear text, then the client upgrades.

Besides the server context, this holds what nats-server does with the client certificate:
``pinned_certs`` (the SHA-256 of the certificate's DER SubjectPublicKeyInfo, in hex, must be
in the configured set) and ``verify_and_map`` (the certificate names the user: a SAN email,
DNS name or URI, else the subject distinguished name). cryptography is imported only where
a certificate is read: most servers never do, and the import costs start-up time.
"""

from __future__ import annotations

import hashlib
import ssl
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from jetraft.config import TLSConfig

if TYPE_CHECKING:
    from cryptography import x509

_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


def make_server_context(tls: TLSConfig) -> ssl.SSLContext:
    """Build a server-side context from the config's ``tls {}`` block.

    ``verify`` (and ``verify_and_map``) asks clients for a certificate signed by ``ca_file``.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _VERSIONS.get(tls.min_version, ssl.TLSVersion.TLSv1_2)
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.ca_file:
        ctx.load_verify_locations(tls.ca_file)
    if tls.verify or tls.verify_and_map:
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif tls.pinned_certs:
        # Pinning needs the client's certificate even when it is not verified against a CA.
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def peer_certificate(transport: Any) -> bytes | None:
    """The DER client certificate of a TLS transport, or None (no TLS, or none was sent)."""
    obj = transport.get_extra_info("ssl_object") if transport is not None else None
    if obj is None:
        return None
    der = obj.getpeercert(binary_form=True)
    return bytes(der) if der else None


def spki_sha256(der: bytes) -> str:
    """nats-server's pin: hex SHA-256 of the certificate's DER SubjectPublicKeyInfo."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    cert = x509.load_der_x509_certificate(der)
    spki = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(spki).hexdigest()


def pinned_ok(der: bytes | None, pins: Iterable[str]) -> bool:
    """True when no pins are configured, or the client sent a certificate whose key is pinned."""
    allowed = set(pins)
    if not allowed:
        return True
    return der is not None and spki_sha256(der) in allowed


def map_certificate(der: bytes, lookup: Callable[[str], bool], names: Iterable[str]) -> str:
    """The user a client certificate maps to, "" when none (nats-server's order of tries).

    SAN emails, then DNS names, then URIs, each looked up as a user name; then the subject:
    a configured name that parses as a distinguished name equal to the subject (also with its
    RDNs in another order), then the subject as an RFC 2253 string. ``lookup(name)`` says
    whether a user of that name exists; ``names`` are all user names (for the DN compare).
    """
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)
    for candidate in _san_names(cert):
        if lookup(candidate):
            return candidate
    subject = cert.subject
    if not subject.rdns:
        return ""
    reordered = ""
    for name in names:
        dn = _parse_dn(name)
        if dn is None:
            continue
        if dn.rdns == subject.rdns:
            return name
        if not reordered and sorted(map(_rdn_key, dn.rdns)) == sorted(
            map(_rdn_key, subject.rdns)
        ):
            reordered = name
    if reordered:
        return reordered
    text = subject.rfc4514_string()
    return text if lookup(text) else ""


def _san_names(cert: x509.Certificate) -> list[str]:
    from cryptography import x509

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    out: list[str] = []
    for kind in (x509.RFC822Name, x509.DNSName, x509.UniformResourceIdentifier):
        out.extend(str(v) for v in san.get_values_for_type(kind))
    return out


def _parse_dn(text: str) -> x509.Name | None:
    from cryptography import x509

    if "=" not in text:
        return None
    try:
        return x509.Name.from_rfc4514_string(text)
    except ValueError:
        return None


def _rdn_key(rdn: x509.RelativeDistinguishedName) -> str:
    return "+".join(sorted(f"{a.oid.dotted_string}={a.value!r}" for a in rdn))


def make_client_context(tls: TLSConfig) -> ssl.SSLContext:
    """The dialing side of a route: present our certificate, verify the peer's chain
    against ``ca_file`` (routes are dialed by IP from gossip, so names are not checked)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = _VERSIONS.get(tls.min_version, ssl.TLSVersion.TLSv1_2)
    ctx.check_hostname = False
    if tls.ca_file:
        ctx.load_verify_locations(tls.ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    return ctx
