"""The pub/sub registry (``store._pubsub``) and the session's subscribe family, without sockets.

The registry: subscriptions both ways, counts as Redis's replies carry them, PUBLISH's receiver
count, delivery only at ``release`` and only to those still listening, ``discard`` after a
failed group, hostile sizes (10k channels, pathological patterns). The session: Redis 7's
RESP2 subscribed mode, its error wording, PING's array, RESET, HELLO, PUBSUB introspection.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest

from minidb.protocol._resp_replies import Frames, Push, RespEncoder
from minidb.server.resp._info import InfoSnapshot, ServerFacts
from minidb.server.resp._pubsub import MAX_CHANNEL_BYTES, message_frames
from minidb.server.resp._session import RespSession, SessionConfig
from minidb.server.resp._types import (
    OK,
    PONG,
    Action,
    ErrorReply,
    Forward,
    Reply,
    Result,
    Simple,
)
from minidb.store import Keyspace, OpJournal, Session, execute, execute_transaction
from minidb.store._pubsub import Message, PubSub, registry_for

PATHOLOGICAL_TIME_S = 2.0
"""What matching a pathological pattern against a long channel may take at most (Redis's
recursive matcher, unbounded, would take far longer: 2**stars)."""


class Sink:
    """A receiver that keeps what it is handed."""

    def __init__(self) -> None:
        self.got: list[tuple[bytes, bytes, bytes | None]] = []
        self.calls = 0

    def receive(self, messages: list[tuple[Message, bytes | None]]) -> None:
        self.calls += 1
        self.got += [(m.channel, m.data, pattern) for m, pattern in messages]

    def frames(self, messages: list[tuple[Message, bytes | None]]) -> bytes:
        return b"".join(b"[%s %s %r]" % (m.channel, m.data, pattern) for m, pattern in messages)


# -- the registry ------------------------------------------------------------------------------


def test_registry_subscribe_counts_and_duplicates() -> None:
    """A second subscription to the same channel changes nothing; counts add channels and
    patterns (shard channels apart), as Redis's clientSubscriptionsCount."""
    reg, a = PubSub(), Sink()
    assert reg.subscribe(a, b"c1") is True
    assert reg.subscribe(a, b"c1") is False
    assert reg.psubscribe(a, b"c*") is True
    assert reg.psubscribe(a, b"c*") is False
    assert reg.subscribe(a, b"s1", shard=True) is True
    assert (reg.count(a), reg.shard_count(a)) == (2, 1)
    assert reg.unsubscribe(a, b"nope") is False
    assert reg.unsubscribe(a, b"c1") is True
    assert reg.punsubscribe(a, b"c*") is True
    assert reg.subscribed(a)  # the shard channel is left
    assert reg.unsubscribe(a, b"s1", shard=True) is True
    assert not reg.subscribed(a)


def test_registry_drop_forgets_everything() -> None:
    """drop (RESET, disconnect) leaves no trace of the receiver: no channel, no pattern."""
    reg, a, b = PubSub(), Sink(), Sink()
    for name in (b"x", b"y"):
        reg.subscribe(a, name)
    reg.subscribe(b, b"x")
    reg.psubscribe(a, b"p*")
    reg.subscribe(a, b"s", shard=True)
    reg.drop(a)
    assert reg.active_channels(None) == [b"x"]
    assert reg.numpat == 0
    assert reg.channel_count(shard=True) == 0
    assert reg.publish(b"y", b"m") == 0
    assert reg.publish(b"x", b"m") == 1
    reg.drop(a)  # twice is harmless


def test_registry_publish_counts_every_delivery() -> None:
    """A receiver subscribed to the channel and to two matching patterns counts three, and gets
    three messages; numsub counts the channel's own subscribers only."""
    reg, a, b = PubSub(), Sink(), Sink()
    reg.subscribe(a, b"news.it")
    reg.psubscribe(a, b"news.*")
    reg.psubscribe(a, b"*.it")
    reg.psubscribe(b, b"news.*")
    assert reg.publish(b"news.it", b"hello") == 4
    assert reg.publish(b"sport", b"x") == 0
    assert reg.numsub(b"news.it") == 1
    assert reg.numpat == 2  # distinct patterns
    assert (a.got, b.got) == ([], [])  # nothing before release
    reg.release()
    assert sorted(a.got, key=str) == sorted(
        [(b"news.it", b"hello", None), (b"news.it", b"hello", b"news.*"),
         (b"news.it", b"hello", b"*.it")], key=str,
    )  # fmt: skip
    assert b.got == [(b"news.it", b"hello", b"news.*")]
    assert reg.outbox == []


def test_registry_release_groups_per_receiver_in_order() -> None:
    """One call per receiver per release, its messages in publish order."""
    reg, a = PubSub(), Sink()
    reg.subscribe(a, b"c")
    for i in range(5):
        reg.publish(b"c", b"%d" % i)
    reg.release()
    assert a.calls == 1
    assert [data for _, data, _ in a.got] == [b"0", b"1", b"2", b"3", b"4"]


def test_registry_release_skips_who_left_meanwhile() -> None:
    """A receiver that unsubscribed between PUBLISH and release gets nothing (a RESP2 client
    out of subscribed mode must not see a message)."""
    reg, a, b = PubSub(), Sink(), Sink()
    reg.subscribe(a, b"c")
    reg.psubscribe(b, b"*")
    assert reg.publish(b"c", b"m") == 2
    reg.unsubscribe(a, b"c")
    reg.punsubscribe(b, b"*")
    reg.release()
    assert (a.got, b.got) == ([], [])


def test_registry_discard_drops_the_group() -> None:
    """A group whose log write failed publishes nothing (its reads run again)."""
    reg, a = PubSub(), Sink()
    reg.subscribe(a, b"c")
    reg.publish(b"c", b"m")
    reg.discard()
    reg.release()
    assert a.got == []


def test_registry_after_reply_takes_the_publishers_messages_so_far() -> None:
    """``after_reply``: the publisher's messages of the group so far (others' before its own,
    in publish order, pattern ones too), taken out of what ``release`` delivers; the other
    receivers keep theirs."""
    reg, me, other = PubSub(), Sink(), Sink()
    reg.subscribe(me, b"c")
    reg.psubscribe(me, b"c*")
    reg.subscribe(other, b"c")
    reg.publish(b"c", b"earlier")  # another client's, in the same group
    reg.publish(b"x", b"nobody")
    assert reg.fresh
    assert reg.publish(b"c", b"mine") == 3
    assert reg.after_reply(me) == (
        b"[c earlier None][c earlier b'c*'][c mine None][c mine b'c*']"
    )
    assert not reg.fresh
    assert reg.after_reply(me) == b""  # nothing new since
    reg.publish(b"c", b"later")
    assert reg.after_reply(me) == b"[c later None][c later b'c*']"
    reg.release()
    assert me.got == []
    assert other.got == [(b"c", b"earlier", None), (b"c", b"mine", None), (b"c", b"later", None)]


def test_registry_after_reply_for_a_publisher_subscribed_to_nothing() -> None:
    """A publisher that listens to nothing takes nothing: the messages stay for ``release``."""
    reg, me, other = PubSub(), Sink(), Sink()
    reg.subscribe(other, b"c")
    reg.publish(b"c", b"m")
    assert reg.after_reply(me) == b""
    assert not reg.fresh
    reg.release()
    assert other.got == [(b"c", b"m", None)]


def test_registry_after_reply_skips_who_left_and_discard_forgets() -> None:
    """A subscription left between PUBLISH and ``after_reply`` delivers nothing (as at
    release); after ``discard`` nothing taken before counts (the group runs again)."""
    reg, me = PubSub(), Sink()
    reg.subscribe(me, b"c")
    reg.psubscribe(me, b"*")
    reg.publish(b"c", b"m")
    reg.unsubscribe(me, b"c")
    assert reg.after_reply(me) == b"[c m b'*']"
    reg.publish(b"c", b"n")
    reg.discard()
    assert not reg.fresh
    reg.publish(b"c", b"again")
    assert reg.after_reply(me) == b"[c again b'*']"
    reg.release()
    assert me.got == []


def test_registry_shard_channels_are_their_own_namespace() -> None:
    """SPUBLISH reaches shard subscribers only; patterns never see shard messages."""
    reg, a, b = PubSub(), Sink(), Sink()
    reg.subscribe(a, b"c", shard=True)
    reg.psubscribe(b, b"*")
    assert reg.publish(b"c", b"m", shard=True) == 1
    assert reg.publish(b"c", b"n") == 1  # the pattern; not the shard subscriber
    reg.release()
    assert a.got == [(b"c", b"m", None)]
    assert b.got == [(b"c", b"n", b"*")]
    assert reg.active_channels(None, shard=True) == [b"c"]
    assert reg.numsub(b"c", shard=True) == 1 and reg.numsub(b"c") == 0


def test_registry_active_channels_glob() -> None:
    reg, a = PubSub(), Sink()
    for name in (b"news.it", b"news.fr", b"sport"):
        reg.subscribe(a, name)
    assert reg.active_channels(b"news.*") == [b"news.it", b"news.fr"]
    assert reg.active_channels(b"[s]port") == [b"sport"]
    assert reg.active_channels(b"none") == []


def test_registry_ten_thousand_channels() -> None:
    """10k subscriptions of one receiver: counted, published to, and dropped whole."""
    reg, a = PubSub(), Sink()
    for i in range(10_000):
        reg.subscribe(a, b"ch:%d" % i)
    assert reg.count(a) == reg.channel_count() == 10_000
    assert reg.publish(b"ch:9999", b"m") == 1
    reg.drop(a)
    assert reg.channel_count() == 0 and not reg.subscribed(a)


def test_registry_pathological_patterns_are_linear() -> None:
    """Patterns that make a backtracking matcher explode (``a*a*a*...b`` against a long run of
    ``a``: 2**stars) are matched by the bounded glob, linear in the channel: ten of each kind
    with up to 200 stars against a 16 KiB channel stay fast, and match nothing."""
    reg, a = PubSub(), Sink()
    for stars in range(20, 201, 20):
        reg.psubscribe(a, b"a*" * stars + b"b")
        reg.psubscribe(a, b"*?" * stars + b"[b-c]")
    started = time.monotonic()
    assert reg.publish(b"a" * 16384, b"m") == 0
    assert time.monotonic() - started < PATHOLOGICAL_TIME_S


def test_engine_publish_counts_through_the_keyspace_registry() -> None:
    """PUBLISH is a command of the engine: it publishes in the keyspace's registry, also inside
    a transaction, and answers the number of receivers."""
    ks = Keyspace()
    reg, a = registry_for(ks), Sink()
    reg.subscribe(a, b"c")
    journal = OpJournal()
    assert execute(ks, Session(), [b"PUBLISH", b"c", b"m"], journal, 0) == 1
    assert execute(ks, Session(), [b"publish", b"other", b"m"], journal, 0) == 0
    assert execute(ks, Session(), [b"SPUBLISH", b"c", b"m"], journal, 0) == 0
    results = execute_transaction(
        ks, Session(), [[b"SET", b"k", b"v"], [b"PUBLISH", b"c", b"k"]], journal, 0
    )
    assert results == [OK, 1]
    assert not journal.records[-1:] or all(journal.records)  # PUBLISH logs nothing itself
    reg.release()
    assert a.got == [(b"c", b"m", None), (b"c", b"k", None)]
    assert registry_for(Keyspace()) is not reg


def test_message_frames_resp2_and_resp3() -> None:
    """message / pmessage / smessage frames: arrays in RESP2, push frames in RESP3."""
    msg = Message(b"ch", b"hi", [])
    assert message_frames([(msg, None)], 2) == b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"
    assert message_frames([(msg, None)], 3) == b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"
    assert message_frames([(msg, b"c*")], 3) == (
        b">4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n$2\r\nhi\r\n"
    )
    shard = Message(b"ch", b"hi", [], shard=True)
    assert message_frames([(shard, None)], 2).startswith(b"*3\r\n$8\r\nsmessage\r\n")
    both = message_frames([(msg, None), (msg, b"c*")], 2)
    assert both == message_frames([(msg, None)], 2) + message_frames([(msg, b"c*")], 2)


def test_push_and_frames_encoding() -> None:
    """Push is ``>`` in RESP3 and ``*`` in RESP2; Frames are replies back to back."""
    frames = Frames((Push([b"unsubscribe", None, 0]), Push([b"subscribe", b"a", 1])))
    assert RespEncoder(2).encode(frames) == (
        b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"
    )
    assert RespEncoder(3).encode(frames) == (
        b">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n>3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"
    )


# -- the session -------------------------------------------------------------------------------

FACTS = ServerFacts(
    minidb_version="0.9.0", tcp_port=6399, data_dir="/tmp", max_clients=16,
    idle_timeout_s=30.0, process_id=1,
)  # fmt: skip


@dataclass
class Env:
    snap: InfoSnapshot = field(default_factory=InfoSnapshot)

    def unix_time(self) -> float:
        return 1_700_000_000.0

    def snapshot(self) -> InfoSnapshot:
        return self.snap

    def sessions(self) -> Iterable[RespSession]:
        return ()


def sessions(n: int = 2) -> list[RespSession]:
    config = SessionConfig(facts=FACTS)
    return [RespSession(i + 1, config) for i in range(n)]


def act(s: RespSession, *words: bytes | str) -> Action:
    return s.handle([w.encode() if isinstance(w, str) else w for w in words], Env())


def answer(s: RespSession, *words: bytes | str) -> Result:
    action = act(s, *words)
    assert isinstance(action, Reply), action
    return action.result


def wire(s: RespSession, *words: bytes | str) -> bytes:
    action = act(s, *words)
    assert isinstance(action, Reply), action
    return RespEncoder(action.protocol).encode(action.result)


def test_session_subscribe_confirms_each_channel() -> None:
    (s,) = sessions(1)
    assert answer(s, "SUBSCRIBE", "a", "b", "a") == Frames(
        (Push([b"subscribe", b"a", 1]), Push([b"subscribe", b"b", 2]),
         Push([b"subscribe", b"a", 2]))
    )  # fmt: skip
    assert answer(s, "PSUBSCRIBE", "x*") == Frames((Push([b"psubscribe", b"x*", 3]),))
    assert s.subscriptions == (2, 1, 0)
    assert answer(s, "UNSUBSCRIBE") == Frames(
        (Push([b"unsubscribe", b"a", 2]), Push([b"unsubscribe", b"b", 1]))
    )
    assert answer(s, "PUNSUBSCRIBE") == Frames((Push([b"punsubscribe", b"x*", 0]),))
    assert s.restricted is False


def test_session_unsubscribe_with_nothing_subscribed() -> None:
    """One reply with a nil channel and the count, as Redis: RESP2 ``$-1``, RESP3 ``_``."""
    (s,) = sessions(1)
    assert wire(s, "UNSUBSCRIBE") == b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"
    assert wire(s, "PUNSUBSCRIBE") == b"*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n"
    assert wire(s, "SUNSUBSCRIBE") == b"*3\r\n$12\r\nsunsubscribe\r\n$-1\r\n:0\r\n"
    assert wire(s, "UNSUBSCRIBE", "never") == b"*3\r\n$11\r\nunsubscribe\r\n$5\r\nnever\r\n:0\r\n"


def test_session_resp2_subscribed_mode_refuses_other_commands() -> None:
    """Redis 7's wording, the full name of a subcommand; the data fast path is off too."""
    (s,) = sessions(1)
    act(s, "SUBSCRIBE", "a")
    assert s.restricted
    error = "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / " \
        "RESET are allowed in this context"
    assert answer(s, "GET", "k") == ErrorReply(error.format("get"))
    assert answer(s, "publish", "a", "m") == ErrorReply(error.format("publish"))
    assert answer(s, "CLIENT", "ID") == ErrorReply(error.format("client|id"))
    assert answer(s, "MULTI") == ErrorReply(error.format("multi"))
    assert s.plain_end([[b"GET", b"k"]], 0) == 0  # no run of plain commands either
    assert answer(s, "PING") == [b"pong", b""]
    assert answer(s, "PING", "hi") == [b"pong", b"hi"]
    assert isinstance(answer(s, "PSUBSCRIBE", "x"), Frames)
    act(s, "UNSUBSCRIBE")
    assert s.restricted  # the pattern is left
    act(s, "PUNSUBSCRIBE")
    assert not s.restricted
    assert isinstance(act(s, "GET", "k"), Forward)
    assert answer(s, "PING") == PONG


def test_session_resp3_subscribed_allows_everything() -> None:
    """RESP3 has no subscribed mode; HELLO 2 while subscribed brings it back, HELLO 3 lifts it."""
    (s,) = sessions(1)
    act(s, "HELLO", "3")
    assert wire(s, "SUBSCRIBE", "a") == b">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"
    assert isinstance(act(s, "GET", "k"), Forward)
    assert answer(s, "PING") == PONG
    act(s, "HELLO", "2")
    assert s.restricted
    assert isinstance(answer(s, "GET", "k"), ErrorReply)
    assert isinstance(answer(s, "HELLO", "3"), ErrorReply)  # HELLO is not allowed either
    act(s, "RESET")
    assert not s.restricted and s.subscriptions == (0, 0, 0)


def test_session_reset_clears_subscriptions() -> None:
    a, b = sessions(2)
    act(a, "SUBSCRIBE", "c")
    act(a, "PSUBSCRIBE", "c*")
    assert answer(a, "RESET") == Simple("RESET")
    assert not a.restricted
    assert answer(b, "PUBSUB", "NUMSUB", "c") == [b"c", 0]
    assert answer(b, "PUBSUB", "NUMPAT") == 0


def test_session_subscribe_family_refused_in_multi() -> None:
    """A decision (Redis queues it and its EXEC reply is malformed): refused, and the
    transaction is doomed like any rejected command."""
    (s,) = sessions(1)
    act(s, "MULTI")
    assert answer(s, "SUBSCRIBE", "a") == ErrorReply(
        "ERR Command not allowed inside a transaction"
    )
    assert answer(s, "EXEC") == ErrorReply(
        "EXECABORT Transaction discarded because of previous errors."
    )


def test_session_pubsub_introspection() -> None:
    a, b = sessions(2)
    act(a, "SUBSCRIBE", "news.it", "news.fr")
    act(b, "SUBSCRIBE", "news.it")
    act(b, "PSUBSCRIBE", "n*", "m*")
    act(b, "SSUBSCRIBE", "shard1")
    (c,) = sessions(1)
    c.pubsub = a.pubsub
    assert sorted(answer(c, "PUBSUB", "CHANNELS")) == [b"news.fr", b"news.it"]  # type: ignore[arg-type, type-var]
    assert answer(c, "PUBSUB", "CHANNELS", "*fr") == [b"news.fr"]
    assert answer(c, "PUBSUB", "NUMSUB", "news.it", "x") == [b"news.it", 2, b"x", 0]
    assert answer(c, "PUBSUB", "NUMSUB") == []
    assert answer(c, "PUBSUB", "NUMPAT") == 2
    assert answer(c, "PUBSUB", "SHARDCHANNELS") == [b"shard1"]
    assert answer(c, "PUBSUB", "SHARDNUMSUB", "shard1") == [b"shard1", 1]
    assert answer(c, "PUBSUB", "CHANNELS", "a", "b") == ErrorReply(
        "ERR unknown subcommand or wrong number of arguments for 'CHANNELS'. Try PUBSUB HELP."
    )
    assert answer(c, "PUBSUB", "NUMPAT", "x") == ErrorReply(
        "ERR wrong number of arguments for 'pubsub|numpat' command"
    )
    assert answer(c, "PUBSUB", "NOPE") == ErrorReply(
        "ERR unknown subcommand 'NOPE'. Try PUBSUB HELP."
    )
    assert isinstance(answer(c, "PUBSUB", "HELP"), list)


@pytest.mark.parametrize(
    ("words", "error"),
    [
        (("SUBSCRIBE",), "ERR wrong number of arguments for 'subscribe' command"),
        (("PSUBSCRIBE",), "ERR wrong number of arguments for 'psubscribe' command"),
        (("SSUBSCRIBE",), "ERR wrong number of arguments for 'ssubscribe' command"),
        (("PUBLISH", "c"), "ERR wrong number of arguments for 'publish' command"),
        (("PUBSUB",), "ERR wrong number of arguments for 'pubsub' command"),
    ],
)
def test_session_wrong_arity(words: tuple[str, ...], error: str) -> None:
    (s,) = sessions(1)
    assert answer(s, *words) == ErrorReply(error)


def test_session_names_over_the_limit_are_refused_whole() -> None:
    """A name past MAX_CHANNEL_BYTES: an error, and nothing of the command subscribed."""
    (s,) = sessions(1)
    huge = b"x" * (MAX_CHANNEL_BYTES + 1)
    for verb in ("SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE"):
        result = answer(s, verb, "ok", huge)
        assert isinstance(result, ErrorReply) and "too long" in result.message
    assert s.subscriptions == (0, 0, 0) and not s.restricted
    at_limit = b"y" * MAX_CHANNEL_BYTES
    assert answer(s, "SUBSCRIBE", at_limit) == Frames((Push([b"subscribe", at_limit, 1]),))


def test_session_subscriber_receives_after_release() -> None:
    """A session without a connection delivers to its own inbox (what the pure tests read)."""
    a, b = sessions(2)
    act(a, "SUBSCRIBE", "c")
    assert a.pubsub.publish(b"c", b"m") == 1
    a.pubsub.release()
    inbox = a.subscriber
    assert [(m.channel, m.data) for m, _ in inbox.received] == [(b"c", b"m")]  # type: ignore[attr-defined]
    assert b.subscriber is not inbox
