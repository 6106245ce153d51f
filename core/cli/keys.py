"""``forge key show|rotate|export``: the user's artifact key (:mod:`silvanforge.artifact.userkey`) from
the command line; :mod:`silvanforge.cli` adds these commands under ``forge key``."""

from __future__ import annotations

import os

import typer

from silvanforge.artifact import userkey
from silvanforge.errors import InputError

key_app = typer.Typer(help="Your artifact key: artifacts you save are signed with it, so they load "
                           "their machine code at once (see silvanforge.artifact.userkey).")


@key_app.callback(invoke_without_command=True)
def _key(ctx: typer.Context):
    # ``forge key`` alone: its help, and success (click's no_args_is_help ends in an empty usage error)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


@key_app.command("show")
def key_show():
    """Where the key is and its fingerprint (compare two hosts'; nothing to sign with)."""
    if not userkey.enabled():
        raise InputError(f"the per-user artifact key is off ({userkey.ENABLE_ENV}=0)")
    key = userkey.load(create=False)
    where = userkey.path()
    if key is None and os.environ.get(userkey.KEY_FILE_ENV):  # (a fleet's file: provisioned, not made by a save)
        typer.echo(f"{where}: no key there ({userkey.KEY_FILE_ENV}): provision the fleet's key there, or make "
                   "one with forge key rotate")
    elif key is None:
        typer.echo(f"{where}: no key yet (the first save makes one)")
    else:
        typer.echo(f"{where}: fingerprint {userkey.fingerprint(key)}")


@key_app.command("rotate")
def key_rotate():
    """Make a new key: artifacts signed with the old one compile their model again on load."""
    key = userkey.rotate()
    typer.echo(f"{userkey.path()}: new key, fingerprint {userkey.fingerprint(key)}")


@key_app.command("export")
def key_export():
    """Print the key (hex) for a fleet: SILVANFORGE_ARTIFACT_KEY=... on each host, or the same
    file under SILVANFORGE_KEY_FILE (mode 600)."""
    key = userkey.load(create=True)
    if key is None:
        raise InputError(f"the per-user artifact key is off ({userkey.ENABLE_ENV}=0)")
    typer.echo(key.decode("ascii"))
