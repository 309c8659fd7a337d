"""Pub/sub: who listens to which channel or pattern, and the messages a group published.

``PubSub`` is the server-wide registry (one per keyspace, see ``registry_for``), pure: no
sockets, no RESP. Receivers are opaque hashable objects (a RESP connection) that
implement ``receive``; subscribing and unsubscribing is O(1) (dicts as ordered sets, both ways:
channel -> receivers and receiver -> its channels), and ``drop`` forgets a receiver whole
(RESET, a disconnect) in time linear in its own subscriptions.

Three namespaces, as in Redis 7: channels (SUBSCRIBE, PUBLISH), patterns (PSUBSCRIBE, matched
against PUBLISH's channel with Redis's glob, ``store._glob``: linear in the channel whatever
the pattern, so no pattern can make a PUBLISH explode), and shard channels (SSUBSCRIBE,
SPUBLISH: on one node simply a second set of channel names that patterns do not see).

Ordering and visibility. ``PUBLISH`` is a command of the store engine (``COMMANDS`` below), so
the owner runs it in order with the data commands, also inside ``EXEC``. It does not deliver:
it counts the receivers (Redis's reply), notes them with the message in ``outbox`` and the
owner calls ``release`` once the group's records are logged (and, under ``--fsync always``,
synced), right after the group's replies. A subscriber therefore never sees a message before
a write that came before the PUBLISH is applied and durable; a group that fails to log is
``discard``-ed (its reads, PUBLISH among them, are run again and publish again). At release a
receiver that unsubscribed meanwhile (the owner awaits a sync thread) is skipped, so a RESP2
client never gets a message after leaving subscribed mode; PUBLISH's count was right when it
ran.

A publisher's own messages. A RESP3 client subscribed to what it publishes gets the message
right after the reply of the request that published it (PUBLISH, SPUBLISH, EXEC, EVAL),
before the replies of its later requests: Redis 7.2's order (redis/redis#12326: a push the
running client causes waits for the command's reply, an EXEC's or a script's included; 7.0
wrote it before the reply, inside EXEC's array). ``publish`` raises ``fresh``; the owner then
calls ``after_reply`` with the connection whose request ran, which takes that connection's
messages of the group so far out of ``outbox`` (its own, and those published to it earlier
in the group, so a channel's messages keep their publish order) and gives their frames to
append to the reply. They still leave with the group's replies, after the log write and
sync, like every other message.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Protocol, cast

from minidb.store._args import Command, Session, command
from minidb.store._glob import compile_glob
from minidb.store._journal import OpJournal
from minidb.store._keyspace import Keyspace
from minidb.store._results import Result


class Receiver(Protocol):
    """A subscriber: what ``release`` hands its messages to."""

    def receive(self, messages: list[tuple[Message, bytes | None]]) -> None:
        """This group's messages for it, in publish order, each with the pattern it matched
        (None: subscribed to the channel itself)."""
        ...


class Publisher(Receiver, Protocol):
    """A receiver whose requests may publish (a RESP connection): it encodes its messages for
    ``after_reply``."""

    def frames(self, messages: list[tuple[Message, bytes | None]]) -> bytes:
        """``messages``' wire form, to follow one of its replies."""
        ...


class Message:
    """One PUBLISH (or SPUBLISH): its channel, payload and receivers as they were when it ran.

    ``wire`` is the delivering layer's cache (its encoded frames, per protocol and pattern),
    so a message to many subscribers is encoded once per protocol."""

    __slots__ = ("channel", "data", "receivers", "shard", "wire")

    def __init__(
        self,
        channel: bytes,
        data: bytes,
        receivers: list[tuple[Receiver, bytes | None]],
        shard: bool = False,
    ) -> None:
        self.channel = channel
        self.data = data
        self.receivers = receivers
        self.shard = shard
        self.wire: dict[object, bytes] = {}


class _Subscriptions:
    """One receiver's subscriptions, in the order made (dicts as ordered sets)."""

    __slots__ = ("channels", "patterns", "shard")

    def __init__(self) -> None:
        self.channels: dict[bytes, None] = {}
        self.patterns: dict[bytes, None] = {}
        self.shard: dict[bytes, None] = {}

    def __bool__(self) -> bool:
        return bool(self.channels or self.patterns or self.shard)


class PubSub:
    """The server's subscriptions and the current group's published messages."""

    def __init__(self) -> None:
        self._channels: dict[bytes, dict[Receiver, None]] = {}
        self._shard: dict[bytes, dict[Receiver, None]] = {}
        self._patterns: dict[bytes, dict[Receiver, None]] = {}
        self._matchers: dict[bytes, Callable[[bytes], bool]] = {}
        self._of: dict[Receiver, _Subscriptions] = {}
        self.outbox: list[Message] = []
        """Messages published in the group being applied, for ``release``."""
        self.fresh = False
        """A message was published since ``after_reply`` last ran (the owner's cue to call
        it once the request that published has its reply)."""
        self._taken: dict[Receiver, int] = {}
        """Per connection ``after_reply`` took messages for in this group: how far into
        ``outbox`` it looked (so each message is looked at once per such connection)."""
        self.published = 0
        """Messages published since start."""

    # -- subscriptions -----------------------------------------------------------------------

    def _mine(self, receiver: Receiver) -> _Subscriptions:
        subs = self._of.get(receiver)
        if subs is None:
            subs = self._of[receiver] = _Subscriptions()
        return subs

    def _forget_if_empty(self, receiver: Receiver, subs: _Subscriptions) -> None:
        if not subs:
            self._of.pop(receiver, None)

    def subscribe(self, receiver: Receiver, channel: bytes, *, shard: bool = False) -> bool:
        """Subscribe ``receiver`` to ``channel``; False if it already was."""
        subs = self._mine(receiver)
        own = subs.shard if shard else subs.channels
        if channel in own:
            return False
        own[channel] = None
        index = self._shard if shard else self._channels
        index.setdefault(channel, {})[receiver] = None
        return True

    def unsubscribe(self, receiver: Receiver, channel: bytes, *, shard: bool = False) -> bool:
        """Unsubscribe ``receiver`` from ``channel``; False if it was not subscribed."""
        subs = self._of.get(receiver)
        own = None if subs is None else subs.shard if shard else subs.channels
        if own is None or channel not in own:
            return False
        del own[channel]
        _remove(self._shard if shard else self._channels, channel, receiver)
        self._forget_if_empty(receiver, subs)  # type: ignore[arg-type]
        return True

    def psubscribe(self, receiver: Receiver, pattern: bytes) -> bool:
        """Subscribe ``receiver`` to the glob ``pattern``; False if it already was."""
        subs = self._mine(receiver)
        if pattern in subs.patterns:
            return False
        subs.patterns[pattern] = None
        listeners = self._patterns.get(pattern)
        if listeners is None:
            listeners = self._patterns[pattern] = {}
            self._matchers[pattern] = compile_glob(pattern)
        listeners[receiver] = None
        return True

    def punsubscribe(self, receiver: Receiver, pattern: bytes) -> bool:
        """Unsubscribe ``receiver`` from ``pattern``; False if it was not subscribed."""
        subs = self._of.get(receiver)
        if subs is None or pattern not in subs.patterns:
            return False
        del subs.patterns[pattern]
        if _remove(self._patterns, pattern, receiver):
            del self._matchers[pattern]
        self._forget_if_empty(receiver, subs)
        return True

    def channels_of(self, receiver: Receiver, *, shard: bool = False) -> list[bytes]:
        subs = self._of.get(receiver)
        if subs is None:
            return []
        return list(subs.shard if shard else subs.channels)

    def patterns_of(self, receiver: Receiver) -> list[bytes]:
        subs = self._of.get(receiver)
        return [] if subs is None else list(subs.patterns)

    def count(self, receiver: Receiver) -> int:
        """Channels and patterns ``receiver`` listens to (Redis's ``clientSubscriptionsCount``,
        the number subscribe and unsubscribe replies carry)."""
        subs = self._of.get(receiver)
        return 0 if subs is None else len(subs.channels) + len(subs.patterns)

    def shard_count(self, receiver: Receiver) -> int:
        subs = self._of.get(receiver)
        return 0 if subs is None else len(subs.shard)

    def subscribed(self, receiver: Receiver) -> bool:
        """Whether ``receiver`` has any subscription (Redis's ``CLIENT_PUBSUB`` flag)."""
        return receiver in self._of

    def drop(self, receiver: Receiver) -> None:
        """Forget every subscription of ``receiver`` (RESET, a closed connection)."""
        subs = self._of.pop(receiver, None)
        if subs is None:
            return
        for channel in subs.channels:
            _remove(self._channels, channel, receiver)
        for channel in subs.shard:
            _remove(self._shard, channel, receiver)
        for pattern in subs.patterns:
            if _remove(self._patterns, pattern, receiver):
                del self._matchers[pattern]

    # -- introspection (PUBSUB, INFO) ------------------------------------------------------

    def numsub(self, channel: bytes, *, shard: bool = False) -> int:
        """Receivers of ``channel`` itself (patterns not counted, as in Redis)."""
        return len((self._shard if shard else self._channels).get(channel, ()))

    @property
    def numpat(self) -> int:
        """Distinct patterns someone listens to (``PUBSUB NUMPAT``, ``pubsub_patterns``)."""
        return len(self._patterns)

    def channel_count(self, *, shard: bool = False) -> int:
        """Channels with at least one subscriber (``pubsub_channels``)."""
        return len(self._shard if shard else self._channels)

    def active_channels(self, pattern: bytes | None, *, shard: bool = False) -> list[bytes]:
        """Channels with at least one subscriber, matching ``pattern`` if given."""
        channels = self._shard if shard else self._channels
        if pattern is None:
            return list(channels)
        matches = compile_glob(pattern)
        return [channel for channel in channels if matches(channel)]

    # -- publishing --------------------------------------------------------------------------

    def publish(self, channel: bytes, data: bytes, *, shard: bool = False) -> int:
        """Note a message for ``release``; how many receive it (one per matching pattern too:
        a client subscribed to the channel and to two patterns matching it counts three)."""
        receivers: list[tuple[Receiver, bytes | None]] = [
            (receiver, None)
            for receiver in (self._shard if shard else self._channels).get(channel, ())
        ]
        if not shard:
            for pattern, matches in self._matchers.items():
                if matches(channel):
                    receivers.extend((receiver, pattern) for receiver in self._patterns[pattern])
        self.published += 1
        if receivers:
            self.outbox.append(Message(channel, data, receivers, shard))
            self.fresh = True
        return len(receivers)

    def after_reply(self, publisher: object) -> bytes:
        """What follows the reply of ``publisher``'s request that just published: the frames
        of the group's messages to it so far, in publish order, taken out of ``outbox``
        (see "A publisher's own messages"); b"" if it is subscribed to nothing."""
        self.fresh = False
        if publisher not in self._of:
            return b""
        me = cast(Publisher, publisher)
        outbox = self.outbox
        start = self._taken.get(me, 0)
        self._taken[me] = len(outbox)
        mine: list[tuple[Message, bytes | None]] = []
        for at in range(start, len(outbox)):
            message = outbox[at]
            others = [pair for pair in message.receivers if pair[0] is not me]
            if len(others) == len(message.receivers):
                continue
            mine += (
                (message, pattern)
                for receiver, pattern in message.receivers
                if receiver is me and self._listening(me, message, pattern)
            )
            message.receivers = others
        return me.frames(mine) if mine else b""

    def _listening(self, receiver: Receiver, message: Message, pattern: bytes | None) -> bool:
        """Whether ``receiver`` still listens where ``message`` reached it (``pattern``, or
        the channel itself)."""
        if pattern is not None:
            return receiver in self._patterns.get(pattern, ())
        index = self._shard if message.shard else self._channels
        return receiver in index.get(message.channel, ())

    def release(self) -> None:
        """Hand the group's messages to their receivers (the owner's call once the group is
        logged): each receiver gets its messages of the group in one call, in publish order,
        those it still listens for."""
        outbox, self.outbox = self.outbox, []
        self._taken.clear()
        self.fresh = False
        by_receiver: dict[Receiver, list[tuple[Message, bytes | None]]] = {}
        for message in outbox:
            # _listening's test, inline: this loop runs once per delivery
            index = self._shard if message.shard else self._channels
            for receiver, pattern in message.receivers:
                if pattern is None:
                    still = receiver in index.get(message.channel, ())
                else:
                    still = receiver in self._patterns.get(pattern, ())
                if still:
                    by_receiver.setdefault(receiver, []).append((message, pattern))
        for receiver, messages in by_receiver.items():
            receiver.receive(messages)

    def discard(self) -> None:
        """Forget the group's messages (its log write failed; see the module docstring)."""
        self.outbox.clear()
        self._taken.clear()
        self.fresh = False


def _remove(index: dict[bytes, dict[Receiver, None]], name: bytes, receiver: Receiver) -> bool:
    """Take ``receiver`` off ``index[name]``; True if nobody is left there (then removed)."""
    listeners = index.get(name)
    if listeners is None:
        return False
    listeners.pop(receiver, None)
    if listeners:
        return False
    del index[name]
    return True


_REGISTRIES: weakref.WeakKeyDictionary[Keyspace, PubSub] = weakref.WeakKeyDictionary()


def registry_for(ks: Keyspace) -> PubSub:
    """The pub/sub registry that goes with ``ks`` (made on first use): the owner releases its
    messages, the RESP sessions subscribe in it and the engine's PUBLISH publishes in it."""
    registry = _REGISTRIES.get(ks)
    if registry is None:
        registry = _REGISTRIES[ks] = PubSub()
    return registry


@command("publish", 3, "pubsub", "fast")
def publish(
    ks: Keyspace, session: Session, argv: list[bytes], journal: OpJournal, now: int
) -> Result:
    return registry_for(ks).publish(argv[1], argv[2])


@command("spublish", 3, "pubsub", "fast")
def spublish(
    ks: Keyspace, session: Session, argv: list[bytes], journal: OpJournal, now: int
) -> Result:
    return registry_for(ks).publish(argv[1], argv[2], shard=True)


COMMANDS: tuple[Command, ...] = (publish, spublish)
"""The engine's pub/sub commands: only the publishing ones; subscribing is connection state."""
