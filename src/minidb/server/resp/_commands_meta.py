"""The command table of the RESP listener: every command it accepts, with Redis's metadata.

One ``CommandSpec`` per command (and per subcommand of the containers CLIENT, CONFIG and
COMMAND) says what the session needs to route and check a command (``arity``, ``local``:
answered by the session or forwarded to the data owner, ``no_auth``) and what ``COMMAND``,
``COMMAND INFO`` and ``COMMAND DOCS`` report (flags, key positions, ACL categories, group,
summary, since). The figures follow Redis 7.2's ``src/commands/*.json``.

``CommandTable`` is built once per server and shared by every session. The data commands are a
parameter: ``DEFAULT_DATA_COMMANDS`` lists the string and keyspace commands minidb's engine is
meant to run, and the server should pass the engine's own table instead
(``CommandTable(CONNECTION_COMMANDS + engine_specs)``), so that routing, arity errors and
``COMMAND`` all follow what the engine really executes.

Arity is Redis's convention: ``n > 0`` exactly ``n`` words (the command name included),
``n < 0`` at least ``-n``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from minidb.server.resp._types import Result, Simple

MAX_COMMAND_NAME_BYTES = 64
"""Longer names are never looked up (every real one is under 32 bytes)."""


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One command: ``name`` is Redis's lower-case full name, ``client|setname`` for subcommands."""

    name: str
    arity: int
    flags: tuple[str, ...] = ()
    first_key: int = 0
    last_key: int = 0
    key_step: int = 0
    categories: tuple[str, ...] = ()
    group: str = "generic"
    since: str = "1.0.0"
    summary: str = ""
    local: bool = False
    subcommands: tuple[CommandSpec, ...] = field(default=())

    @property
    def top(self) -> str:
        """The top-level command: ``client`` for ``client|setname``."""
        return self.name.partition("|")[0]

    @property
    def no_auth(self) -> bool:
        """Runs before authentication (AUTH, HELLO, QUIT, RESET)."""
        return "no_auth" in self.flags

    def arity_ok(self, argc: int) -> bool:
        return argc == self.arity if self.arity > 0 else argc >= -self.arity

    def acl_categories(self) -> list[Result]:
        """The explicit categories plus those Redis implies from the flags
        (``setImplicitACLCategories``)."""
        cats = list(self.categories)
        if "write" in self.flags:
            cats.append("write")
        if "readonly" in self.flags:
            cats.append("read")
        if "admin" in self.flags:
            cats += ["admin", "dangerous"]
        cats.append("fast" if "fast" in self.flags else "slow")
        return [Simple("@" + c) for c in dict.fromkeys(cats)]


def _spec(name: str, arity: int, flags: str, **kw: object) -> CommandSpec:
    return CommandSpec(name, arity, tuple(flags.split()), **kw)  # type: ignore[arg-type]


def _local(name: str, arity: int, flags: str, **kw: object) -> CommandSpec:
    return _spec(name, arity, flags, local=True, **kw)


_CONN = {"group": "connection", "categories": ("connection",)}
_CLIENT_FLAGS = "noscript loading stale sentinel"

CLIENT_SUBCOMMANDS = (
    _local("client|getname", 2, _CLIENT_FLAGS, since="2.6.9", **_CONN,
        summary="Returns the name of the connection."),
    _local("client|getredir", 2, _CLIENT_FLAGS, since="6.0.0", **_CONN,
        summary=(
            "Returns the client ID to which the connection's tracking notifications are "
            "redirected."
        )),
    _local("client|help", 2, "loading stale sentinel", since="5.0.0", **_CONN,
        summary="Returns helpful text about the different subcommands."),
    _local("client|id", 2, _CLIENT_FLAGS, since="5.0.0", **_CONN,
        summary="Returns the unique client ID of the connection."),
    _local("client|info", 2, _CLIENT_FLAGS, since="6.2.0", **_CONN,
        summary="Returns information about the connection."),
    _local("client|kill", -3, "admin " + _CLIENT_FLAGS, since="2.4.0", **_CONN,
        summary="Terminates open connections."),
    _local("client|list", -2, "admin " + _CLIENT_FLAGS, since="2.4.0", **_CONN,
        summary="Lists open connections."),
    _local("client|no-evict", 3, "admin " + _CLIENT_FLAGS, since="7.0.0", **_CONN,
        summary="Sets the client eviction mode of the connection."),
    _local("client|no-touch", 3, "noscript loading stale", since="7.2.0", **_CONN,
        summary=(
            "Controls whether commands sent by the client affect the LRU/LFU of accessed "
            "keys."
        )),
    _local("client|reply", 3, _CLIENT_FLAGS, since="3.2.0", **_CONN,
        summary="Instructs the server whether to reply to commands."),
    _local("client|setinfo", 4, _CLIENT_FLAGS, since="7.2.0", **_CONN,
        summary="Sets information specific to the client or connection."),
    _local("client|setname", 3, _CLIENT_FLAGS, since="2.6.9", **_CONN,
        summary="Sets the connection name."),
    _local("client|tracking", -3, _CLIENT_FLAGS, since="6.0.0", **_CONN,
        summary="Controls server-assisted client-side caching for the connection."),
    _local("client|trackinginfo", 2, _CLIENT_FLAGS, since="6.2.0", **_CONN,
        summary=(
            "Returns information about server-assisted client-side caching for the "
            "connection."
        )),
    _local("client|unblock", -3, "admin " + _CLIENT_FLAGS, since="5.0.0", **_CONN,
        summary="Unblocks a client blocked by a blocking command from a different connection."),
)  # fmt: skip

_SERVER = {"group": "server"}
CONFIG_SUBCOMMANDS = (
    _local("config|get", -3, "admin noscript loading stale", since="2.0.0", **_SERVER,
        summary="Returns the effective values of configuration parameters."),
    _local("config|help", 2, "loading stale", since="5.0.0", **_SERVER,
        summary="Returns helpful text about the different subcommands."),
    _local("config|resetstat", 2, "admin noscript loading stale", since="2.0.0", **_SERVER,
        summary="Resets the server's statistics."),
    _local("config|rewrite", 2, "admin noscript loading stale", since="2.8.0", **_SERVER,
        summary="Persists the effective configuration to file."),
    _local("config|set", -4, "admin noscript loading stale", since="2.0.0", **_SERVER,
        summary="Sets configuration parameters in-flight."),
)  # fmt: skip

_CMD = {"group": "server", "categories": ("connection",)}
COMMAND_SUBCOMMANDS = (
    _local("command|count", 2, "loading stale sentinel", since="2.8.13", **_CMD,
        summary="Returns a count of commands."),
    _local("command|docs", -2, "loading stale sentinel", since="7.0.0", **_CMD,
        summary="Returns documentary information about one, multiple or all commands."),
    _local("command|help", 2, "loading stale sentinel", since="5.0.0", **_CMD,
        summary="Returns helpful text about the different subcommands."),
    _local("command|info", -2, "loading stale sentinel", since="2.8.13", **_CMD,
        summary="Returns information about one, multiple or all commands."),
    _local("command|list", -2, "loading stale sentinel", since="7.0.0", **_CMD,
        summary="Returns a list of command names."),
)  # fmt: skip

_K1 = {"first_key": 1, "last_key": 1, "key_step": 1}
_KN = {"first_key": 1, "last_key": -1, "key_step": 1}
_AUTHLESS = "noscript loading stale fast no_auth sentinel allow_busy"
_TX = {"group": "transactions", "categories": ("transaction",)}
CONNECTION_COMMANDS: tuple[CommandSpec, ...] = (
    _local("auth", -2, _AUTHLESS, since="1.0.0", summary="Authenticates the connection.", **_CONN),
    _local("client", -2, "sentinel", since="2.4.0", group="connection",
        subcommands=CLIENT_SUBCOMMANDS,
        summary="A container for client connection commands."),
    _local("command", -1, "loading stale sentinel", since="2.8.13", **_CMD,
        subcommands=COMMAND_SUBCOMMANDS,
        summary="Returns detailed information about all commands."),
    _local("config", -2, "", since="2.0.0", subcommands=CONFIG_SUBCOMMANDS, **_SERVER,
        summary="A container for server configuration commands."),
    _local("discard", 1, "noscript loading stale fast allow_busy", since="2.0.0", **_TX,
        summary="Discards a transaction."),
    _local("echo", 2, "loading stale fast", since="1.0.0", **_CONN,
        summary="Returns the given string."),
    _local("exec", 1, "noscript loading stale skip_slowlog", since="1.2.0", **_TX,
        summary="Executes all commands in a transaction."),
    _local("hello", -1, _AUTHLESS, since="6.0.0", **_CONN,
        summary="Handshakes with the Redis server."),
    _local("info", -1, "loading stale sentinel", since="1.0.0", **_SERVER,
        categories=("dangerous",),
        summary="Returns information and statistics about the server."),
    _local("multi", 1, "noscript loading stale fast allow_busy", since="1.2.0", **_TX,
        summary="Starts a transaction."),
    _local("ping", -1, "fast sentinel", since="1.0.0", **_CONN,
        summary="Returns the server's liveliness response."),
    _local("quit", -1, "allow_busy noscript loading stale fast no_auth", since="1.0.0", **_CONN,
        summary="Closes the connection."),
    _local("reset", 1, "noscript loading stale fast no_auth allow_busy", since="6.2.0", **_CONN,
        summary="Resets the connection."),
    _local("select", 2, "loading stale fast", since="2.0.0", **_CONN,
        summary="Changes the selected database."),
    _local("time", 1, "loading stale fast", since="2.6.0", **_SERVER,
        summary="Returns the server time."),
    _local("unwatch", 1, "noscript loading stale fast allow_busy", since="2.2.0",
        **_TX,
        summary="Forgets about watched keys of a transaction."),
    _local("watch", -2, "noscript loading stale fast allow_busy", since="2.2.0", **_KN, **_TX,
        summary="Monitors changes to keys to determine the execution of a transaction."),
)  # fmt: skip

_STR = {"group": "string", "categories": ("string",)}
_KEYS = {"group": "generic", "categories": ("keyspace",)}
_K2 = {"first_key": 2, "last_key": 2, "key_step": 1}
OBJECT_SUBCOMMANDS = (
    _spec("object|encoding", 3, "readonly", since="2.2.3", **_K2, **_KEYS,
        summary="Returns the internal encoding of a Redis object."),
    _spec("object|freq", 3, "readonly", since="4.0.0", **_K2, **_KEYS,
        summary="Returns the logarithmic access frequency counter of a Redis object."),
    _spec("object|help", 2, "loading stale", since="6.2.0", **_KEYS,
        summary="Returns helpful text about the different subcommands."),
    _spec("object|idletime", 3, "readonly", since="2.2.3", **_K2, **_KEYS,
        summary="Returns the time since the last access to a Redis object."),
    _spec("object|refcount", 3, "readonly", since="2.2.3", **_K2, **_KEYS,
        summary="Returns the reference count of a value of a key."),
)  # fmt: skip
DEFAULT_DATA_COMMANDS: tuple[CommandSpec, ...] = (
    _spec("append", 3, "write denyoom fast", since="2.0.0", **_K1, **_STR,
        summary="Appends a string to the value of a key. Creates the key if it doesn't exist."),
    _spec("dbsize", 1, "readonly fast", group="server", categories=("keyspace",),
        summary="Returns the number of keys in the database."),
    _spec("decr", 2, "write denyoom fast", **_K1, **_STR,
        summary=(
            "Decrements the integer value of a key by one. Uses 0 as initial value if the"
            " key doesn't exist."
        )),
    _spec("decrby", 3, "write denyoom fast", **_K1, **_STR,
        summary=(
            "Decrements a number from the integer value of a key. Uses 0 as initial value"
            " if the key doesn't exist."
        )),
    _spec("del", -2, "write", summary="Deletes one or more keys.", **_KN, **_KEYS),
    _spec("exists", -2, "readonly fast", **_KN, **_KEYS,
        summary="Determines whether one or more keys exist."),
    _spec("expire", -3, "write fast", **_K1, **_KEYS,
        summary="Sets the expiration time of a key in seconds."),
    _spec("expireat", -3, "write fast", since="1.2.0", **_K1, **_KEYS,
        summary="Sets the expiration time of a key to a Unix timestamp."),
    _spec("flushdb", -1, "write", group="server", categories=("keyspace", "dangerous"),
        summary="Remove all keys from the current database."),
    _spec("get", 2, "readonly fast", summary="Returns the string value of a key.", **_K1, **_STR),
    _spec("getdel", 2, "write fast", since="6.2.0", **_K1, **_STR,
        summary="Returns the string value of a key after deleting the key."),
    _spec("getset", 3, "write denyoom fast", **_K1, **_STR,
        summary="Returns the previous string value of a key after setting it to a new value."),
    _spec("incr", 2, "write denyoom fast", **_K1, **_STR,
        summary=(
            "Increments the integer value of a key by one. Uses 0 as initial value if the"
            " key doesn't exist."
        )),
    _spec("incrby", 3, "write denyoom fast", **_K1, **_STR,
        summary=(
            "Increments the integer value of a key by a number. Uses 0 as initial value "
            "if the key doesn't exist."
        )),
    _spec("keys", 2, "readonly", categories=("keyspace", "dangerous"),
        summary="Returns all key names that match a pattern."),
    _spec("mget", -2, "readonly fast", **_KN, **_STR,
        summary="Atomically returns the string values of one or more keys."),
    _spec("mset", -3, "write denyoom", since="1.0.1", first_key=1, last_key=-1, key_step=2, **_STR,
        summary="Atomically creates or modifies the string values of one or more keys."),
    _spec("persist", 2, "write fast", since="2.2.0", **_K1, **_KEYS,
        summary="Removes the expiration time of a key."),
    _spec("pexpire", -3, "write fast", since="2.6.0", **_K1, **_KEYS,
        summary="Sets the expiration time of a key in milliseconds."),
    _spec("pexpireat", -3, "write fast", since="2.6.0", **_K1, **_KEYS,
        summary="Sets the expiration time of a key to a Unix milliseconds timestamp."),
    _spec("psetex", 4, "write denyoom", since="2.6.0", **_K1, **_STR,
        summary=(
            "Sets both string value and expiration time in milliseconds of a key. The key"
            " is created if it doesn't exist."
        )),
    _spec("pttl", 2, "readonly fast", since="2.6.0", **_K1, **_KEYS,
        summary="Returns the expiration time in milliseconds of a key."),
    _spec("scan", -2, "readonly", since="2.8.0", **_KEYS,
        summary="Iterates over the key names in the database."),
    _spec("set", -3, "write denyoom", **_K1, **_STR,
        summary=(
            "Sets the string value of a key, ignoring its type. The key is created if it "
            "doesn't exist."
        )),
    _spec("setex", 4, "write denyoom", since="2.0.0", **_K1, **_STR,
        summary=(
            "Sets the string value and expiration time of a key. Creates the key if it "
            "doesn't exist."
        )),
    _spec("setnx", 3, "write denyoom fast", **_K1, **_STR,
        summary="Set the string value of a key only when the key doesn't exist."),
    _spec("strlen", 2, "readonly fast", since="2.2.0", **_K1, **_STR,
        summary="Returns the length of a string value."),
    _spec("touch", -2, "readonly fast", since="3.2.1", **_KN, **_KEYS,
        summary="Returns the number of existing keys out of those specified after updating the"
                " time they were last accessed."),
    _spec("ttl", 2, "readonly fast", **_K1, **_KEYS,
        summary="Returns the expiration time in seconds of a key."),
    _spec("type", 2, "readonly fast", **_K1, **_KEYS,
        summary="Determines the type of value stored at a key."),
    _spec("unlink", -2, "write fast", since="4.0.0", **_KN, **_KEYS,
        summary="Asynchronously deletes one or more keys."),
    _spec("copy", -3, "write denyoom", since="6.2.0", first_key=1, last_key=2, key_step=1,
        **_KEYS, summary="Copies the value of a key to a new key."),
    _spec("object", -2, "", since="2.2.3", group="generic", subcommands=OBJECT_SUBCOMMANDS,
        summary="A container for object introspection commands."),
    _spec("expiretime", 2, "readonly fast", since="7.0.0", **_K1, **_KEYS,
        summary="Returns the expiration time of a key as a Unix timestamp."),
    _spec("flushall", -1, "write", group="server", categories=("keyspace", "dangerous"),
        summary="Removes all keys from all databases."),
    _spec("getex", -2, "write fast", since="6.2.0", **_K1, **_STR,
        summary="Returns the string value of a key after setting its expiration time."),
    _spec("getrange", 4, "readonly", since="2.4.0", **_K1, **_STR,
        summary="Returns a substring of the string stored at a key."),
    _spec("incrbyfloat", 3, "write denyoom fast", since="2.6.0", **_K1, **_STR,
        summary=(
            "Increment the floating point value of a key by a number. Uses 0 as initial "
            "value if the key doesn't exist."
        )),
    _spec("msetnx", -3, "write denyoom", since="1.0.1", first_key=1, last_key=-1, key_step=2,
        **_STR, summary=(
            "Atomically modifies the string values of one or more keys only when all keys "
            "don't exist."
        )),
    _spec("pexpiretime", 2, "readonly fast", since="7.0.0", **_K1, **_KEYS,
        summary="Returns the expiration time of a key as a Unix milliseconds timestamp."),
    _spec("randomkey", 1, "readonly", **_KEYS,
        summary="Returns a random key name from the database."),
    _spec("rename", 3, "write", first_key=1, last_key=2, key_step=1, **_KEYS,
        summary="Renames a key and overwrites the destination."),
    _spec("renamenx", 3, "write fast", first_key=1, last_key=2, key_step=1, **_KEYS,
        summary="Renames a key only when the target key name doesn't exist."),
    _spec("setrange", 4, "write denyoom", since="2.2.0", **_K1, **_STR,
        summary=(
            "Overwrites a part of a string value with another by an offset. Creates the "
            "key if it doesn't exist."
        )),
)  # fmt: skip
"""What the data engine is meant to run; the server passes the engine's table instead."""

_HASH = {"group": "hash", "categories": ("hash",), "since": "2.0.0", **_K1}
HASH_COMMANDS: tuple[CommandSpec, ...] = (
    _spec("hdel", -3, "write fast", **_HASH,
        summary=(
            "Deletes one or more fields and their values from a hash. Deletes the hash if no "
            "fields remain."
        )),
    _spec("hexists", 3, "readonly fast", **_HASH,
        summary="Determines whether a field exists in a hash."),
    _spec("hget", 3, "readonly fast", **_HASH, summary="Returns the value of a field in a hash."),
    _spec("hgetall", 2, "readonly", **_HASH, summary="Returns all fields and values in a hash."),
    _spec("hincrby", 4, "write denyoom fast", **_HASH,
        summary=(
            "Increments the integer value of a field in a hash by a number. Uses 0 as initial "
            "value if the field doesn't exist."
        )),
    _spec("hincrbyfloat", 4, "write denyoom fast", **{**_HASH, "since": "2.6.0"},
        summary=(
            "Increments the floating point value of a field by a number. Uses 0 as initial "
            "value if the field doesn't exist."
        )),
    _spec("hkeys", 2, "readonly", **_HASH, summary="Returns all fields in a hash."),
    _spec("hlen", 2, "readonly fast", **_HASH, summary="Returns the number of fields in a hash."),
    _spec("hmget", -3, "readonly fast", **_HASH,
        summary="Returns the values of all fields in a hash."),
    _spec("hmset", -4, "write denyoom fast", **_HASH,
        summary="Sets the values of multiple fields."),
    _spec("hrandfield", -2, "readonly", **{**_HASH, "since": "6.2.0"},
        summary="Returns one or more random fields from a hash."),
    _spec("hscan", -3, "readonly", **{**_HASH, "since": "2.8.0"},
        summary="Iterates over fields and values of a hash."),
    _spec("hset", -4, "write denyoom fast", **_HASH,
        summary="Creates or modifies the value of a field in a hash."),
    _spec("hsetnx", 4, "write denyoom fast", **_HASH,
        summary="Sets the value of a field in a hash only when the field doesn't exist."),
    _spec("hstrlen", 3, "readonly fast", **{**_HASH, "since": "3.2.0"},
        summary="Returns the length of the value of a field."),
    _spec("hvals", 2, "readonly", **_HASH, summary="Returns all values in a hash."),
)  # fmt: skip
"""The hash commands (``store._hashes``), with Redis 7.2's metadata."""

_SET = {"group": "set", "categories": ("set",)}
_SETS_STORE = {"first_key": 1, "last_key": -1, "key_step": 1}
SET_COMMANDS: tuple[CommandSpec, ...] = (
    _spec("sadd", -3, "write denyoom fast", **_K1, **_SET,
        summary="Adds one or more members to a set. Creates the key if it doesn't exist."),
    _spec("scard", 2, "readonly fast", **_K1, **_SET,
        summary="Returns the number of members in a set."),
    _spec("sdiff", -2, "readonly", **_KN, **_SET,
        summary="Returns the difference of multiple sets."),
    _spec("sdiffstore", -3, "write denyoom", **_SETS_STORE, **_SET,
        summary="Stores the difference of multiple sets in a key."),
    _spec("sinter", -2, "readonly", **_KN, **_SET,
        summary="Returns the intersect of multiple sets."),
    _spec("sintercard", -3, "readonly movablekeys", since="7.0.0", **_SET,
        summary="Returns the number of members of the intersect of multiple sets."),
    _spec("sinterstore", -3, "write denyoom", **_SETS_STORE, **_SET,
        summary="Stores the intersect of multiple sets in a key."),
    _spec("sismember", 3, "readonly fast", **_K1, **_SET,
        summary="Determines whether a member belongs to a set."),
    _spec("smembers", 2, "readonly", **_K1, **_SET, summary="Returns all members of a set."),
    _spec("smismember", -3, "readonly fast", since="6.2.0", **_K1, **_SET,
        summary="Determines whether multiple members belong to a set."),
    _spec("smove", 4, "write fast", first_key=1, last_key=2, key_step=1, **_SET,
        summary="Moves a member from one set to another."),
    _spec("spop", -2, "write fast", **_K1, **_SET,
        summary=(
            "Returns one or more random members from a set after removing them. Deletes the "
            "set if the last member was popped."
        )),
    _spec("srandmember", -2, "readonly", **_K1, **_SET,
        summary="Get one or multiple random members from a set"),
    _spec("srem", -3, "write fast", **_K1, **_SET,
        summary=(
            "Removes one or more members from a set. Deletes the set if the last member was "
            "removed."
        )),
    _spec("sscan", -3, "readonly", since="2.8.0", **_K1, **_SET,
        summary="Iterates over members of a set."),
    _spec("sunion", -2, "readonly", **_KN, **_SET, summary="Returns the union of multiple sets."),
    _spec("sunionstore", -3, "write denyoom", **_SETS_STORE, **_SET,
        summary="Stores the union of multiple sets in a key."),
)  # fmt: skip
"""The set commands (``store._sets``), with Redis 7.2's metadata."""

_LIST = {"group": "list", "categories": ("list",)}
_LIST_MOVE = {"first_key": 1, "last_key": 2, "key_step": 1}
LIST_COMMANDS: tuple[CommandSpec, ...] = (
    _spec("lindex", 3, "readonly", **_K1, **_LIST,
        summary="Returns an element from a list by its index."),
    _spec("linsert", 5, "write denyoom", since="2.2.0", **_K1, **_LIST,
        summary="Inserts an element before or after another element in a list."),
    _spec("llen", 2, "readonly fast", **_K1, **_LIST, summary="Returns the length of a list."),
    _spec("lmove", 5, "write denyoom", since="6.2.0", **_LIST_MOVE, **_LIST,
        summary=(
            "Returns an element after popping it from one list and pushing it to another. "
            "Deletes the list if the last element was moved."
        )),
    _spec("lmpop", -4, "write movablekeys", since="7.0.0", **_LIST,
        summary=(
            "Returns multiple elements from a list after removing them. Deletes the list if "
            "the last element was popped."
        )),
    _spec("lpop", -2, "write fast", **_K1, **_LIST,
        summary=(
            "Returns the first elements in a list after removing it. Deletes the list if the "
            "last element was popped."
        )),
    _spec("lpos", -3, "readonly", since="6.0.6", **_K1, **_LIST,
        summary="Returns the index of matching elements in a list."),
    _spec("lpush", -3, "write denyoom fast", **_K1, **_LIST,
        summary="Prepends one or more elements to a list. Creates the key if it doesn't exist."),
    _spec("lpushx", -3, "write denyoom fast", since="2.2.0", **_K1, **_LIST,
        summary="Prepends one or more elements to a list only when the list exists."),
    _spec("lrange", 4, "readonly", **_K1, **_LIST,
        summary="Returns a range of elements from a list."),
    _spec("lrem", 4, "write", **_K1, **_LIST,
        summary=(
            "Removes elements from a list. Deletes the list if the last element was removed."
        )),
    _spec("lset", 4, "write denyoom", **_K1, **_LIST,
        summary="Sets the value of an element in a list by its index."),
    _spec("ltrim", 4, "write", **_K1, **_LIST,
        summary=(
            "Removes elements from both ends a list. Deletes the list if all elements were "
            "trimmed."
        )),
    _spec("rpop", -2, "write fast", **_K1, **_LIST,
        summary=(
            "Returns and removes the last elements of a list. Deletes the list if the last "
            "element was popped."
        )),
    _spec("rpoplpush", 3, "write denyoom", since="1.2.0", **_LIST_MOVE, **_LIST,
        summary=(
            "Returns the last element of a list after removing and pushing it to another "
            "list. Deletes the list if the last element was popped."
        )),
    _spec("rpush", -3, "write denyoom fast", **_K1, **_LIST,
        summary="Appends one or more elements to a list. Creates the key if it doesn't exist."),
    _spec("rpushx", -3, "write denyoom fast", since="2.2.0", **_K1, **_LIST,
        summary="Appends an element to a list only when the list exists."),
)  # fmt: skip
"""The list commands (``store._lists``; not the blocking ones), with Redis 7.2's metadata."""

_ZSET = {"group": "sorted_set", "categories": ("sortedset",)}
_ZSET_STORE = {"first_key": 1, "last_key": 2, "key_step": 1}
ZSET_COMMANDS: tuple[CommandSpec, ...] = (
    _spec("zadd", -4, "write denyoom fast", since="1.2.0", **_K1, **_ZSET,
        summary=(
            "Adds one or more members to a sorted set, or updates their scores. Creates the "
            "key if it doesn't exist."
        )),
    _spec("zcard", 2, "readonly fast", since="1.2.0", **_K1, **_ZSET,
        summary="Returns the number of members in a sorted set."),
    _spec("zdiff", -3, "readonly movablekeys", since="6.2.0", **_ZSET,
        summary="Returns the difference between multiple sorted sets."),
    _spec("zdiffstore", -4, "write denyoom movablekeys", since="6.2.0", **_K1, **_ZSET,
        summary="Stores the difference of multiple sorted sets in a key."),
    _spec("zinter", -3, "readonly movablekeys", since="6.2.0", **_ZSET,
        summary="Returns the intersect of multiple sorted sets."),
    _spec("zinterstore", -4, "write denyoom movablekeys", since="2.0.0", **_K1, **_ZSET,
        summary="Stores the intersect of multiple sorted sets in a key."),
    _spec("zintercard", -3, "readonly movablekeys", since="7.0.0", **_ZSET,
        summary="Returns the number of members of the intersect of multiple sorted sets."),
    _spec("zmpop", -4, "write movablekeys", since="7.0.0", **_ZSET,
        summary=(
            "Returns the highest- or lowest-scoring members from one or more sorted sets "
            "after removing them. Deletes the sorted set if the last member was popped."
        )),
    _spec("zrandmember", -2, "readonly", since="6.2.0", **_K1, **_ZSET,
        summary="Returns one or more random members from a sorted set."),
    _spec("zscan", -3, "readonly", since="2.8.0", **_K1, **_ZSET,
        summary="Iterates over members and scores of a sorted set."),
    _spec("zunion", -3, "readonly movablekeys", since="6.2.0", **_ZSET,
        summary="Returns the union of multiple sorted sets."),
    _spec("zunionstore", -4, "write denyoom movablekeys", since="2.0.0", **_K1, **_ZSET,
        summary="Stores the union of multiple sorted sets in a key."),
    _spec("zcount", 4, "readonly fast", since="2.0.0", **_K1, **_ZSET,
        summary="Returns the count of members in a sorted set that have scores within a range."),
    _spec("zincrby", 4, "write denyoom fast", since="1.2.0", **_K1, **_ZSET,
        summary="Increments the score of a member in a sorted set."),
    _spec("zlexcount", 4, "readonly fast", since="2.8.9", **_K1, **_ZSET,
        summary="Returns the number of members in a sorted set within a lexicographical range."),
    _spec("zmscore", -3, "readonly fast", since="6.2.0", **_K1, **_ZSET,
        summary="Returns the score of one or more members in a sorted set."),
    _spec("zpopmax", -2, "write fast", since="5.0.0", **_K1, **_ZSET,
        summary=(
            "Returns the highest-scoring members from a sorted set after removing them. "
            "Deletes the sorted set if the last member was popped."
        )),
    _spec("zpopmin", -2, "write fast", since="5.0.0", **_K1, **_ZSET,
        summary=(
            "Returns the lowest-scoring members from a sorted set after removing them. "
            "Deletes the sorted set if the last member was popped."
        )),
    _spec("zrange", -4, "readonly", since="1.2.0", **_K1, **_ZSET,
        summary="Returns members in a sorted set within a range of indexes."),
    _spec("zrangebylex", -4, "readonly", since="2.8.9", **_K1, **_ZSET,
        summary="Returns members in a sorted set within a lexicographical range."),
    _spec("zrangebyscore", -4, "readonly", since="1.0.5", **_K1, **_ZSET,
        summary="Returns members in a sorted set within a range of scores."),
    _spec("zrangestore", -5, "write denyoom", since="6.2.0", **_ZSET_STORE, **_ZSET,
        summary="Stores a range of members from sorted set in a key."),
    _spec("zrank", -3, "readonly fast", since="2.0.0", **_K1, **_ZSET,
        summary="Returns the index of a member in a sorted set ordered by ascending scores."),
    _spec("zrem", -3, "write fast", since="1.2.0", **_K1, **_ZSET,
        summary=(
            "Removes one or more members from a sorted set. Deletes the sorted set if all "
            "members were removed."
        )),
    _spec("zremrangebylex", 4, "write", since="2.8.9", **_K1, **_ZSET,
        summary=(
            "Removes members in a sorted set within a lexicographical range. Deletes the "
            "sorted set if all members were removed."
        )),
    _spec("zremrangebyrank", 4, "write", since="2.0.0", **_K1, **_ZSET,
        summary=(
            "Removes members in a sorted set within a range of indexes. Deletes the sorted "
            "set if all members were removed."
        )),
    _spec("zremrangebyscore", 4, "write", since="1.2.0", **_K1, **_ZSET,
        summary=(
            "Removes members in a sorted set within a range of scores. Deletes the sorted "
            "set if all members were removed."
        )),
    _spec("zrevrange", -4, "readonly", since="1.2.0", **_K1, **_ZSET,
        summary="Returns members in a sorted set within a range of indexes in reverse order."),
    _spec("zrevrangebylex", -4, "readonly", since="2.8.9", **_K1, **_ZSET,
        summary=(
            "Returns members in a sorted set within a lexicographical range in reverse order."
        )),
    _spec("zrevrangebyscore", -4, "readonly", since="2.2.0", **_K1, **_ZSET,
        summary="Returns members in a sorted set within a range of scores in reverse order."),
    _spec("zrevrank", -3, "readonly fast", since="2.0.0", **_K1, **_ZSET,
        summary="Returns the index of a member in a sorted set ordered by descending scores."),
    _spec("zscore", 3, "readonly fast", since="1.2.0", **_K1, **_ZSET,
        summary="Returns the score of a member in a sorted set."),
)  # fmt: skip
"""The sorted-set commands (``store._zsets``), with Redis 7.2's metadata."""

_STREAM = {"group": "stream", "categories": ("stream",)}
STREAM_COMMANDS: tuple[CommandSpec, ...] = (
    _spec("xadd", -5, "write denyoom fast", since="5.0.0", **_K1, **_STREAM,
        summary="Appends a new message to a stream. Creates the key if it doesn't exist."),
    _spec("xdel", -3, "write fast", since="5.0.0", **_K1, **_STREAM,
        summary="Returns the number of messages after removing them from a stream."),
    _spec("xlen", 2, "readonly fast", since="5.0.0", **_K1, **_STREAM,
        summary="Return the number of messages in a stream."),
    _spec("xrange", -4, "readonly", since="5.0.0", **_K1, **_STREAM,
        summary="Returns the messages from a stream within a range of IDs."),
    _spec("xread", -4, "readonly blocking movablekeys", since="5.0.0", **_STREAM,
        summary=(
            "Returns messages from multiple streams with IDs greater than the ones "
            "requested. Blocks until a message is available otherwise."
        )),
    _spec("xrevrange", -4, "readonly", since="5.0.0", **_K1, **_STREAM,
        summary="Returns the messages from a stream within a range of IDs in reverse order."),
    _spec("xtrim", -4, "write", since="5.0.0", **_K1, **_STREAM,
        summary="Deletes messages from the beginning of a stream."),
)  # fmt: skip
"""The stream commands (``store._streams``, no consumer groups), with Redis 7.2's metadata."""

_PS = {"group": "pubsub", "categories": ("pubsub",)}
_PS_LISTEN = "pubsub noscript loading stale"
PUBSUB_SUBCOMMANDS = (
    _local("pubsub|channels", -2, "pubsub loading stale", since="2.8.0", **_PS,
        summary="Returns the active channels."),
    _local("pubsub|help", 2, "loading stale", since="6.2.0", group="pubsub",
        summary="Returns helpful text about the different subcommands."),
    _local("pubsub|numpat", 2, "pubsub loading stale", since="2.8.0", **_PS,
        summary="Returns a count of unique pattern subscriptions."),
    _local("pubsub|numsub", -2, "pubsub loading stale", since="2.8.0", **_PS,
        summary="Returns a count of subscribers to channels."),
    _local("pubsub|shardchannels", -2, "pubsub loading stale", since="7.0.0", **_PS,
        summary="Returns the active shard channels."),
    _local("pubsub|shardnumsub", -2, "pubsub loading stale", since="7.0.0", **_PS,
        summary="Returns the count of subscribers of shard channels."),
)  # fmt: skip
PUBSUB_COMMANDS: tuple[CommandSpec, ...] = (
    _local("psubscribe", -2, _PS_LISTEN + " sentinel", since="2.0.0", **_PS,
        summary="Listens for messages published to channels that match one or more patterns."),
    _spec("publish", 3, "pubsub loading stale fast may_replicate sentinel", since="2.0.0",
        **_PS, summary="Posts a message to a channel."),
    _local("pubsub", -2, "", since="2.8.0", group="pubsub", subcommands=PUBSUB_SUBCOMMANDS,
        summary="A container for Pub/Sub commands."),
    _local("punsubscribe", -1, _PS_LISTEN + " sentinel", since="2.0.0", **_PS,
        summary=(
            "Stops listening to messages published to channels that match one or more "
            "patterns."
        )),
    _spec("spublish", 3, "pubsub loading stale fast may_replicate", since="7.0.0", **_K1,
        **_PS, summary="Post a message to a shard channel"),
    _local("ssubscribe", -2, _PS_LISTEN, since="7.0.0", **_KN, **_PS,
        summary="Listens for messages published to shard channels."),
    _local("subscribe", -2, _PS_LISTEN + " sentinel", since="2.0.0", **_PS,
        summary="Listens for messages published to channels."),
    _local("sunsubscribe", -1, _PS_LISTEN, since="7.0.0", **_KN, **_PS,
        summary="Stops listening to messages posted to shard channels."),
    _local("unsubscribe", -1, _PS_LISTEN + " sentinel", since="2.0.0", **_PS,
        summary="Stops listening to messages posted to channels."),
)  # fmt: skip
"""Pub/sub (``server.resp._pubsub``; PUBLISH and SPUBLISH are ``store._pubsub``'s), with
Redis 7.2's metadata."""


_BLOCKING_LIST = {"group": "list", "categories": ("list", "blocking")}
_BLOCKING_ZSET = {"group": "sorted_set", "categories": ("sortedset", "blocking")}
_KEYS_BUT_LAST = {"first_key": 1, "last_key": -2, "key_step": 1}
BLOCKING_COMMANDS: tuple[CommandSpec, ...] = (
    _spec("blmove", 6, "write denyoom blocking", since="6.2.0", **_LIST_MOVE, **_BLOCKING_LIST,
        summary=(
            "Pops an element from a list, pushes it to another list and returns it. Blocks "
            "until an element is available otherwise. Deletes the list if the last element "
            "was moved."
        )),
    _spec("blmpop", -5, "write blocking movablekeys", since="7.0.0", **_BLOCKING_LIST,
        summary=(
            "Pops the first element from one of multiple lists. Blocks until an element is "
            "available otherwise. Deletes the list if the last element was popped."
        )),
    _spec("blpop", -3, "write blocking", since="2.0.0", **_KEYS_BUT_LAST, **_BLOCKING_LIST,
        summary=(
            "Removes and returns the first element in a list. Blocks until an element is "
            "available otherwise. Deletes the list if the last element was popped."
        )),
    _spec("brpop", -3, "write blocking", since="2.0.0", **_KEYS_BUT_LAST, **_BLOCKING_LIST,
        summary=(
            "Removes and returns the last element in a list. Blocks until an element is "
            "available otherwise. Deletes the list if the last element was popped."
        )),
    _spec("brpoplpush", 4, "write denyoom blocking", since="2.2.0", **_LIST_MOVE,
        **_BLOCKING_LIST,
        summary=(
            "Pops an element from a list, pushes it to another list and returns it. Block "
            "until an element is available otherwise. Deletes the list if the last element "
            "was popped."
        )),
    _spec("bzpopmax", -3, "write blocking fast", since="5.0.0", **_KEYS_BUT_LAST,
        **_BLOCKING_ZSET,
        summary=(
            "Removes and returns the member with the highest score from one or more sorted "
            "sets. Blocks until a member available otherwise.  Deletes the sorted set if the "
            "last element was popped."
        )),
    _spec("bzmpop", -5, "write blocking movablekeys", since="7.0.0", **_BLOCKING_ZSET,
        summary=(
            "Removes and returns a member by score from one or more sorted sets. Blocks until "
            "a member is available otherwise. Deletes the sorted set if the last element was "
            "popped."
        )),
    _spec("bzpopmin", -3, "write blocking fast", since="5.0.0", **_KEYS_BUT_LAST,
        **_BLOCKING_ZSET,
        summary=(
            "Removes and returns the member with the lowest score from one or more sorted "
            "sets. Blocks until a member is available otherwise. Deletes the sorted set if "
            "the last element was popped."
        )),
)  # fmt: skip
"""The blocking list and sorted-set commands (``store._blocking``), Redis 7.2's metadata."""


_SCRIPTING = {"group": "scripting", "categories": ("scripting",)}
# EVAL and EVALSHA say "write" (Redis says may_replicate only): here they are writes to the
# owner, refused whole on a replica or a failed log (see docs/commands.md, "Scripting").
_EVAL_FLAGS = "write noscript skip_monitor may_replicate no_mandatory_keys stale movablekeys"
_EVAL_RO_FLAGS = "noscript skip_monitor no_mandatory_keys stale readonly movablekeys"
SCRIPT_SUBCOMMANDS = (
    _spec("script|exists", -3, "noscript", since="2.6.0", **_SCRIPTING,
        summary="Determines whether server-side Lua scripts exist in the script cache."),
    _spec("script|flush", -2, "noscript", since="2.6.0", **_SCRIPTING,
        summary="Removes all server-side Lua scripts from the script cache."),
    _spec("script|help", 2, "loading stale", since="5.0.0", **_SCRIPTING,
        summary="Returns helpful text about the different subcommands."),
    _spec("script|kill", 2, "noscript allow_busy", since="2.6.0", **_SCRIPTING,
        summary="Terminates a server-side Lua script during execution."),
    _spec("script|load", 3, "noscript stale", since="2.6.0", **_SCRIPTING,
        summary="Loads a server-side Lua script to the script cache."),
)  # fmt: skip
SCRIPTING_COMMANDS: tuple[CommandSpec, ...] = (
    _spec("eval", -3, _EVAL_FLAGS, since="2.6.0", **_SCRIPTING,
        summary="Executes a server-side Lua script."),
    _spec("eval_ro", -3, _EVAL_RO_FLAGS, since="7.0.0", **_SCRIPTING,
        summary="Executes a read-only server-side Lua script."),
    _spec("evalsha", -3, _EVAL_FLAGS, since="2.6.0", **_SCRIPTING,
        summary="Executes a server-side Lua script by SHA1 digest."),
    _spec("evalsha_ro", -3, _EVAL_RO_FLAGS, since="7.0.0", **_SCRIPTING,
        summary="Executes a read-only server-side Lua script by SHA1 digest."),
    _spec("script", -2, "", since="2.6.0", group="scripting", subcommands=SCRIPT_SUBCOMMANDS,
        summary="A container for Lua scripts management commands."),
)  # fmt: skip
"""Lua scripting (``store.scripting``), with Redis 7.2's metadata."""


class CommandTable:
    """Name -> spec, case-insensitive, containers resolved by their first argument."""

    def __init__(self, specs: Iterable[CommandSpec]) -> None:
        self._top: dict[bytes, CommandSpec] = {}
        self._all: dict[bytes, CommandSpec] = {}
        for spec in specs:
            key = spec.name.encode()
            if key in self._top:
                raise ValueError(f"command {spec.name!r} is listed twice")
            self._top[key] = spec
            self._all[key] = spec
            for sub in spec.subcommands:
                self._all[sub.name.encode()] = sub
        self.plain_data: dict[bytes, CommandSpec] = {}
        """Data commands without subcommands by their lower- and upper-case names exactly:
        the session's lookup for how clients spell them, without folding the case."""
        for key, spec in self._top.items():
            if not spec.local and not spec.subcommands:
                self.plain_data[key] = self.plain_data[key.upper()] = spec

    @classmethod
    def default(
        cls,
        data: Sequence[CommandSpec] = (
            DEFAULT_DATA_COMMANDS + HASH_COMMANDS + SET_COMMANDS + LIST_COMMANDS
            + ZSET_COMMANDS + PUBSUB_COMMANDS + BLOCKING_COMMANDS + STREAM_COMMANDS
            + SCRIPTING_COMMANDS
        ),
    ) -> CommandTable:
        return cls(CONNECTION_COMMANDS + tuple(data))

    def __len__(self) -> int:
        """Top-level commands (``COMMAND COUNT``)."""
        return len(self._top)

    def __iter__(self) -> Iterator[CommandSpec]:
        return iter(self._top.values())

    def top(self, name: bytes) -> CommandSpec | None:
        """The top-level command called ``name``, any case."""
        if len(name) > MAX_COMMAND_NAME_BYTES:
            return None
        return self._top.get(name.lower())

    def by_fullname(self, name: bytes) -> CommandSpec | None:
        """A command or subcommand by full name (``get``, ``client|setname``), any case."""
        if len(name) > MAX_COMMAND_NAME_BYTES:
            return None
        return self._all.get(name.lower())

    def lookup(self, argv: Sequence[bytes]) -> CommandSpec | None:
        """The spec that runs ``argv``, as Redis's ``lookupCommand``: a container with an
        argument resolves to its subcommand (``None`` if there is no such subcommand)."""
        spec = self.top(argv[0])
        if spec is None or not spec.subcommands or len(argv) < 2:
            return spec
        if len(argv[1]) > MAX_COMMAND_NAME_BYTES:
            return None
        return self._all.get(spec.name.encode() + b"|" + argv[1].lower())


# -- COMMAND replies -----------------------------------------------------------------------


def _key_specs(spec: CommandSpec) -> list[Result]:
    if spec.first_key <= 0:
        return []
    lastkey = spec.last_key - spec.first_key if spec.last_key >= 0 else spec.last_key
    flags: list[Result] = [Simple("RW" if "write" in spec.flags else "RO")]
    return [
        {
            b"flags": flags,
            b"begin_search": {b"type": b"index", b"spec": {b"index": spec.first_key}},
            b"find_keys": {
                b"type": b"range",
                b"spec": {b"lastkey": lastkey, b"keystep": spec.key_step, b"limit": 0},
            },
        }
    ]


def command_info(spec: CommandSpec | None) -> Result:
    """One entry of ``COMMAND`` / ``COMMAND INFO``: Redis's ten-element array, or null."""
    if spec is None:
        return None
    return [
        spec.name.encode(),
        spec.arity,
        [Simple(f) for f in spec.flags],
        spec.first_key,
        spec.last_key,
        spec.key_step,
        spec.acl_categories(),
        [],
        _key_specs(spec),
        [command_info(sub) for sub in spec.subcommands],
    ]


def command_docs(spec: CommandSpec) -> dict[Result, Result]:
    """One value of ``COMMAND DOCS``: summary, since, group, subcommands (all bulk strings,
    which redis-cli asserts when it builds its help from this reply)."""
    docs: dict[Result, Result] = {}
    if spec.summary:
        docs[b"summary"] = spec.summary.encode()
    docs[b"since"] = spec.since.encode()
    docs[b"group"] = spec.group.encode()
    if spec.subcommands:
        docs[b"subcommands"] = {sub.name.encode(): command_docs(sub) for sub in spec.subcommands}
    return docs


def help_lines(container: CommandSpec) -> list[Result]:
    """``<CONTAINER> HELP``: Redis's layout, listing the subcommands we serve."""
    name = container.name.upper()
    lines: list[Result] = [
        Simple(f"{name} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
    ]
    for sub in container.subcommands:
        word = sub.name.split("|", 1)[1].upper()
        if word != "HELP":
            lines += [Simple(word), Simple("    " + sub.summary)]
    return [*lines, Simple("HELP"), Simple("    Print this help.")]
