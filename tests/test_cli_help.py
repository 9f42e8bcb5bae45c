"""Every ``cogd`` command and group says what it does in ``--help``: the click tree is walked from
``cogd.cli.main``, so a command added without a docstring (or ``help=``) fails here."""

from __future__ import annotations

import click
from click.testing import CliRunner

from cogd.cli import main


def walk(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """``(path, command)`` for ``command`` and every command under it, depth first."""
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            found += walk(command.commands[name], path + (name,))
    return found


def without_help(root: click.Command) -> list[str]:
    """The command lines (``cogd memory add``) whose help text is empty."""
    return [" ".join(("cogd",) + path) for path, command in walk(root) if not (command.help or "").strip()]


def test_the_walk_reaches_nested_commands():
    paths = {path for path, _ in walk(main)}
    assert {(), ("up",), ("status",), ("doctor",), ("reset",), ("install-hooks",), ("memory",),
            ("memory", "add"), ("memory", "purge"), ("memory", "verify"), ("consolidate",)} <= paths
    assert len(paths) == len(walk(main))  # each command once


def test_every_command_and_group_has_help_text():
    assert without_help(main) == []


def test_a_command_without_help_is_named():
    @click.group(help="a group")
    def group() -> None:
        pass

    @group.command("quiet")
    def quiet() -> None:
        pass

    @group.command("loud")
    def loud() -> None:
        """Says what it does."""

    assert without_help(group) == ["cogd quiet"]


def test_help_prints_for_every_command():
    runner = CliRunner()
    for path, command in walk(main):
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert command.help.strip().split("\n")[0][:40] in " ".join(result.output.split()), path
