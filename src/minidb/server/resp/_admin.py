"""``CONFIG`` and ``COMMAND``: the server-wide connection commands that read no session state.

Both are pure functions of the arguments and of what the server fixed at start (the command
table, ``ServerFacts``), so they live apart from the session's state machine.

``CONFIG SET`` and ``CONFIG RESETSTAT`` change nothing: every parameter is fixed when the
server starts (setting one to the value it already has is accepted as a no-op, so scripts that
``CONFIG SET appendonly yes`` keep working), and minidb's counters only grow because they feed
Prometheus rates.
"""

from __future__ import annotations

from minidb.server.resp._commands_meta import (
    CommandSpec,
    CommandTable,
    command_docs,
    command_info,
    help_lines,
)
from minidb.server.resp._errors import SYNTAX, one_line, text
from minidb.server.resp._glob import glob_match
from minidb.server.resp._info import ServerFacts, config_get, config_parameters
from minidb.server.resp._types import OK, ErrorReply, Result, Simple


def _help(table: CommandTable, name: bytes) -> Result:
    container = table.top(name)
    assert container is not None, name
    return help_lines(container)


def config_command(argv: list[bytes], table: CommandTable, facts: ServerFacts) -> Result:
    """``CONFIG GET|SET|RESETSTAT|REWRITE|HELP``; the table has checked name and arity."""
    sub = argv[1].lower()
    if sub == b"get":
        found: dict[Result, Result] = {}
        found.update(config_get(argv[2:], facts).items())
        return found
    if sub == b"set":
        return _config_set(argv, config_parameters(facts))
    if sub == b"resetstat":
        return ErrorReply(
            "ERR CONFIG RESETSTAT is not supported: minidb's counters only grow "
            "(they feed Prometheus rates)"
        )
    if sub == b"rewrite":
        return ErrorReply("ERR The server is running without a config file")
    return _help(table, b"config")


def _config_set(argv: list[bytes], params: dict[str, str]) -> Result:
    if len(argv) % 2:
        return SYNTAX
    pairs = [(argv[i].lower(), argv[i + 1]) for i in range(2, len(argv), 2)]
    # Redis reports an unknown name before any other problem, then the first refused one.
    for name, _ in pairs:
        if text(name) not in params:
            return one_line(
                b"ERR Unknown option or number of arguments for CONFIG SET - '" + name + b"'"
            )
    for name, value in pairs:
        if params[text(name)].encode() != value:
            return one_line(
                b"ERR CONFIG SET failed (possibly related to argument '"
                + name
                + b"') - can't set immutable config"
            )
    return OK


def command_command(argv: list[bytes], table: CommandTable) -> Result:
    """``COMMAND [COUNT|INFO|DOCS|LIST|HELP]``; the table has checked name and arity.

    ``COMMAND INFO`` answers one entry (or null) per name asked, so its reply grows with the
    request, which the codec's own limit on arguments per command bounds.
    """
    if len(argv) == 1:
        return [command_info(spec) for spec in table]
    sub = argv[1].lower()
    if sub == b"count":
        return len(table)
    if sub == b"info":
        if len(argv) == 2:
            return [command_info(spec) for spec in table]
        return [command_info(table.by_fullname(name)) for name in argv[2:]]
    if sub == b"docs":
        if len(argv) == 2:
            return {spec.name.encode(): command_docs(spec) for spec in table}
        found = (table.by_fullname(name) for name in argv[2:])
        return {spec.name.encode(): command_docs(spec) for spec in found if spec}
    if sub == b"list":
        return _command_list(table, argv)
    return _help(table, b"command")


def _command_list(table: CommandTable, argv: list[bytes]) -> Result:
    every: list[CommandSpec] = [spec for top in table for spec in (top, *top.subcommands)]
    if len(argv) == 2:
        return [spec.name.encode() for spec in every]
    if len(argv) != 5 or argv[2].lower() != b"filterby":
        return SYNTAX
    kind, arg = argv[3].lower(), argv[4]
    if kind == b"pattern":
        chosen = [s for s in every if glob_match(arg, s.name.encode())]
    elif kind == b"aclcat":
        category = Simple("@" + text(arg).lower())
        chosen = [s for s in every if category in s.acl_categories()]
    elif kind == b"module":
        chosen = []  # no modules
    else:
        return SYNTAX
    return [spec.name.encode() for spec in chosen]
