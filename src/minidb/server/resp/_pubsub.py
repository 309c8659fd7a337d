"""Pub/sub on the RESP connection: (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PUBSUB, and the frames.

Subscriptions are connection state: the session handles these commands itself, in the
server-wide registry (``store._pubsub.PubSub``) under its connection (``session.subscriber``),
and answers one frame per channel or pattern (``Frames`` of ``Push``: RESP3 ``>3`` push
frames, RESP2 arrays), each with the running count, as Redis's ``addReplyPubsub*`` do.
PUBLISH and SPUBLISH are the store engine's (the owner runs them in order with the data
commands; see ``store._pubsub`` for when messages are delivered); ``message_frames`` encodes
what a subscriber receives, once per message, protocol and pattern.

Where Redis is not followed: the subscribe family is refused inside MULTI (Redis queues it and
its EXEC reply then holds more frames than its array header says); a channel or pattern name
longer than ``MAX_CHANNEL_BYTES`` is refused, whole command, before anything is subscribed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from minidb.protocol._resp_replies import Frames, Push, RespEncoder
from minidb.server.resp._errors import MAX_ERROR_ECHO_BYTES, one_line
from minidb.server.resp._info import InfoSnapshot
from minidb.server.resp._types import ErrorReply, Result, Simple
from minidb.store import MAX_KEY_BYTES
from minidb.store._pubsub import Message, PubSub

if TYPE_CHECKING:
    from minidb.server.resp._session import RespSession, SessionEnv

MAX_CHANNEL_BYTES = MAX_KEY_BYTES
"""The longest channel or pattern name (the key limit): what one subscription can hold."""

SUBSCRIBE_FAMILY = frozenset(
    {"subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe"}
)
ALLOWED_WHEN_SUBSCRIBED = SUBSCRIBE_FAMILY | {"ping", "quit", "reset"}
"""What a RESP2 connection with subscriptions may run (Redis's ``processCommand``)."""
ACTS_ON_SUBSCRIPTIONS = frozenset(name.encode() for name in SUBSCRIBE_FAMILY | {"reset"})
"""Commands (lower case) that change what the owner's PUBLISH sees of this connection: its
subscriptions. The session runs them when the connection reads them, so the connection
decides one only once every owner request before it is answered (``RespRequests``): a
PUBLISH pipelined before a SUBSCRIBE then answers 0 and delivers nothing, as in Redis."""

NOT_IN_MULTI = ErrorReply("ERR Command not allowed inside a transaction")
_TOO_LONG = ErrorReply(f"ERR channel or pattern name too long: at most {MAX_CHANNEL_BYTES} bytes")

_HELP = (
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help.",
)
"""``PUBSUB HELP``, Redis 7's text line for line (``pubsubCommand``)."""

_ENCODERS = {2: RespEncoder(2), 3: RespEncoder(3)}
_MESSAGE = b"message"
_PMESSAGE = b"pmessage"
_SMESSAGE = b"smessage"


def subscribed_mode_error(name: str) -> ErrorReply:
    """Redis 7's refusal of another command on a subscribed RESP2 connection."""
    return ErrorReply(
        f"ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / "
        "RESET are allowed in this context"
    )


def _too_long(names: list[bytes]) -> bool:
    return any(len(name) > MAX_CHANNEL_BYTES for name in names)


def subscribe(session: RespSession, argv: list[bytes], env: SessionEnv) -> Result:
    """``SUBSCRIBE`` / ``SSUBSCRIBE channel...``: a confirmation per channel."""
    if _too_long(argv[1:]):
        return _TOO_LONG
    registry, me = session.pubsub, session.subscriber
    shard = argv[0].lower() == b"ssubscribe"
    kind = b"ssubscribe" if shard else b"subscribe"
    frames = []
    for channel in argv[1:]:
        registry.subscribe(me, channel, shard=shard)
        count = registry.shard_count(me) if shard else registry.count(me)
        frames.append(Push([kind, channel, count]))
    session.pubsub_changed()
    return Frames(frames)


def unsubscribe(session: RespSession, argv: list[bytes], env: SessionEnv) -> Result:
    """``UNSUBSCRIBE`` / ``SUNSUBSCRIBE [channel...]``: none named, every one; a confirmation
    per channel (a nil channel and the count when there was none to leave)."""
    registry, me = session.pubsub, session.subscriber
    shard = argv[0].lower() == b"sunsubscribe"
    kind = b"sunsubscribe" if shard else b"unsubscribe"
    channels = argv[1:] or registry.channels_of(me, shard=shard)
    frames = []
    for channel in channels:
        registry.unsubscribe(me, channel, shard=shard)
        count = registry.shard_count(me) if shard else registry.count(me)
        frames.append(Push([kind, channel, count]))
    if not frames:
        count = registry.shard_count(me) if shard else registry.count(me)
        frames.append(Push([kind, None, count]))
    session.pubsub_changed()
    return Frames(frames)


def psubscribe(session: RespSession, argv: list[bytes], env: SessionEnv) -> Result:
    """``PSUBSCRIBE pattern...``: a confirmation per pattern."""
    if _too_long(argv[1:]):
        return _TOO_LONG
    registry, me = session.pubsub, session.subscriber
    frames = []
    for pattern in argv[1:]:
        registry.psubscribe(me, pattern)
        frames.append(Push([b"psubscribe", pattern, registry.count(me)]))
    session.pubsub_changed()
    return Frames(frames)


def punsubscribe(session: RespSession, argv: list[bytes], env: SessionEnv) -> Result:
    """``PUNSUBSCRIBE [pattern...]``: none named, every one."""
    registry, me = session.pubsub, session.subscriber
    frames = []
    for pattern in argv[1:] or registry.patterns_of(me):
        registry.punsubscribe(me, pattern)
        frames.append(Push([b"punsubscribe", pattern, registry.count(me)]))
    if not frames:
        frames.append(Push([b"punsubscribe", None, registry.count(me)]))
    session.pubsub_changed()
    return Frames(frames)


def pubsub_command(session: RespSession, argv: list[bytes], env: SessionEnv) -> Result:
    """``PUBSUB CHANNELS|NUMSUB|NUMPAT|SHARDCHANNELS|SHARDNUMSUB|HELP``; the table has
    checked the subcommand and its arity."""
    registry = session.pubsub
    sub = argv[1].lower()
    if sub == b"help":
        return [Simple(line) for line in _HELP]
    if sub in (b"channels", b"shardchannels"):
        if len(argv) > 3:
            return _syntax(argv)
        pattern = argv[2] if len(argv) == 3 else None
        return list(registry.active_channels(pattern, shard=sub == b"shardchannels"))
    if sub in (b"numsub", b"shardnumsub"):
        shard = sub == b"shardnumsub"
        out: list[Result] = []
        for channel in argv[2:]:
            out += (channel, registry.numsub(channel, shard=shard))
        return out
    return registry.numpat  # numpat: the table allows nothing else


def _syntax(argv: list[bytes]) -> ErrorReply:
    """Redis's ``addReplySubcommandSyntaxError``."""
    sub = argv[1][:MAX_ERROR_ECHO_BYTES]
    return one_line(
        b"ERR unknown subcommand or wrong number of arguments for '" + sub
        + b"'. Try PUBSUB HELP."
    )


def with_pubsub_figures(snapshot: InfoSnapshot, registry: PubSub) -> InfoSnapshot:
    """``snapshot`` with INFO's ``pubsub_channels``, ``pubsub_patterns`` and
    ``pubsubshard_channels`` read from ``registry`` now."""
    return replace(
        snapshot,
        pubsub_channels=registry.channel_count(),
        pubsub_patterns=registry.numpat,
        pubsubshard_channels=registry.channel_count(shard=True),
    )


def message_frames(messages: list[tuple[Message, bytes | None]], protocol: int) -> bytes:
    """The wire form of a subscriber's messages: ``message``, ``pmessage`` (with the pattern)
    or ``smessage`` frames, push frames in RESP3 and arrays in RESP2. Each frame is encoded
    once per protocol and pattern and kept on the message for its other receivers."""
    encoder = _ENCODERS[protocol]
    parts = []
    for message, pattern in messages:
        key = (protocol, pattern)
        wire = message.wire.get(key)
        if wire is None:
            if pattern is not None:
                frame = Push([_PMESSAGE, pattern, message.channel, message.data])
            else:
                kind = _SMESSAGE if message.shard else _MESSAGE
                frame = Push([kind, message.channel, message.data])
            wire = message.wire[key] = encoder.encode(frame)
        parts.append(wire)
    return parts[0] if len(parts) == 1 else b"".join(parts)


__all__ = [
    "ACTS_ON_SUBSCRIPTIONS",
    "ALLOWED_WHEN_SUBSCRIBED",
    "MAX_CHANNEL_BYTES",
    "NOT_IN_MULTI",
    "SUBSCRIBE_FAMILY",
    "message_frames",
    "psubscribe",
    "pubsub_command",
    "punsubscribe",
    "subscribe",
    "subscribed_mode_error",
    "unsubscribe",
    "with_pubsub_figures",
]
