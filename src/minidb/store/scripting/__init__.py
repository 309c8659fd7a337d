"""Lua scripting (EVAL and friends), run by the data owner: see ``_engine`` for how a script
runs as one journal group, ``_sandbox`` for what a script can reach, ``_convert`` for the
value conversions, ``_libs`` for cjson/bit/redis helpers, ``_cache`` for the script cache,
``_shebang`` for a script's ``#!lua`` line."""

from minidb.store.scripting._cache import MAX_EVAL_SCRIPTS, MAX_LOADED_SCRIPTS, ScriptCache, sha1_of
from minidb.store.scripting._commands import COMMANDS, ENGINE, configure
from minidb.store.scripting._engine import DEFAULT_TIME_LIMIT_MS, ScriptEngine
from minidb.store.scripting._sandbox import DEFAULT_MAX_MEMORY, Sandbox

__all__ = [
    "COMMANDS",
    "DEFAULT_MAX_MEMORY",
    "DEFAULT_TIME_LIMIT_MS",
    "ENGINE",
    "MAX_EVAL_SCRIPTS",
    "MAX_LOADED_SCRIPTS",
    "Sandbox",
    "ScriptCache",
    "ScriptEngine",
    "configure",
    "sha1_of",
]
