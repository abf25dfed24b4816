"""``jetraft context`` (``ctx``): save, select, ls, info, rm, unselect of named contexts."""

from __future__ import annotations

from typing import Any

import click

from jetraft.cli import contexts, prompts
from jetraft.cli.errors import CliError
from jetraft.cli.group import group
from jetraft.cli.options import FLAGS, add_flags
from jetraft.cli.render import Columns, Table, print_json

context = group("context", "Manage connection contexts (shared with the nats CLI)")

# connection flag -> context field
_FIELDS = {f.dest: f.context_key for f in FLAGS if f.context_key}


def _root_and_leaf(leaf: dict[str, Any]) -> dict[str, Any]:
    root = click.get_current_context().find_root().params
    return {d: leaf.get(d) if leaf.get(d) is not None else root.get(d) for d in _FIELDS}


@context.command("save", help="Create or update a context from the connection flags")
@click.argument("name")
@click.option("--description", default=None, help="A description of the context")
@click.option("--select", "select_it", is_flag=True, help="Select the context after saving it")
@add_flags(hidden=True)
def save_cmd(name: str, description: str | None, select_it: bool, **flags: Any) -> None:
    contexts.validate_name(name)
    existing = contexts.load(name) if name in contexts.known_contexts() else contexts.Context()
    values = _root_and_leaf(flags)
    body = existing.to_json()
    for dest, key in _FIELDS.items():
        if values.get(dest) is not None:
            body[key] = values[dest]
    if body.get("user") and not body.get("password") and not body.get("token"):
        body["token"], body["user"] = body["user"], ""
    if description is not None:
        body["description"] = description
    path = contexts.save(name, contexts.Context.from_json(body))
    if select_it:
        contexts.select(name)
    print(f"Saved context {name!r} in {path}")
    _show(name)


@context.command("select", help="Select the default context")
@click.argument("name", required=False)
def select_cmd(name: str | None) -> None:
    known = contexts.known_contexts()
    if not known:
        raise CliError(
            "no contexts are defined (create one with `jetraft context save NAME -s URL`)"
        )
    chosen = name or prompts.select("Select a Context", known, avoid="a context name")
    contexts.select(chosen)
    _show(chosen)


@context.command("unselect", help="Make no context the default")
def unselect_cmd() -> None:
    current = contexts.selected()
    if not current:
        print("No context currently selected")
        return
    contexts.unselect()
    print(f'Unselected the "{current}" context')


@context.command("ls", help="List known contexts")
@click.option("--names", "names_only", is_flag=True, help="Only the context names")
@click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
def ls_cmd(names_only: bool, as_json: bool) -> None:
    known, current = contexts.known_contexts(), contexts.selected()
    if as_json:
        print_json([{"name": n, **_redacted(contexts.load_raw(n))} for n in known])
        return
    if names_only:
        for n in known:
            print(n)
        return
    if not known:
        print("No known contexts")
        return
    table = Table("Known Contexts", ["Name", "Description"])
    for n in known:
        table.add(n + ("*" if n == current else ""), contexts.load(n).description)
    table.print()


@context.command("info", help="Show the selected or a named context")
@click.argument("name", required=False)
@click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
def info_cmd(name: str | None, as_json: bool) -> None:
    chosen = name or contexts.selected()
    if not chosen:
        raise CliError("no context is selected and none was named")
    if as_json:
        print_json(_redacted(contexts.load_raw(chosen)))
    else:
        _show(chosen)


@context.command("rm", help="Remove a context")
@click.argument("name")
@click.option("--force", "-f", is_flag=True, help="Remove without asking, even when selected")
def rm_cmd(name: str, force: bool) -> None:
    if contexts.selected() == name:
        if not force:
            raise CliError("cannot remove the selected context, select another one or use --force")
        contexts.unselect()
    if not force and not prompts.confirm(f'Really delete context "{name}"'):
        return
    contexts.delete(name)


def _redacted(body: dict[str, Any]) -> dict[str, Any]:
    return {k: ("*********" if k in ("password", "token") and v else v) for k, v in body.items()}


def _show(name: str) -> None:
    ctx = contexts.load(name)
    cols = Columns(f"NATS Configuration Context {name!r}")
    cols.row_if_set("Description", ctx.description)
    cols.row("Server URLs", ctx.url or "nats://127.0.0.1:4222")
    cols.row_if_set("Username", ctx.user)
    cols.row_if("Password", "*********", bool(ctx.password))
    cols.row_if("Token", "*********", bool(ctx.token))
    cols.row_if_set("Credentials", ctx.creds)
    cols.row_if_set("NKey", ctx.nkey)
    cols.row_if_set("Certificate", ctx.cert)
    cols.row_if_set("Key", ctx.key)
    cols.row_if_set("CA", ctx.ca)
    cols.row_if("TLS First", True, ctx.tls_first)
    cols.row_if_set("JetStream Domain", ctx.jetstream_domain)
    cols.row_if_set("JetStream API Prefix", ctx.jetstream_api_prefix)
    cols.row("Path", str(contexts.context_path(name)))
    cols.row("Selected", contexts.selected() == name)
    cols.print()


context.alias("save", "add", "create")
context.alias("select", "switch", "set")
context.alias("ls", "list", "l")
context.alias("info", "show", "view")
context.alias("rm", "remove")
