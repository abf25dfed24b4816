"""Sub-commands of `jetraft server` that administer servers; anything else after `server`
(flags, nothing) starts a server, as `jetraft server -c FILE` always has. Kept apart from
the CLI so that starting a server does not import the CLI (nats-py, click, rich)."""

SERVER_ADMIN_COMMANDS = frozenset(
    {"ls", "list", "report", "cluster", "raft", "r", "check", "ping", "request", "req"}
)
