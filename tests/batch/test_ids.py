"""Task ids: ULID generation, the order-reversing inversion, strict validation from outside."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidb.batch._errors import InvalidTaskId
from minidb.batch._ids import (
    ALPHABET,
    TaskIdGenerator,
    id_time_ms,
    invert,
    parse_inverted_id,
    parse_task_id,
)

NOW_MS = 1_764_585_000_000
ids = st.text(alphabet=ALPHABET, min_size=26, max_size=26).filter(lambda s: s[0] <= "7")


def _seeded(seed: int) -> TaskIdGenerator:
    rng = random.Random(seed)
    return TaskIdGenerator(randomness=lambda _ms: rng.randbytes(10))


def test_generator_ids_are_valid_and_carry_the_time() -> None:
    """A generated id passes validation and encodes the millisecond it was made for."""
    task_id = _seeded(1).new(NOW_MS)
    assert parse_task_id(task_id) == task_id
    assert id_time_ms(task_id) == NOW_MS


def test_generator_is_monotonic_within_a_millisecond() -> None:
    """Ids made in the same millisecond still sort in creation order."""
    gen = _seeded(2)
    made = [gen.new(NOW_MS) for _ in range(1000)]
    assert made == sorted(made) and len(set(made)) == 1000


def test_generator_clock_stepped_back_never_sorts_before_older() -> None:
    """A time earlier than the previous one does not produce an id that sorts earlier."""
    gen = _seeded(3)
    first = gen.new(NOW_MS)
    assert gen.new(NOW_MS - 60_000) > first


@given(ids, ids)
def test_invert_reverses_order(a: str, b: str) -> None:
    """For ids of equal length, inversion reverses the order."""
    assert (a < b) == (invert(a) > invert(b))


@given(ids)
def test_invert_is_an_involution(a: str) -> None:
    """Inverting twice gives the id back, and the inverted form parses back to the id."""
    assert invert(invert(a)) == a
    assert parse_inverted_id(invert(a)) == a


def test_inverted_newest_first_over_time() -> None:
    """Ids made later list first once inverted (newest-first listing)."""
    gen = _seeded(4)
    made = [gen.new(NOW_MS + i * 7) for i in range(50)]
    assert sorted(made, key=invert) == made[::-1]


def test_invert_refuses_non_crockford() -> None:
    """Inversion is only defined on Crockford digits."""
    for bad in ["", "01I", "abc", "0/"]:
        with pytest.raises(InvalidTaskId):
            invert(bad)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "01KBCQCK20JZ7R9YTJGD1AH5T",  # 25 chars
        "01KBCQCK20JZ7R9YTJGD1AH5T33",  # 27 chars
        "01kbcqck20jz7r9ytjgd1ah5t3",  # lowercase is refused, not normalised
        "81KBCQCK20JZ7R9YTJGD1AH5T3",  # first digit above 7 overflows 128 bits
        "01KBCQCK20JZ7R9YTJGD1AH5TI",  # I, L, O, U are not Crockford digits
        "01KBCQCK20JZ7R9YTJGD1AH5TL",
        "01KBCQCK20JZ7R9YTJGD1AH5TO",
        "01KBCQCK20JZ7R9YTJGD1AH5TU",
        "../../../../etc/passwd0000",
        "01KBCQCK20JZ7R9YTJGD1AH5\x00A",
        "01KBCQCK20JZ7R9YTJGD1AH5/.",
        "01KBCQCK20JZ7R9YTJGD1AH5T3\n",
        "\uff101KBCQCK20JZ7R9YTJGD1AH5T3",  # a fullwidth digit is not ASCII
        "0" * 10_000_000,
    ],
)
def test_parse_task_id_rejects(bad: str) -> None:
    """Malformed, oversized, traversal and NUL-carrying ids are refused."""
    with pytest.raises(InvalidTaskId):
        parse_task_id(bad)


def test_parse_task_id_rejects_non_str() -> None:
    """Only a str can be a task id."""
    for bad in [None, 1, b"01KBCQCK20JZ7R9YTJGD1AH5T3"]:
        with pytest.raises(InvalidTaskId):
            parse_task_id(bad)


def test_parse_inverted_id_rejects_plain_ids() -> None:
    """A plain id is never mistaken for an inverted one (their first digits differ)."""
    task_id = _seeded(5).new(NOW_MS)
    with pytest.raises(InvalidTaskId):
        parse_inverted_id(task_id)
    with pytest.raises(InvalidTaskId):
        parse_task_id(invert(task_id))


def test_invalid_id_error_does_not_echo_everything() -> None:
    """The error quotes a cut copy of a huge id, not the whole of it."""
    with pytest.raises(InvalidTaskId) as info:
        parse_task_id("A" * 100_000)
    assert len(str(info.value)) < 200
