"""The typed, validated server configuration (frozen values).

Defaults are nats-server's (server/const.go), except ``JetStreamConfig.sync_interval_ns``:
jetraft fsyncs before every acknowledgement unless a lazy interval is asked for.
Times are integers in nanoseconds (``*_ns``) or float seconds (``*_s``) where
nats-server itself speaks in seconds (TLS and auth timeouts).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jetraft.config.errors import ConfigError, Pos

NS_PER_S = 1_000_000_000
DEFAULT_PORT = 4222
DEFAULT_CLUSTER_PORT = 6222
DEFAULT_HOST = "0.0.0.0"
DEFAULT_SYSTEM_ACCOUNT = "$SYS"
GLOBAL_ACCOUNT = "$G"
DEFAULT_MAX_PAYLOAD = 1024 * 1024
DEFAULT_MAX_PENDING = 64 * 1024 * 1024
DEFAULT_MAX_CONTROL_LINE = 4096
DEFAULT_MAX_CONNECTIONS = 64 * 1024
DEFAULT_PING_INTERVAL_NS = 120 * NS_PER_S
DEFAULT_PING_MAX = 2
DEFAULT_WRITE_DEADLINE_NS = 10 * NS_PER_S
DEFAULT_AUTH_TIMEOUT_S = 2.0
DEFAULT_TLS_TIMEOUT_S = 2.0
DEFAULT_LAME_DUCK_DURATION_NS = 120 * NS_PER_S
DEFAULT_LAME_DUCK_GRACE_PERIOD_NS = 10 * NS_PER_S
DEFAULT_RESPONSE_EXPIRES_NS = 120 * NS_PER_S
DEFAULT_ROUTE_POOL_SIZE = 3


def default_store_dir() -> str:
    """Where JetStream data goes when no store_dir is configured (temporary!)."""
    return os.path.join(tempfile.gettempdir(), "nats", "jetstream")


@dataclass(frozen=True, slots=True)
class SubjectPermission:
    """Allow/deny subject lists for one direction. An empty allow list allows all."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ResponsePermission:
    """``allow_responses``: may publish to reply subjects of received requests.

    nats-server defaults: one response, within two minutes. nats-server also turns
    off the blanket publish allow for such a user when no publish allow list is
    given (the user may then publish only responses).
    """

    max_msgs: int = 1
    expires_ns: int = DEFAULT_RESPONSE_EXPIRES_NS


@dataclass(frozen=True, slots=True)
class Permissions:
    publish: SubjectPermission | None = None
    subscribe: SubjectPermission | None = None
    allow_responses: ResponsePermission | None = None


@dataclass(frozen=True, slots=True)
class UserConfig:
    """A user. ``password`` is plain text or a bcrypt hash ("$2a$..."). ``account`` is
    "" for users of the ``authorization`` block (global account $G).

    An nkey user has ``nkey`` (a public user nkey, "U...") and no name or password: it proves
    itself by signing the server's nonce. ``connection_types`` empty allows every kind of
    connection; otherwise the upper-case nats-server names (STANDARD, WEBSOCKET, ...).
    """

    user: str
    password: str = ""
    permissions: Permissions | None = None
    account: str = ""
    nkey: str = ""
    connection_types: tuple[str, ...] = ()

    @property
    def identity(self) -> str:
        """The name CONNECT refers to: the nkey for nkey users, else the user name."""
        return self.nkey or self.user


@dataclass(frozen=True, slots=True)
class AuthorizationConfig:
    """The top-level ``authorization {}`` block.

    ``timeout_s`` 0 means "not set": the auth timeout then follows nats-server's rule
    (2 s, or the TLS timeout + 1 s with TLS); see ``ServerConfig.auth_timeout_ns``.
    ``default_permissions`` were already applied to users without their own.
    """

    user: str = ""
    password: str = ""
    token: str = ""
    users: tuple[UserConfig, ...] = ()
    timeout_s: float = 0.0
    default_permissions: Permissions | None = None


@dataclass(frozen=True, slots=True)
class AccountJetStreamConfig:
    """Per-account JetStream limits; -1 means unlimited."""

    max_memory: int = -1
    max_store: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1
    memory_max_stream_bytes: int = -1
    store_max_stream_bytes: int = -1
    max_bytes_required: bool = False


@dataclass(frozen=True, slots=True)
class AccountConfig:
    """An account (a subject space). ``jetstream`` None: JetStream disabled for it."""

    name: str
    users: tuple[UserConfig, ...] = ()
    jetstream: AccountJetStreamConfig | None = None
    default_permissions: Permissions | None = None
    mappings: tuple[SubjectMapping, ...] = ()
    exports: tuple[AccountExport, ...] = ()
    imports: tuple[AccountImport, ...] = ()


# nats-server's service response types and its default response threshold.
RESPONSE_SINGLETON = "Singleton"
RESPONSE_STREAM = "Stream"
RESPONSE_CHUNKED = "Chunked"
DEFAULT_RESPONSE_THRESHOLD_NS = 120 * NS_PER_S


@dataclass(frozen=True, slots=True)
class AccountExport:
    """``exports [{stream: subj}]`` or ``{service: subj}``. ``accounts`` None: public (an
    empty list is public too, as nats-server reads it); otherwise the accounts allowed to
    import it. The response fields matter for services only."""

    service: bool
    subject: str
    accounts: tuple[str, ...] | None = None
    response_type: str = RESPONSE_SINGLETON
    response_threshold_ns: int = DEFAULT_RESPONSE_THRESHOLD_NS
    pos: Pos | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class AccountImport:
    """``imports [{stream: {account, subject}, prefix|to}]`` or ``{service: {...}, to}``.

    ``subject`` is the subject in the exporting ``account``; ``local`` the subject in the
    importing account: for a stream the subject its subscribers see (``prefix.subject`` or
    ``to``), for a service the subject its clients publish requests on (``to``, default the
    exported subject). Wildcards correspond in order."""

    service: bool
    account: str
    subject: str
    local: str
    pos: Pos | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class MappingDestination:
    """One destination of a subject mapping: subject, weight in percent, cluster scope."""

    subject: str
    weight: int = 100
    cluster: str = ""


@dataclass(frozen=True, slots=True)
class SubjectMapping:
    """``mappings { src: dest }`` or ``src: [{destination, weight, cluster}]``; ``single``
    for the plain string form (nats-server words its errors differently)."""

    src: str
    destinations: tuple[MappingDestination, ...]
    pos: Pos | None = field(default=None, compare=False)
    single: bool = False

    def error(self, reason: str) -> ConfigError:
        """nats-server's text for a mapping it cannot add, at the mapping's place."""
        if self.single:
            dest = self.destinations[0].subject
            text = f'Error adding mapping for "{self.src}" to "{dest}" : {reason}'
        else:
            text = f'Error adding mapping for "{self.src}" : {reason}'
        return ConfigError(text, self.pos)


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """A ``tls {}`` block.

    ``verify_and_map`` (implies ``verify``): the client certificate names the user (its
    subject DN, or a SAN email, DNS name or URI, as nats-server). ``pinned_certs``: lower-case
    hex SHA-256 of the DER SubjectPublicKeyInfo of the peer certificates allowed; empty allows
    any certificate the CA accepts. ``min_version`` "1.2" or "1.3".
    """

    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    verify: bool = False
    timeout_s: float = DEFAULT_TLS_TIMEOUT_S
    handshake_first: bool = False
    verify_and_map: bool = False
    pinned_certs: tuple[str, ...] = ()
    min_version: str = "1.2"


@dataclass(frozen=True, slots=True)
class JetStreamConfig:
    """Server-level JetStream settings.

    ``sync_interval_ns`` 0 (the jetraft default, and ``sync_interval: always``) means
    fsync before every acknowledgement; a positive interval is the explicit, lazy
    opt-in whose loss window is that interval. nats-server stores data under
    ``<store_dir>/jetstream``; the server decides the layout below store_dir.

    Encryption at rest: ``encryption_key`` (the secret the stores derive their keys from; ""
    means stored in clear), ``cipher`` "chachapoly" (nats-server's default) or "aes", and
    ``prev_encryption_key`` for re-keying. See ``build_sections.JETSTREAM_ENCRYPTION_IMPLEMENTED``.
    """

    store_dir: str = field(default_factory=default_store_dir)
    max_memory_store: int = -1
    max_file_store: int = -1
    domain: str = ""
    unique_tag: str = ""
    sync_interval_ns: int = 0
    strict: bool = True
    max_buffered_msgs: int = 0
    max_buffered_size: int = 0
    max_outstanding_catchup: int = 0
    request_queue_limit: int = 0
    encryption_key: str = field(default="", repr=False)
    cipher: str = "chachapoly"
    prev_encryption_key: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    """Operator mode: clients authenticate with user JWTs signed by a trusted account.

    ``operators`` are the operator JWTs (checked), ``trusted_keys`` the operator identity
    and signing keys allowed to sign account JWTs, ``accounts`` the MEMORY resolver's
    preloaded (account public key, account JWT) pairs (signatures checked, trust decided at
    authentication), ``pinned_accounts`` (when not empty) the only accounts users may belong
    to.
    """

    operators: tuple[str, ...] = ()
    trusted_keys: tuple[str, ...] = ()
    accounts: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    pinned_accounts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The ``cluster {}`` block: route listener, routes to solicit, route credentials."""

    name: str = ""
    host: str = DEFAULT_HOST
    port: int = DEFAULT_CLUSTER_PORT
    routes: tuple[str, ...] = ()
    user: str = ""
    password: str = ""
    auth_timeout_s: float = 0.0
    advertise: str = ""
    no_advertise: bool = False
    connect_retries: int = 0
    pool_size: int = DEFAULT_ROUTE_POOL_SIZE
    tls: TLSConfig | None = None


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Everything a server needs from its config file and flags.

    ``port``/``http_port``: -1 asks for a random port. ``http_host`` "" means "same as
    host". ``max_connections`` -1 refuses every client (nats-server's reading of
    ``max_connections: 0``). ``system_account`` is "$SYS" unless set otherwise or
    ``no_system_account`` is true. ``warnings`` are ``file:line:col: text`` lines
    (unknown or unsupported fields, deprecated forms); ``raw`` is the untyped tree.
    ``jetstream_settings`` keeps a disabled ``jetstream {}`` block's settings so that
    ``-js`` can enable it with them. In operator mode ``accounts`` holds the preloaded
    accounts whose JWT enables JetStream (named by public key, with the JWT's limits) and
    ``system_account`` the operator's system account ("" when none).
    """

    server_name: str = ""
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    client_advertise: str = ""
    http_host: str = ""
    http_port: int = 0
    https_port: int = 0
    http_base_path: str = "/"
    max_payload: int = DEFAULT_MAX_PAYLOAD
    max_control_line: int = DEFAULT_MAX_CONTROL_LINE
    max_pending: int = DEFAULT_MAX_PENDING
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_subscriptions: int = 0
    ping_interval_ns: int = DEFAULT_PING_INTERVAL_NS
    ping_max: int = DEFAULT_PING_MAX
    write_deadline_ns: int = DEFAULT_WRITE_DEADLINE_NS
    auth_timeout_ns: int = int(DEFAULT_AUTH_TIMEOUT_S * NS_PER_S)
    lame_duck_duration_ns: int = DEFAULT_LAME_DUCK_DURATION_NS
    lame_duck_grace_period_ns: int = DEFAULT_LAME_DUCK_GRACE_PERIOD_NS
    debug: bool = False
    trace: bool = False
    trace_verbose: bool = False
    logtime: bool = True
    logtime_utc: bool = False
    log_file: str = ""
    pid_file: str = ""
    no_header_support: bool = False
    server_tags: tuple[str, ...] = ()
    no_auth_user: str = ""
    system_account: str = DEFAULT_SYSTEM_ACCOUNT
    no_system_account: bool = False
    authorization: AuthorizationConfig | None = None
    accounts: tuple[AccountConfig, ...] = ()
    mappings: tuple[SubjectMapping, ...] = ()  # of the global account
    tls: TLSConfig | None = None
    jetstream: JetStreamConfig | None = None
    cluster: ClusterConfig | None = None
    operator: OperatorConfig | None = None
    config_file: str = ""
    warnings: tuple[str, ...] = field(default=(), compare=False)
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    jetstream_settings: JetStreamConfig | None = field(default=None, compare=False, repr=False)

    def all_users(self) -> tuple[UserConfig, ...]:
        """Users of every account and of the authorization block."""
        users = [u for acc in self.accounts for u in acc.users]
        if self.authorization is not None:
            users.extend(self.authorization.users)
        return tuple(users)

    def account(self, name: str) -> AccountConfig | None:
        return next((a for a in self.accounts if a.name == name), None)
