"""Security settings fail closed: what jetraft cannot honour stops the config, at its position;
what it implements (nkey users, verify_and_map, pinned_certs, operator mode, encryption
settings) is read into typed values."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetraft.config import ConfigError, parse_config
from jetraft.config import build_sections as sections
from jetraft.config import jwt as nats_jwt
from jetraft.config.nkey import PREFIX_USER, decode_public, decode_signature, verify
from tests.natsauth import Key, Operator, b64url, encode_jwt, user_jwt

NKEY_USER = Key.new("user").public
TLS = "tls { cert_file: c.pem, key_file: k.pem, %s }"


def refused(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "t.conf", env={})
    err = info.value
    assert "refusing to start" in err.message and err.line > 0, str(err)
    assert str(err).startswith(f"t.conf:{err.line}:{err.column}: ")
    return err


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("port: 1\ngateway { name: X, port: 7222 }", "gateway", 2),
        ("leafnodes { port: 7422 }", "leafnodes", 1),
        ("websocket { port: 8080, no_tls: true }", "websocket", 1),
        ("mqtt { port: 1883 }", "mqtt", 1),
        ("https_port: 8443", "https_port", 1),
        ("https: 127.0.0.1:8443", "https", 1),
        ("ocsp { mode: always }", "ocsp", 1),
        ("max_sub_tokens: 5", "max_sub_tokens", 1),
        ("authorization {\n users = [{user: a, password: b}]\n auth_callout { issuer: x }\n}",
         "auth_callout", 3),
        ("authorization { user: a, password: b, proxy_required: true }", "proxy_required", 1),
        ("accounts { A {\n exports: [{service: x, latency: y}] } }", "latency", 2),
        ("accounts { A { exports: [{service: x}]\n imports: [{service: {account: A, subject: x},"
         " to: y, share: true}] } }", "share", 2),
        ("accounts { A { limits: { max_connections: 1 } } }", "limits", 1),
        ("accounts { A { users: [{user: a, proxy_required: true}] } }", "proxy_required", 1),
        ("cluster { name: C\n permissions { import: x } }", "permissions", 2),
        ("cluster { authorization { user: r, password: p\n permissions { publish: x } } }",
         "permissions", 2),
        (TLS % "ocsp_peer: true", "ocsp_peer", 1),
        ("cluster { " + TLS % "verify_and_map: true" + " }", "verify_and_map", 1),
        ("cluster { " + TLS % ('pinned_certs: ["' + "a" * 64 + '"]') + " }", "pinned_certs", 1),
        (TLS % "cert_match: x", "cert_match", 1),
        (TLS % "cipher_suites: [TLS_AES_128_GCM_SHA256]", "cipher_suites", 1),
        (TLS % "curve_preferences: [X25519]", "curve_preferences", 1),
        (TLS % "verify_cert_and_check_known_urls: true", "verify_cert_and_check_known_urls", 1),
        (TLS % "connection_rate_limit: 10", "connection_rate_limit", 1),
        ("jetstream {\n store_dir: /x\n tpm { keys_file: k } }", "tpm", 3),
        ("jetstream { limits { max_request_batch: 10 } }", "limits", 1),
        ("resolver: URL(http://127.0.0.1:9090/jwt/v1/accounts/)", "resolver", 1),
    ],
)
def test_settings_jetraft_cannot_honour_refuse_to_start(text: str, key: str, line: int) -> None:
    err = refused(text)
    assert f"{key!r} is not supported by jetraft" in err.message
    assert err.line == line


def test_encryption_settings_are_parsed() -> None:
    assert sections.JETSTREAM_ENCRYPTION_IMPLEMENTED
    js = parse_config('jetstream { encryption_key: "k1", cipher: AES }').jetstream
    assert js is not None and (js.encryption_key, js.cipher) == ("k1", "aes")
    js = parse_config('jetstream { ek: "k1" }').jetstream
    assert js is not None and js.cipher == "chachapoly"
    js = parse_config('jetstream { key: "k", cipher: chacha }').jetstream
    assert js is not None and js.cipher == "chachapoly" and "k" not in repr(js)
    with pytest.raises(ConfigError, match="Unknown cipher type: 'des'"):
        parse_config('jetstream { key: "k", cipher: des }')
    with pytest.raises(ConfigError, match="must not be empty"):
        parse_config('jetstream { key: "" }')


@pytest.mark.parametrize("key", ["prev_key", "prev_ek", "prev_encryption_key"])
def test_rekeying_refuses_to_start(key: str) -> None:
    err = refused(f'jetstream {{\n  key: "k1"\n  {key}: "k0"\n}}')
    assert err.line == 3 and f"{key!r} is not supported" in err.message


def test_encryption_with_a_cluster_refuses_to_start() -> None:
    text = (
        'server_name: a\ncluster { name: c, listen: "127.0.0.1:-1" }\n'
        'jetstream { store_dir: /x, key: "k" }'
    )
    with pytest.raises(ConfigError, match="RAFT log is not encrypted"):
        parse_config(text)


def test_nkey_users_are_read_and_checked() -> None:
    cfg = parse_config(
        f"authorization {{ users = [ {{nkey: {NKEY_USER}, allowed_connection_types: "
        f"[standard]}}, {{user: a, password: b}} ] }}"
    )
    assert cfg.authorization is not None
    nk, named = cfg.authorization.users
    assert (nk.nkey, nk.user, nk.identity, nk.connection_types) == (
        NKEY_USER, "", NKEY_USER, ("STANDARD",))
    assert named.identity == "a" and named.nkey == ""
    cases = {
        "{nkey: UNOTAKEY}": "not a valid public nkey for a user",
        f"{{nkey: {Key.new('account').public}}}": "not a valid public nkey for a user",
        f"{{nkey: {NKEY_USER}, user: x}}": "do not take usernames or passwords",
        f"{{nkey: {NKEY_USER}}}, {{nkey: {NKEY_USER}}}": "duplicate nkey",
        "{user: a, allowed_connection_types: [CARRIER_PIGEON]}": "unknown connection type",
    }
    for entry, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            parse_config(f"authorization {{ users = [ {entry} ] }}")


def test_no_auth_user_may_be_an_nkey() -> None:
    cfg = parse_config(f"no_auth_user: {NKEY_USER}\naccounts {{ A {{ users: [{{nkey: "
                       f"{NKEY_USER}}}] }} }}")
    assert cfg.no_auth_user == NKEY_USER


def test_tls_mapping_and_pinning_are_read() -> None:
    pin = "AB" * 32
    tls = parse_config(TLS % f'verify_and_map: true, pinned_certs: ["{pin}"], '
                             'min_version: "1.3"').tls
    assert tls is not None
    assert (tls.verify, tls.verify_and_map, tls.pinned_certs, tls.min_version) == (
        True, True, (pin.lower(),), "1.3")
    tls = parse_config(TLS % "verify_and_map: false").tls
    assert tls is not None and not tls.verify and not tls.verify_and_map
    with pytest.raises(ConfigError, match="does not look like hex-encoded sha256"):
        parse_config(TLS % 'pinned_certs: ["abc"]')
    with pytest.raises(ConfigError, match="unsupported TLS version"):
        parse_config(TLS % 'min_version: "1.1"')


def test_nkey_public_keys_and_signatures() -> None:
    user = Key.new("user")
    assert decode_public(user.public, PREFIX_USER) is not None
    assert decode_public(user.public[:-1] + ("A" if user.public[-1] != "A" else "B")) is None
    sig = user.sign(b"nonce")
    assert verify(user.public, b"nonce", sig)
    assert not verify(user.public, b"other", sig)
    assert not verify(Key.new("user").public, b"nonce", sig)
    assert decode_signature(b64url(sig)) == sig  # the form nats-py sends
    assert decode_signature("!!!") is None


def test_jwt_decoding_checks_signature_kind_and_roles() -> None:
    op = Operator()
    acc = op.account()
    user = Key.new("user")
    token = user_jwt(acc, user, pub={"allow": ["a.>"]})
    claims = nats_jwt.decode(token, "user")
    assert (claims.issuer, claims.subject, claims.version) == (acc.public, user.public, 2)
    assert claims.nats["pub"] == {"allow": ["a.>"]}
    v1 = nats_jwt.decode(user_jwt(acc, user, version=1), "user")
    assert v1.version == 1
    head, body, sig = token.split(".")
    other = b64url(b'{"sub": "x"}')
    forged = f"{head}.{other}.{sig}"
    bad = {
        forged: "signature verification",
        f"{head}.{body}": "expected 3 chunks",
        token[:-4] + "AAAA": "signature verification",
        encode_jwt(user, "user", user.public, {}): "not the right kind of key",
    }
    for text, message in bad.items():
        with pytest.raises(nats_jwt.JwtError, match=message):
            nats_jwt.decode(text, "user")
    with pytest.raises(nats_jwt.JwtError, match="not user claim"):
        nats_jwt.decode(op.accounts[acc.public], "user")


def test_operator_mode_config(tmp_path: Path) -> None:
    op = Operator(system=Key.new("account"))
    js = op.account(jetstream=True)
    plain = op.account()
    cfg = parse_config(op.config(), "t.conf")
    assert cfg.operator is not None
    assert cfg.operator.trusted_keys == (op.key.public,)
    assert {k for k, _ in cfg.operator.accounts} == {js.public, plain.public}
    assert cfg.system_account == op.system.public if op.system else False
    assert [a.name for a in cfg.accounts] == [js.public]  # JetStream from the account JWT
    assert cfg.accounts[0].jetstream is not None
    # The operator JWT may also be a (decorated) file, relative to the config file.
    (tmp_path / "op.jwt").write_text(f"-----BEGIN OPERATOR JWT-----\n{op.jwt()}\n"
                                     "------END OPERATOR JWT------\n")
    conf = tmp_path / "s.conf"
    conf.write_text(op.config().replace(f'"{op.jwt()}"', "op.jwt"))
    from jetraft.config import load_config

    assert load_config(conf).operator is not None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("authorization { user: a, password: b }", "operators do not allow authorization"),
        ("accounts { A {} }", "operators do not allow Accounts"),
        ("no_auth_user: x", "not compatible with Trusted Operator"),
        ("system_account: AAAA", "must be identical"),
    ],
)
def test_operator_mode_conflicts(extra: str, message: str) -> None:
    op = Operator(system=Key.new("account"))
    op.account()
    with pytest.raises(ConfigError, match=message):
        parse_config(op.config(extra=extra))


def test_operator_mode_bad_jwts() -> None:
    op = Operator()
    acc = op.account()
    with pytest.raises(ConfigError, match="operator JWT not valid"):
        parse_config(op.config().replace(op.jwt()[-6:], "AAAAAA"))
    with pytest.raises(ConfigError, match="preload account error"):
        parse_config(op.config(preload={acc.public: op.accounts[acc.public][:-6] + "AAAAAA"}))
    with pytest.raises(ConfigError, match="the JWT is for account"):
        parse_config(op.config(preload={Key.new("account").public: op.accounts[acc.public]}))
    with pytest.raises(ConfigError, match="operators require an account resolver"):
        parse_config(f'operator: "{op.jwt()}"')
    importer = Operator()
    importer.account(imports=[{"subject": "x", "account": acc.public, "type": "stream"}])
    err = refused(importer.config())
    assert "imports in the account JWT" in err.message
