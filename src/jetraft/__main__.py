"""The `jetraft` command. `jetraft server ...` runs a server with nats-server style flags."""

from __future__ import annotations

import sys

USAGE = """usage: jetraft <command> [options]

commands:
  server   run a jetraft server (flags as nats-server: -c FILE, -p PORT, -js, -sd DIR, ...)
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = args[0], args[1:]
    if command == "server":
        from jetraft.server.runner import main as server_main

        return server_main(rest)
    if command in ("--version", "version"):
        import jetraft

        print(f"jetraft {jetraft.__version__}")
        return 0
    print(f"jetraft: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
