"""What the container commands share: HSCAN/SSCAN (``scan_elements``) and random picks
(HRANDFIELD, SRANDMEMBER, SPOP), as Redis's ``scanGenericCommand`` and ``*RandomElement`` do.

Cursors. A container Redis keeps compact (listpack, intset) is small: a scan returns all of
it at once with cursor 0, whatever COUNT says, as Redis does. A large one (hashtable) pages on
a ``ScanIndex`` of its elements (the keyspace's SCAN cursor, ``_scanindex``): the cursor is a
position in hash order that inserts and deletes cannot shift, so an element present for the
whole scan is returned exactly once. The index is kept on the container (its ``scan`` slot)
and dropped by any change to which elements it holds; building one costs O(n log n), so a
large container scanned while it is written pays that per page written between.

Random picks use the same index on a large container (a pick is O(1) there), and a list of
the elements on a small one.
"""

from __future__ import annotations

import random

from minidb.store._args import int_arg
from minidb.store._encodings import HASHTABLE
from minidb.store._glob import compile_glob
from minidb.store._hashvalue import HashValue
from minidb.store._numbers import parse_uint
from minidb.store._results import INVALID_CURSOR, SYNTAX_ERROR, CommandError, Result
from minidb.store._scanindex import ScanIndex
from minidb.store._values import Container

DEFAULT_SCAN_COUNT = 10
"""Elements a step of a large container's scan returns when no COUNT is given (Redis's)."""
MAX_RANDOM_REPLY = 1 << 20
"""Elements a random pick with repetition (a negative count) may return: such a reply is built
whole before the output limit can refuse it, so its length is bounded here first."""
RANDOM_FROM_INDEX = 256
"""Containers larger than this are picked from through their ``ScanIndex``, not a list."""


LONG_MAX = (1 << 63) - 1
"""C's ``LONG_MAX`` on the 64-bit platforms Redis runs on."""


def random_count(text: bytes) -> int:
    """The count of HRANDFIELD / SRANDMEMBER: a long within -LONG_MAX..LONG_MAX (Redis's
    ``getRangeLongFromObjectOrReply``)."""
    count = int_arg(text)
    if not -LONG_MAX <= count <= LONG_MAX:
        raise CommandError(
            f"ERR value is out of range, must be between {-LONG_MAX} and {LONG_MAX}"
        )
    return count


def scan_cursor(text: bytes) -> int:
    """A SCAN cursor argument (Redis's ``parseScanCursorOrReply``)."""
    cursor = parse_uint(text)
    if cursor is None:
        raise CommandError(INVALID_CURSOR)
    return cursor


def scan_options(argv: list[bytes], start: int, *, hash_: bool) -> tuple[int, bytes | None, bool]:
    """(COUNT, MATCH pattern or None, NOVALUES) of HSCAN/SSCAN options from ``argv[start]``,
    checked in Redis's order and words."""
    count, pattern, no_values = DEFAULT_SCAN_COUNT, None, False
    i = start
    while i < len(argv):
        opt = argv[i].lower()
        more = len(argv) - i
        if opt == b"count" and more >= 2:
            count = int_arg(argv[i + 1])
            if count < 1:
                raise CommandError(SYNTAX_ERROR)
            i += 2
        elif opt == b"match" and more >= 2:
            pattern = None if argv[i + 1] == b"*" else argv[i + 1]
            i += 2
        elif opt == b"novalues":
            if not hash_:
                raise CommandError("ERR NOVALUES option can only be used in HSCAN")
            no_values = True
            i += 1
        else:
            raise CommandError(SYNTAX_ERROR)
    return count, pattern, no_values


def index_of(container: Container) -> ScanIndex:
    """The container's ``ScanIndex``, built now if it has none."""
    index = container.scan
    if index is None:
        index = container.scan = ScanIndex(container)
    return index


def scan_elements(
    container: Container, cursor: int, count: int, pattern: bytes | None, no_values: bool
) -> Result:
    """One step of HSCAN/SSCAN: [next cursor, elements] (a hash's fields with their values
    unless ``no_values``), MATCH applied to the fields or members."""
    if container.encoding == HASHTABLE:
        next_cursor, page = index_of(container).page(cursor, count)
    else:
        next_cursor, page = 0, list(container)
    if pattern is not None:
        matches = compile_glob(pattern)
        page = [element for element in page if matches(element)]
    if type(container) is HashValue and not no_values:
        values = container.mapping()  # decoded once, not per field, for a packed hash
        page = [x for field in page for x in (field, values[field])]
    return [b"%d" % next_cursor, list(page)]


def pick_distinct(container: Container, count: int, rng: random.Random) -> list[bytes]:
    """``count`` distinct elements at random (fewer than the container holds)."""
    if len(container) > RANDOM_FROM_INDEX:
        return rng.sample(index_of(container).keys, count)
    return rng.sample(list(container), count)


def pick_repeated(container: Container, count: int, rng: random.Random) -> list[bytes]:
    """``count`` elements at random, each drawn from the whole container (repeats allowed);
    refused past ``MAX_RANDOM_REPLY``."""
    if count > MAX_RANDOM_REPLY:
        raise CommandError(
            f"ERR reply too large: {count} random elements, limit {MAX_RANDOM_REPLY}"
        )
    pool = index_of(container).keys if len(container) > RANDOM_FROM_INDEX else list(container)
    return rng.choices(pool, k=count)
