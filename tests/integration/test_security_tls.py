"""Client certificates: ``verify_and_map`` (the certificate names the user) and
``pinned_certs`` (only pinned public keys get in), through nats-py over TLS."""

from __future__ import annotations

import datetime
import hashlib
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from jetraft.server.server import Server

from .conftest import ServerFactory, connect
from .test_security_auth import refusal


class Pki:
    """A CA (trustme) that also issues client certificates with any subject and SANs."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ca = trustme.CA()
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file, self.cert, self.key = tmp / "ca.pem", tmp / "s.pem", tmp / "s.key"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        server.cert_chain_pems[0].write_to_path(str(self.cert))
        server.private_key_pem.write_to_path(str(self.key))
        self._ca_key = serialization.load_pem_private_key(
            self.ca.private_key_pem.bytes(), password=None)
        self._ca_cert = x509.load_pem_x509_certificate(self.ca.cert_pem.bytes())
        self.issued = 0

    def tls_block(self, extra: str) -> str:
        return (f'tls {{ cert_file: "{self.cert}", key_file: "{self.key}", '
                f'ca_file: "{self.ca_file}", {extra} }}')

    def client(self, subject: list[tuple[Any, str]], sans: list[x509.GeneralName] | None = None
               ) -> tuple[ssl.SSLContext, bytes]:
        """A TLS context presenting a new client certificate; and that certificate (DER)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(oid, value) for oid, value in subject]))
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())  # type: ignore[arg-type]
        self.issued += 1
        cert_path, key_path = self.tmp / f"c{self.issued}.pem", self.tmp / f"c{self.issued}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(cert_path), str(key_path))
        return ctx, cert.public_bytes(serialization.Encoding.DER)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


async def connects(server: Server, ctx: ssl.SSLContext) -> bool:
    """Whether a TLS client gets to a working connection (nats-py either raises or hands back
    a closed client when the server drops it during the handshake)."""
    try:
        nc = await connect(server, tls=ctx)
    except Exception:
        return False
    ok = nc.is_connected
    if ok:
        await nc.close()
    return ok


def user_of(server: Server) -> str:
    conn = server.clients[max(server.clients)]
    assert conn.user is not None
    return conn.user.name


MAP_USERS = """
accounts {
  A { users = [
    {user: "alice@example.com"}
    {user: "CN=bob,OU=dev,O=Acme"}
    {user: "O=Acme,OU=ops,CN=carol"}
    {user: "spiffe://acme/dave"}
    {user: "host.acme.test"}
    {user: admin, password: ""}
  ] }
}
"""


async def test_verify_and_map_picks_the_user_from_the_certificate(
    make_server: ServerFactory, pki: Pki
) -> None:
    server = await make_server(pki.tls_block("verify_and_map: true") + MAP_USERS)
    cn = NameOID.COMMON_NAME
    cases = {
        "alice@example.com": pki.client([(cn, "x")], [x509.RFC822Name("alice@example.com")]),
        "spiffe://acme/dave": pki.client(
            [(cn, "y")], [x509.UniformResourceIdentifier("spiffe://acme/dave")]),
        "host.acme.test": pki.client([(cn, "z")], [x509.DNSName("host.acme.test")]),
        # The subject DN, as RFC 2253 writes it (most significant last) ...
        "CN=bob,OU=dev,O=Acme": pki.client(
            [(NameOID.ORGANIZATION_NAME, "Acme"), (NameOID.ORGANIZATIONAL_UNIT_NAME, "dev"),
             (cn, "bob")]),
        # ... also when the configured name lists the RDNs in another order.
        "O=Acme,OU=ops,CN=carol": pki.client(
            [(NameOID.ORGANIZATION_NAME, "Acme"), (NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
             (cn, "carol")]),
    }
    for expected, (ctx, _) in cases.items():
        nc = await connect(server, tls=ctx)
        await nc.flush()
        assert user_of(server) == expected
        await nc.close()
    # CONNECT's user name does not choose the user: the certificate does.
    ctx, _ = cases["alice@example.com"]
    nc = await connect(server, tls=ctx, user="admin", password="")
    await nc.flush()
    assert user_of(server) == "alice@example.com"
    await nc.close()


async def test_verify_and_map_refuses_unmapped_certificates(
    make_server: ServerFactory, pki: Pki
) -> None:
    """The issue's case: verify_and_map used to degrade to verify, and a user without a
    password was then let in by name alone."""
    server = await make_server(pki.tls_block("verify_and_map: true") + MAP_USERS)
    ctx, _ = pki.client([(NameOID.COMMON_NAME, "mallory")],
                        [x509.RFC822Name("mallory@example.com")])
    assert "authorization violation" in await refusal(server, tls=ctx)
    assert "authorization violation" in await refusal(
        server, tls=ctx, user="admin", password="")
    # Without a client certificate the handshake itself fails (verify is implied).
    bare = ssl.create_default_context(cafile=str(pki.ca_file))
    assert not await connects(server, bare)


async def test_pinned_certs(make_server: ServerFactory, pki: Pki) -> None:
    pinned_ctx, pinned_der = pki.client([(NameOID.COMMON_NAME, "pinned")])
    other_ctx, _ = pki.client([(NameOID.COMMON_NAME, "other")])
    spki = x509.load_der_x509_certificate(pinned_der).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    pin = hashlib.sha256(spki).hexdigest().upper()  # nats-server accepts either case
    server = await make_server(pki.tls_block(f'verify: true, pinned_certs: ["{pin}"]'))
    nc = await connect(server, tls=pinned_ctx)
    sub = await nc.subscribe("pinned")
    await nc.publish("pinned", b"ok")
    assert (await sub.next_msg(timeout=2)).data == b"ok"
    await nc.close()
    assert not await connects(server, other_ctx)  # the server drops the TLS session
    assert not any(c.connected and not c.closed for c in server.clients.values())


async def test_pinned_certs_with_handshake_first(make_server: ServerFactory, pki: Pki) -> None:
    pinned_ctx, pinned_der = pki.client([(NameOID.COMMON_NAME, "pinned")])
    other_ctx, _ = pki.client([(NameOID.COMMON_NAME, "other")])
    spki = x509.load_der_x509_certificate(pinned_der).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    server = await make_server(pki.tls_block(
        f'verify: true, handshake_first: true, pinned_certs: ["{hashlib.sha256(spki).hexdigest()}"]'
    ))
    nc = await connect(server, tls=pinned_ctx, tls_handshake_first=True)
    await nc.flush()
    await nc.close()
    try:
        other = await connect(server, tls=other_ctx, tls_handshake_first=True)
    except Exception:
        return
    assert not other.is_connected
