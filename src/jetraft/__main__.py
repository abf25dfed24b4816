"""The `jetraft` command.

`jetraft server [flags]` runs a server with nats-server style flags (-c FILE, -p PORT, -js,
...). Every other command, and `jetraft server ls|report|cluster|check ...`, is the admin CLI
(`jetraft.cli`), which talks to running servers over the wire.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "server":
        from jetraft.cli.server_names import SERVER_ADMIN_COMMANDS

        if len(args) < 2 or args[1] not in SERVER_ADMIN_COMMANDS:
            from jetraft.server.runner import main as server_main

            return server_main(args[1:])
    from jetraft.cli.app import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
