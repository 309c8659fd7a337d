"""The C scan's shared command names (``command_name`` in ``_cresp.c``): one object per
distinct name, bounded, and the same values as new objects would be."""

from __future__ import annotations

import subprocess
import sys

import pytest

from minidb.protocol import _resp

pytestmark = pytest.mark.accelerator  # tests/sanitizers/run.py runs these under ASan and UBSan


_NAMES_PROBE = r"""
from minidb.protocol import _resp, encode_command
scan_raw = _resp._scan_raw

def names(name, times=2):
    out = []
    scan_raw(encode_command([name, b"k"]) * times, 0, out, 100, 1024, 1024)
    assert all(argv == [name, b"k"] for argv in out), out
    return [argv[0] for argv in out]

get = names(b"GET")
assert get[0] is get[1] and names(b"GET")[0] is get[0]  # one object for the process
assert names(b"get")[0] is not get[0]  # as sent: another case is another name
long = names(b"X" * 25)
assert long[0] is not long[1]  # past 24 bytes: a new object each time
for odd in (b"G T", b"G\x00T", b"G\xffT"):
    got = names(odd)
    assert got[0] is not got[1], odd  # not printable ASCII: never kept
# A name that starts another kept name and lands in its slot (the C hash, copied here) is
# its own name: a lookup that matched on a prefix would hand back the longer one.
def slot(name):
    h = len(name)
    for c in name:
        h = (h * 31 + c) & (2**64 - 1)
    return h & 511
longer = next(b"PFX%d" % i for i in range(10**5) if slot(b"PFX%d" % i) == slot(b"PFX"))
kept_longer = names(longer)
assert kept_longer[0] is kept_longer[1]
short = names(b"PFX")
assert short[0] is short[1] and short[0] is not kept_longer[0], (short, kept_longer)
for k in range(300):  # made-up names: the first 256 distinct are kept, no more
    got = names(b"N%d" % k)
    kept = 4 + k < 256  # GET, get, the long and the short name came first
    assert (got[0] is got[1]) is kept, (k, got)
assert names(b"GET")[0] is get[0]  # still there
print("ok")
"""


@pytest.mark.skipif(_resp._scan_raw is None, reason="C accelerator not built")
def test_c_scan_raw_shares_command_names_up_to_its_bound() -> None:
    """A command's name is one object per distinct name (hash cached, identity matches in
    every dict downstream), for at most 256 names of printable ASCII up to 24 bytes; other
    names, and every argument after it, are new objects; the values are the same either way.
    In a new process: the kept names are the process's."""
    done = subprocess.run(
        [sys.executable, "-c", _NAMES_PROBE], capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
