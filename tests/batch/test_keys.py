"""The storage key layout: every key kind builds, parses back, and refuses malformed input."""

from __future__ import annotations

import pytest

from minidb.batch._errors import InvalidTaskId
from minidb.batch._ids import invert
from minidb.batch._keys import (
    Marker,
    OutputKey,
    due_bound,
    idempotency_key,
    input_key,
    marker_key,
    new_nonce,
    output_key,
    output_prefix,
    parse_idempotency_key,
    parse_input_key,
    parse_marker_key,
    parse_output_key,
    parse_status_key,
    parse_user_index_key,
    status_key,
    user_index_key,
    user_prefix,
)

ID = "01KBCQCK20JZ7R9YTJGD1AH5T3"
NONCE = "0123456789abcdef"


def test_status_key_uses_the_inverted_id() -> None:
    """``tasks/<inv(id)>/status.json`` and back."""
    key = status_key(ID)
    assert key == f"tasks/{invert(ID)}/status.json"
    assert parse_status_key(key) == ID


def test_input_and_output_keys_round_trip() -> None:
    """Input and output keys use the plain id and parse back."""
    assert input_key(ID) == f"inputs/{ID}/input.csv"
    assert parse_input_key(input_key(ID)) == ID
    assert output_prefix(ID, 2) == f"outputs/{ID}/attempt-2/"
    key = output_key(ID, 2, "errors.csv")
    assert key == f"outputs/{ID}/attempt-2/errors.csv"
    assert parse_output_key(key) == OutputKey(ID, 2, "errors.csv")


def test_idempotency_key_hashes_the_client_key() -> None:
    """Any client key, even one with slashes and dots, becomes a fixed-shape hex name."""
    key = idempotency_key("alice", "../../x\x00y")
    user, digest = parse_idempotency_key(key)
    assert user == "alice" and len(digest) == 64
    assert idempotency_key("alice", "a") != idempotency_key("alice", "b")
    assert idempotency_key("alice", "a") != idempotency_key("bob", "a")


def test_user_index_lists_newest_first() -> None:
    """User index keys sort newest first and parse back to (user, id)."""
    older, newer = "01KBCQCK20JZ7R9YTJGD1AH5T3", "01KBCQCK21JZ7R9YTJGD1AH5T3"
    assert user_index_key("alice", newer) < user_index_key("alice", older)
    assert user_index_key("alice", ID).startswith(user_prefix("alice"))
    assert parse_user_index_key(user_index_key("alice", ID)) == ("alice", ID)


def test_marker_key_round_trip_and_order() -> None:
    """Markers sort by due time, carry the id and nonce, and due_bound splits due from not due."""
    key = marker_key(1_764_585_000_000, ID, NONCE)
    assert key == f"queue/1764585000000_{ID}_{NONCE}"
    assert parse_marker_key(key) == Marker(1_764_585_000_000, ID, NONCE)
    assert marker_key(999, ID, NONCE) < marker_key(1000, ID, NONCE)
    assert marker_key(1000, ID, NONCE) < due_bound(1000) <= marker_key(1001, ID, NONCE)


def test_each_enqueue_gets_a_key_of_its_own() -> None:
    """Fresh nonces make two enqueues of one task at one due time distinct keys."""
    assert len({marker_key(5, ID, new_nonce()) for _ in range(100)}) == 100


@pytest.mark.parametrize(
    "parse, key",
    [
        (parse_status_key, f"tasks/{ID}/status.json"),  # plain id where the inverted belongs
        (parse_status_key, f"tasks/{invert(ID)}/status.json/x"),
        (parse_status_key, f"tasks/{invert(ID)}/../status.json"),
        (parse_status_key, f"tasks/{invert(ID)}/other.json"),
        (parse_status_key, f"task/{invert(ID)}/status.json"),
        (parse_input_key, f"inputs/{ID}/input.csv.bak"),
        (parse_input_key, f"inputs/{ID.lower()}/input.csv"),
        (parse_output_key, f"outputs/{ID}/attempt-0/errors.csv"),
        (parse_output_key, f"outputs/{ID}/attempt-01/errors.csv"),
        (parse_output_key, f"outputs/{ID}/attempt-1/../x"),
        (parse_output_key, f"outputs/{ID}/attempt-1/.hidden"),
        (parse_output_key, f"outputs/{ID}/attempt-1/a/b"),
        (parse_idempotency_key, "idem/alice/abc"),
        (parse_idempotency_key, "idem/a.b/" + "0" * 64),
        (parse_user_index_key, f"users/alice/{ID}"),
        (parse_user_index_key, f"users/../{invert(ID)}"),
        (parse_marker_key, f"queue/123_{ID}_{NONCE}"),
        (parse_marker_key, f"queue/1764585000000_{ID}"),
        (parse_marker_key, f"queue/1764585000000_{ID}_{NONCE}_x"),
        (parse_marker_key, f"queue/1764585000000_{ID}_{NONCE.upper()}"),
        (parse_marker_key, f"queue/x/1764585000000_{ID}_{NONCE}"),
        (parse_marker_key, "queue/" + "1" * 10_000),
        (parse_marker_key, None),
    ],
)
def test_parsers_reject_malformed(parse: object, key: object) -> None:
    """Every parser refuses keys this module would not have built."""
    with pytest.raises(InvalidTaskId):
        parse(key)  # type: ignore[operator]


@pytest.mark.parametrize("user", ["", "..", "a/b", "a.b", "x" * 65, "é", "a\x00"])
def test_user_names_are_strict(user: str) -> None:
    """User names that could escape a key segment are refused."""
    with pytest.raises(InvalidTaskId):
        user_prefix(user)


def test_builders_reject_bad_parts() -> None:
    """Builders validate ids, attempts, file names, due times and nonces."""
    for call in [
        lambda: status_key("../x"),
        lambda: output_key(ID, 0, "a"),
        lambda: output_key(ID, 1001, "a"),
        lambda: output_key(ID, 1, "../a"),
        lambda: output_key(ID, 1, ".a"),
        lambda: marker_key(-1, ID, NONCE),
        lambda: marker_key(10**13, ID, NONCE),
        lambda: marker_key(5, ID, "xyz"),
    ]:
        with pytest.raises(InvalidTaskId):
            call()
