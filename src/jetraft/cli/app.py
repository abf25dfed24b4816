"""The ``jetraft`` command line: the nats CLI's verbs, flags and output, over the wire only.

``main`` turns every failure into one line on stderr and an exit code: 1 for errors the
server or the situation caused, 2 for usage mistakes, 130 on Ctrl-C, the monitoring codes
(0 OK, 1 warning, 2 critical, 3 unknown) for ``server check``.
"""

from __future__ import annotations

import os
import sys
import traceback

import click
import nats.errors

from jetraft.cli.errors import CliError
from jetraft.cli.group import AliasGroup
from jetraft.cli.options import add_flags
from jetraft.cli.server_names import SERVER_ADMIN_COMMANDS  # noqa: F401  (re-exported)


@click.group(
    cls=AliasGroup, name="jetraft", context_settings={"help_option_names": ["-h", "--help"]}
)
@add_flags(hidden=False)
@click.version_option(package_name="jetraft", prog_name="jetraft", message="%(prog)s %(version)s")
def cli(**_: object) -> None:
    """NATS and JetStream administration for jetraft (and nats-server) clusters.

    `jetraft server -c FILE` runs a server; `jetraft server ls|report|cluster|check ...`
    administer running ones.
    """


def _register() -> None:
    # Imported for their side effect of adding commands to `cli`.
    from jetraft.cli import (
        bench_cmd,
        consumer_cmd,
        context_cmd,
        core_cmd,
        kv_cmd,
        object_cmd,
        server_check,
        server_cmd,
        stream_cluster,
        stream_cmd,
    )

    del stream_cluster, server_check
    assert isinstance(cli, AliasGroup)
    for cmd, aliases in (
        (core_cmd.pub_cmd, ("publish",)),
        (core_cmd.sub_cmd, ("subscribe",)),
        (core_cmd.req_cmd, ("request",)),
        (core_cmd.reply_cmd, ()),
    ):
        cli.add_command(cmd)
        cli.alias(str(cmd.name), *aliases)
    cli.add_command(stream_cmd.stream)
    cli.alias("stream", "str", "st", "s")
    cli.add_command(consumer_cmd.consumer)
    cli.alias("consumer", "con", "obs", "c")
    cli.add_command(context_cmd.context)
    cli.alias("context", "ctx")
    cli.add_command(server_cmd.server)
    cli.alias("server", "srv")
    cli.add_command(bench_cmd.bench)
    cli.add_command(kv_cmd.kv)
    cli.add_command(object_cmd.obj)
    cli.alias("object", "obj")


def main(argv: list[str]) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`jetraft str ls | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _main(argv: list[str]) -> int:
    _register()
    try:
        result = cli.main(args=argv, prog_name="jetraft", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:
        print(exc.format_message())
        return 0
    except click.UsageError as exc:
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        print(f"jetraft: error: {exc.format_message()}{where}", file=sys.stderr)
        return exc.exit_code
    except click.ClickException as exc:
        print(f"jetraft: error: {exc.format_message()}", file=sys.stderr)
        return exc.exit_code
    except click.exceptions.Abort:
        print("jetraft: aborted", file=sys.stderr)
        return 130
    except CliError as exc:
        print(f"jetraft: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except nats.errors.Error as exc:
        print(
            f"jetraft: error: {str(exc).removeprefix('nats: ') or type(exc).__name__}",
            file=sys.stderr,
        )
        return 1
    except Exception as exc:  # never a traceback for the user unless asked
        if os.environ.get("JETRAFT_DEBUG"):
            traceback.print_exc()
        print(
            f"jetraft: internal error: {type(exc).__name__}: {exc} (JETRAFT_DEBUG=1 shows where)",
            file=sys.stderr,
        )
        return 1
    return result if isinstance(result, int) else 0
