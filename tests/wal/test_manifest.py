"""The manifest's encoding: round trips and the consistency it insists on."""

from __future__ import annotations

import pytest

from minidb.wal._format import FileKind, Malformed, encode_end, encode_header, encode_record
from minidb.wal._manifest import Manifest, decode_manifest


@pytest.mark.parametrize("manifest", [Manifest(None, 0), Manifest(0x1F40, 0x1F40)])
def test_manifest_round_trips(manifest: Manifest) -> None:
    """A manifest decodes to what was encoded, with or without a snapshot."""
    assert decode_manifest(manifest.encode()) == manifest


def test_manifest_payload_is_readable_text() -> None:
    """The payload is two short lines a person can read in a hex dump."""
    assert b"snapshot none\nsegment 0000000000000000\n" in Manifest(None, 0).encode()


def _manifest_with(text: bytes) -> bytes:
    return encode_header(FileKind.MANIFEST, 0) + encode_record(0, text) + encode_end(1, 1)


def test_manifest_refuses_a_segment_that_skips_records() -> None:
    """Without a snapshot the log must start at 0; with one, exactly at the snapshot."""
    with pytest.raises(Malformed, match="does not follow"):
        decode_manifest(_manifest_with(b"snapshot none\nsegment 0000000000000005\n"))
    with pytest.raises(Malformed, match="does not follow"):
        decode_manifest(_manifest_with(b"snapshot 0000000000000004\nsegment 0000000000000005\n"))


def test_manifest_refuses_unreadable_text() -> None:
    """A manifest whose text does not parse is damage, reported at its record."""
    with pytest.raises(Malformed, match="unreadable") as info:
        decode_manifest(_manifest_with(b"snapshot\n"))
    assert info.value.offset == 20
