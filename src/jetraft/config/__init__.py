"""The NATS configuration format -> a typed, validated ServerConfig.

    parse_config(text, filename="<string>") -> ServerConfig
    load_config(path) -> ServerConfig
    parse_raw(text, filename="<string>") -> dict          (untyped tree)
    parse_args(argv) -> (config path | None, Overrides)    (nats-server flags)
    apply_overrides(cfg, overrides) -> ServerConfig
    build_config(argv) -> ServerConfig                     (file, then flags)

Every problem raises ConfigError, whose text is ``file:line:col: message``.
This package imports nothing else of jetraft.
"""

from jetraft.config.build import config_from_tree, finalize, load_config, parse_config, parse_raw
from jetraft.config.errors import ConfigError, Pos
from jetraft.config.flags import (
    Overrides,
    apply_overrides,
    build_config,
    make_arg_parser,
    parse_args,
    parse_cluster_url,
)
from jetraft.config.model import (
    DEFAULT_SYSTEM_ACCOUNT,
    GLOBAL_ACCOUNT,
    AccountConfig,
    AccountJetStreamConfig,
    AuthorizationConfig,
    ClusterConfig,
    JetStreamConfig,
    OperatorConfig,
    Permissions,
    ResponsePermission,
    ServerConfig,
    SubjectPermission,
    TLSConfig,
    UserConfig,
    default_store_dir,
)
from jetraft.config.syntax import Node, parse_file_tree, parse_tree, to_plain
from jetraft.config.values import parse_go_duration

apply_flags = apply_overrides

__all__ = [
    "DEFAULT_SYSTEM_ACCOUNT",
    "GLOBAL_ACCOUNT",
    "AccountConfig",
    "AccountJetStreamConfig",
    "AuthorizationConfig",
    "ClusterConfig",
    "ConfigError",
    "JetStreamConfig",
    "Node",
    "OperatorConfig",
    "Overrides",
    "Permissions",
    "Pos",
    "ResponsePermission",
    "ServerConfig",
    "SubjectPermission",
    "TLSConfig",
    "UserConfig",
    "apply_flags",
    "apply_overrides",
    "build_config",
    "config_from_tree",
    "default_store_dir",
    "finalize",
    "load_config",
    "make_arg_parser",
    "parse_args",
    "parse_cluster_url",
    "parse_config",
    "parse_file_tree",
    "parse_go_duration",
    "parse_raw",
    "parse_tree",
    "to_plain",
]
