"""TLS for client connections: nats-server sends INFO in clear text, then the client upgrades."""

from __future__ import annotations

import ssl
from typing import Any


def make_server_context(tls: Any) -> ssl.SSLContext:
    """Build a server-side context from the config's ``tls {}`` block.

    ``verify`` asks clients for a certificate signed by ``ca_file``.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.ca_file:
        ctx.load_verify_locations(tls.ca_file)
    if tls.verify:
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def make_client_context(tls: Any) -> ssl.SSLContext:
    """The dialing side of a route: present our certificate, verify the peer's chain
    against ``ca_file`` (routes are dialed by IP from gossip, so names are not checked)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    if tls.ca_file:
        ctx.load_verify_locations(tls.ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    return ctx
