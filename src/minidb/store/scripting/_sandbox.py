"""The Lua state scripts run in: Lua 5.1 (lupa's ``lupa.lua51``), sandboxed as Redis does.

One ``Sandbox`` per server, shared by every script (Redis keeps one Lua state too). What a
script sees is a read-only environment (``_G``): the Lua 5.1 base library without the parts
that reach outside (``dofile``, ``loadfile``, ``require``, ``module``, ``print``,
``getfenv``/``setfenv``, ``os``, ``io``, ``debug``, ``package``, ``string.dump``,
``newproxy``), ``string``, ``table``, ``math``, ``coroutine``, and the libraries the host adds
(``redis``, ``cjson``, ``bit``), each seen through a read-only proxy. Assigning a global fails
with Redis 7's "Attempt to modify a readonly table", reading an unknown one with "Script
attempted to access nonexistent global variable". ``rawset`` and ``setmetatable`` refuse the
protected tables; ``loadstring`` and ``load`` refuse bytecode (a crafted chunk can break the
VM) and give what they compile the script's environment, not the real globals.

Python objects reach Lua only as upvalues of the prelude's functions and as ``cjson.null``;
lupa's ``attribute_filter`` refuses every attribute of them, so ``cjson.null.__class__``
leads nowhere, and the ``python`` module lupa registers is removed.

Time: the host installs a count hook (``debug.sethook``, kept by the prelude before ``debug``
is removed) for the duration of each script; every ``HOOK_INSTRUCTIONS`` VM instructions it asks
the host whether the script's time is up. Once it is, the hook fires on every instruction and
raises, so a script catching the error with ``pcall`` is stopped again at once. Memory: the
whole state is bounded by lupa's ``max_memory``; an allocation past it fails with Lua's "not
enough memory", which the script cannot grow around.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lupa.lua51 as lua

from minidb.store.scripting._convert import MAX_REPLY_DEPTH

HOOK_INSTRUCTIONS = 10_000
"""VM instructions between two checks of the script's deadline (each a Python call, ~1 us)."""

MAX_PASSED_ARGUMENTS = 256
"""KEYS and ARGV up to this many in all are passed to Lua as call arguments (cheaper than two
``table_from``); more go as tables (Lua's C stack holds only a few thousand values)."""

DEFAULT_MAX_MEMORY = 256 << 20
"""Bytes the Lua state may hold in all (scripts, their data, the cache's compiled chunks)."""

LuaError = lua.LuaError
LuaMemoryError = lua.LuaMemoryError

_PRELUDE = r"""
local host = ...
local sethook, getinfo = debug.sethook, debug.getinfo
local real_setmetatable, real_rawset, real_loadstring = setmetatable, rawset, loadstring
local real_setfenv, real_type, real_error = setfenv, type, error
local tostring, xpcall, real_pcall = tostring, xpcall, pcall

local readonly = real_setmetatable({}, {__mode = 'k'})
local READONLY = 'Attempt to modify a readonly table'

local function protect(real)
  local proxy = {}
  real_setmetatable(proxy, {
    __index = real,
    __newindex = function() real_error(READONLY, 2) end,
    __metatable = false,
  })
  readonly[proxy] = true
  return proxy
end

-- what scripts see as globals
local G = {}
local env = {}
real_setmetatable(env, {
  __index = function(_, name)
    local value = G[name]
    if value == nil then
      real_error("Script attempted to access nonexistent global variable '"
        .. tostring(name) .. "'", 2)
    end
    return value
  end,
  __newindex = function() real_error(READONLY, 2) end,
  __metatable = false,
})
readonly[env] = true

for _, name in ipairs({'assert', 'collectgarbage', 'error', 'gcinfo', 'getmetatable',
    'ipairs', 'next', 'pairs', 'pcall', 'rawequal', 'rawget', 'select', 'tonumber',
    'tostring', 'type', 'unpack', 'xpcall', '_VERSION'}) do
  G[name] = _G[name]
end
G._G = env
G.setmetatable = function(t, mt)
  if readonly[t] then real_error(READONLY, 0) end
  return real_setmetatable(t, mt)
end
G.rawset = function(t, k, v)
  if readonly[t] then real_error(READONLY, 0) end
  return real_rawset(t, k, v)
end
local function compile(text, name)
  if real_type(text) == 'string' and text:byte(1) == 27 then
    return nil, 'bytecode is not allowed'
  end
  local fn, err = real_loadstring(text, name)
  if fn then real_setfenv(fn, env) end
  return fn, err
end
G.loadstring = function(text, name) return compile(text, name or '=(loadstring)') end
G.load = function(reader, name)
  if real_type(reader) ~= 'function' then return compile(reader, name or '=(load)') end
  local parts = {}
  while true do
    local part = reader()
    if part == nil or part == '' then break end
    parts[#parts + 1] = part
  end
  return compile(table.concat(parts), name or '=(load)')
end

string.dump = nil
getmetatable('').__metatable = false
for _, name in ipairs({'string', 'table', 'math', 'coroutine'}) do
  G[name] = protect(_G[name])
end

-- the error handler: Redis's __redis__err__handler, finding the script's own frame
local describe = host.describe
local rawget = rawget
local function on_error(err)
  local source, line
  local level = 2
  while true do
    local info = getinfo(level, 'Sl')
    if not info then break end
    if info.source == '@user_script' then
      source, line = info.source, info.currentline
      break
    end
    level = level + 1
  end
  local kind = real_type(err)
  if kind == 'userdata' then  -- a Python exception: redis.call's error, or a library's
    local text, from_call = describe(err)
    if not from_call then  -- as Lua words a C library's error (luaL_error)
      text = 'ERR ' .. (line and ('user_script:' .. line .. ': ') or '') .. text
    end
    err = {err = text}
  elseif kind ~= 'table' then
    err = {err = 'ERR ' .. tostring(err)}
  else  -- a fresh table: the host must never run a script's metamethods (no hook then)
    local text = rawget(err, 'err')
    if real_type(text) ~= 'string' then text = 'ERR ' .. tostring(text) end
    err = {err = text}
  end
  err.source, err.line = source, line
  return err
end

local time_up = host.time_up
local on_count
on_count = function()
  local message = time_up()
  if message then
    sethook(on_count, '', 1)
    real_error({err = message}, 0)
  end
end

-- the script's value as plain tables (read with rawget, as Redis does, and while the hook
-- still runs): the host converts it without ever calling a script's metamethod
local MAX_DEPTH = host.max_reply_depth
local function plain(value, depth)
  if real_type(value) ~= 'table' then return value end
  if depth >= MAX_DEPTH then return {err = 'ERR reached lua stack limit'} end
  local err = rawget(value, 'err')
  if real_type(err) == 'string' then return {err = err} end
  local ok = rawget(value, 'ok')
  if real_type(ok) == 'string' then return {ok = ok} end
  local out, i = {}, 1
  while true do
    local item = rawget(value, i)
    if item == nil then return out end
    out[i] = plain(item, depth + 1)
    i = i + 1
  end
end

local function run(fn, nkeys, keys, argv, ...)
  if nkeys then  -- KEYS and ARGV given as the arguments after argv (a short list)
    local all = {...}
    keys, argv = {}, {}
    for i = 1, nkeys do keys[i] = all[i] end
    for i = nkeys + 1, #all do argv[i - nkeys] = all[i] end
  end
  G.KEYS, G.ARGV = keys, argv
  sethook(on_count, '', host.hook_instructions)
  local ok, result = xpcall(fn, on_error)
  if ok and real_type(result) == 'table' then
    ok, result = xpcall(function() return plain(result, 0) end, on_error)
  end
  sethook()
  G.KEYS, G.ARGV = nil, nil
  return ok, result
end

-- what pcall/xpcall give a script for a Python exception: Redis's {err=...} table
local function as_table(err)
  if real_type(err) ~= 'userdata' then return err end
  local text, from_call = describe(err)
  if from_call then return {err = text} end  -- pcall(redis.call, ...): Redis's error table
  return text  -- a library's error: its message, as Lua gives it
end
local function caught(ok, ...)
  if ok then return ok, ... end
  return false, as_table((...))
end
G.pcall = function(fn, ...) return caught(real_pcall(fn, ...)) end
G.xpcall = function(fn, handler)
  return xpcall(fn, function(err) return handler(as_table(err)) end)
end

local function install(name, library)
  G[name] = protect(library)
end

-- redis.pcall: the host answers (true, value) or (false, the error message); redis.call
-- is the host's raising function itself, a C function to Lua, so that a script's
-- `return redis.call(...)` keeps its frame (a Lua wrapper would be tail-called and the
-- error's line lost)
local call_host = host.call
local function pcall_(...)
  local ok, value = call_host(...)
  if ok then return value end
  return {err = value}
end

return {
  compile = function(text) return compile(text, '@user_script') end,
  run = run,
  install = install,
  pcall = pcall_,
  clear_hook = function() sethook() end,
}
"""

_REMOVED = (
    "dofile", "loadfile", "require", "module", "print", "getfenv", "setfenv", "newproxy",
    "os", "io", "debug", "package", "python",
)  # fmt: skip
"""Globals of the real state removed after the prelude (scripts never see the real globals;
this is the second wall)."""


def _deny_attributes(obj: object, name: str, is_setting: bool) -> str:
    raise AttributeError("access to Python attributes is not allowed from scripts")


class Sandbox:
    """The shared Lua state, its prelude's host functions, and the script environment."""

    def __init__(
        self,
        call: Callable[..., tuple[bool, Any]],
        call_raising: Callable[..., Any],
        describe: Callable[[Any], tuple[bytes, bool]],
        time_up: Callable[[], bytes | None],
        *,
        max_memory: int = DEFAULT_MAX_MEMORY,
    ) -> None:
        self.runtime = lua.LuaRuntime(
            encoding=None,
            unpack_returned_tuples=True,
            register_eval=False,
            register_builtins=False,
            attribute_filter=_deny_attributes,
            max_memory=max_memory,
        )
        host = self.runtime.table_from(
            {
                b"call": call, b"describe": describe, b"time_up": time_up,
                b"hook_instructions": HOOK_INSTRUCTIONS, b"max_reply_depth": MAX_REPLY_DEPTH,
            }
        )
        exports = self.runtime.execute(_PRELUDE, host)
        globals_ = self.runtime.globals()
        for name in _REMOVED:
            globals_[name.encode()] = None
        self._compile = exports[b"compile"]
        self._run = exports[b"run"]
        self._install = exports[b"install"]
        self._clear_hook = exports[b"clear_hook"]
        self.call = call_raising
        self.pcall = exports[b"pcall"]

    def compile(self, body: bytes) -> tuple[Any, str | None]:
        """The script's function, or None and Lua's compile error."""
        fn, error = self._compile(body)
        if fn is None:
            return None, (error or b"").decode("utf-8", "replace")
        return fn, None

    def run(self, fn: Any, keys: list[bytes], argv: list[bytes]) -> tuple[bool, Any]:
        """Call ``fn`` with KEYS and ARGV set: (True, its value) or (False, the error, a
        ``{err=, source=, line=}`` table or Lua's message when even that failed)."""
        if len(keys) + len(argv) <= MAX_PASSED_ARGUMENTS:
            ok, result = self._run(fn, len(keys), None, None, *keys, *argv)
        else:
            table_from = self.runtime.table_from
            ok, result = self._run(fn, None, table_from(keys), table_from(argv))
        return bool(ok), result

    def install(self, name: str, library: dict[bytes, Any]) -> None:
        """Add a read-only library table the scripts see as the global ``name``."""
        table = self.runtime.table_from(library)
        self._install(name.encode(), table)

    def table(self, items: list[Any] | dict[bytes, Any]) -> Any:
        """A new Lua table holding ``items`` (already Lua values)."""
        return self.runtime.table_from(items)

    def collect_garbage(self) -> None:
        """A full collection (after a script that failed for memory, before the next)."""
        self.runtime.execute("collectgarbage('collect')")

    def clear_hook(self) -> None:
        """Remove the count hook (a script stopped by it may leave it set: the hook can fire
        between the script's end and ``run``'s own removal)."""
        self._clear_hook()

    def memory_used(self) -> int:
        return int(self.runtime.get_memory_used() or 0)
