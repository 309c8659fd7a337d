"""The Redis protocol's half of the server: a RESP connection (``_connection``), its session
state machine (``_session``, pure: the commands a connection answers itself), the executor the
data owner runs its data commands with (``_executor``), and the connection commands' tables
and texts (``_commands_meta``, ``_info``, ``_client``, ``_admin``, ``_errors``, ``_glob``,
``_types``, ``_env``). The shared connection machinery (flow control, batching to the owner,
ordered replies, timers) is ``server._connection``; the codec is ``minidb.protocol``."""
