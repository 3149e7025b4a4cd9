"""The record decoder against every kind of damage.

Whatever bytes reach ``Codec.decode``, the answer is either exactly the
content that was encoded or one ``RecordDamagedError``: never other data, never
an exception from deep inside zstd or msgpack, never an allocation sized by a
damaged length field.
"""

from __future__ import annotations

import contextlib
import struct
import tracemalloc

import pytest
import zstandard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from langgraph_checkpoint_verified.errors import NewerFormatError, RecordDamagedError
from langgraph_checkpoint_verified.records.format import (
    _FIXED,
    FORMAT_VERSION,
    HEADER_DIGEST_SIZE,
    HEADER_SIZE,
    MAGIC,
    MAX_IDENTITY_SIZE,
    MIN_RECORD_SIZE,
    RECORD_DIGEST_SIZE,
    Codec,
    RecordKind,
    encode_identity,
    pack,
)
from langgraph_checkpoint_verified.records.kinds import decode_checkpoint, decode_writes

# Fixed examples, no example database: every run checks the same inputs.
PROPERTY = settings(
    derandomize=True,
    database=None,
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

KEY = b"k" * 32
OTHER_KEY = b"o" * 32

kinds = st.sampled_from(list(RecordKind))
identities = st.dictionaries(st.text(max_size=12), st.text(max_size=24), max_size=5)
contents = st.one_of(
    st.binary(max_size=600),
    # compressible content, so payloads are real zstd blocks and not raw ones
    st.builds(lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=8), st.integers(1, 300)),
)
keys = st.sampled_from([None, KEY])


@st.composite
def records(draw):
    key = draw(keys)
    kind = draw(kinds)
    identity = draw(identities)
    content = draw(contents)
    codec = Codec(key)
    return codec, kind, identity, content, codec.encode(kind, identity, content)


def assert_damaged(codec: Codec, data: bytes, kind: RecordKind, identity: dict) -> None:
    """Every decoding entry point refuses ``data`` with the one typed error."""
    with pytest.raises(RecordDamagedError):
        codec.decode(data, kind, identity)
    with pytest.raises(RecordDamagedError):
        codec.decode(data, kind, None)
    with pytest.raises(RecordDamagedError):
        codec.decode_with_header(data, kind)


def header_end(identity: dict) -> int:
    """Offset just past the header digest: the bytes ``read_header`` trusts."""
    return HEADER_SIZE + len(encode_identity(identity)) + HEADER_DIGEST_SIZE


# -- round trip: the properties below are not vacuous ----------------------


@PROPERTY
@given(records())
def test_valid_record_round_trips(record):
    codec, kind, identity, content, data = record
    assert codec.decode(data, kind, identity) == content
    assert codec.decode(data, kind, None) == content
    header, decoded = codec.decode_with_header(data, kind)
    assert (header.kind, header.identity, header.keyed, decoded) == (
        kind,
        identity,
        codec.key is not None,
        content,
    )


# -- damage ----------------------------------------------------------------


@PROPERTY
@given(records(), st.data())
def test_any_bit_flip_is_damage(record, data):
    codec, kind, identity, _, original = record
    bit = data.draw(st.integers(0, len(original) * 8 - 1), label="bit")
    damaged = bytearray(original)
    damaged[bit // 8] ^= 1 << (bit % 8)
    assert_damaged(codec, bytes(damaged), kind, identity)
    if bit // 8 < header_end(identity):
        with pytest.raises(RecordDamagedError):
            codec.read_header(bytes(damaged))


def test_every_single_bit_flip_of_a_small_record_is_damage():
    codec = Codec()
    identity = {"thread_id": "t", "checkpoint_id": "1"}
    original = codec.encode(RecordKind.CHECKPOINT, identity, b"channel values" * 3)
    trusted_head = header_end(identity)
    flipped_in_head = flipped_in_body = 0
    for bit in range(len(original) * 8):
        damaged = bytearray(original)
        damaged[bit // 8] ^= 1 << (bit % 8)
        damaged = bytes(damaged)
        assert_damaged(codec, damaged, RecordKind.CHECKPOINT, identity)
        if bit // 8 < trusted_head:
            with pytest.raises(RecordDamagedError):
                codec.read_header(damaged)
            flipped_in_head += 1
        else:
            # the header still verifies, so a reader can say what the damaged record was
            assert codec.read_header(damaged).identity == identity
            flipped_in_body += 1
    assert flipped_in_head == trusted_head * 8
    assert flipped_in_body == (len(original) - trusted_head) * 8


@PROPERTY
@given(records(), st.data())
def test_any_truncation_is_damage(record, data):
    codec, kind, identity, _, original = record
    cut = data.draw(st.integers(0, len(original) - 1), label="cut")
    assert_damaged(codec, original[:cut], kind, identity)


@PROPERTY
@given(records(), st.binary(min_size=1, max_size=64))
def test_any_extension_is_damage(record, junk):
    codec, kind, identity, _, original = record
    assert_damaged(codec, original + junk, kind, identity)
    assert_damaged(codec, junk + original, kind, identity)


@PROPERTY
@given(records(), records(), st.data())
def test_any_splice_of_two_records_is_damage(first, second, data):
    codec, kind, identity, _, a = first
    _, _, _, _, b = second
    cut_a = data.draw(st.integers(0, len(a)), label="cut_a")
    cut_b = data.draw(st.integers(0, len(b)), label="cut_b")
    spliced = a[:cut_a] + b[cut_b:]
    assume(spliced != a)
    assume(not (codec.key == second[0].key and spliced == b))
    assert_damaged(codec, spliced, kind, identity)


@PROPERTY
@given(records(), st.data())
def test_overwritten_run_of_bytes_is_damage(record, data):
    codec, kind, identity, _, original = record
    start = data.draw(st.integers(0, len(original) - 1), label="start")
    length = data.draw(st.integers(1, 64), label="length")
    fill = data.draw(st.sampled_from([b"\x00", b"\xff"]), label="fill")
    damaged = original[:start] + fill * length + original[start + length :]
    damaged = damaged[: len(original)]
    assume(damaged != original)
    assert_damaged(codec, damaged, kind, identity)


@PROPERTY
@given(st.binary(max_size=400))
def test_arbitrary_bytes_are_damage(junk):
    codec = Codec()
    for kind in RecordKind:
        with pytest.raises(RecordDamagedError):
            codec.decode(junk, kind, None)
    with pytest.raises(RecordDamagedError):
        codec.read_header(junk)


@PROPERTY
@given(
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=300),
)
def test_plausible_headers_with_random_fields_are_damage(
    kind, flags, identity_size, payload_size, content_size, rest
):
    # past the magic and version checks, so the length and digest checks are what answers
    junk = _FIXED.pack(
        MAGIC, FORMAT_VERSION, kind, flags, 0, identity_size, payload_size, content_size
    )
    junk += rest
    for codec in (Codec(), Codec(KEY)):
        with pytest.raises(RecordDamagedError):
            codec.read_header(junk)
        with pytest.raises(RecordDamagedError):
            codec.decode(junk, RecordKind.WRITES, None)


# -- identity, kind and keys -------------------------------------------------


@PROPERTY
@given(records(), st.text(max_size=12), st.text(max_size=24))
def test_identity_mismatch_is_damage(record, field, value):
    codec, kind, identity, _, data = record
    assume(identity.get(field) != value)
    with pytest.raises(RecordDamagedError, match="identity mismatch"):
        codec.decode(data, kind, {**identity, field: value})


@PROPERTY
@given(records(), kinds)
def test_wrong_kind_is_damage(record, other_kind):
    codec, kind, identity, _, data = record
    assume(other_kind is not kind)
    with pytest.raises(RecordDamagedError, match="kind"):
        codec.decode(data, other_kind, identity)


@PROPERTY
@given(kinds, identities, contents)
def test_keys_must_match(kind, identity, content):
    unkeyed, keyed, other = Codec(), Codec(KEY), Codec(OTHER_KEY)
    plain = unkeyed.encode(kind, identity, content)
    macd = keyed.encode(kind, identity, content)
    assert keyed.decode(macd, kind, identity) == content
    with pytest.raises(RecordDamagedError, match="without a key"):
        keyed.decode(plain, kind, identity)
    with pytest.raises(RecordDamagedError, match="with a key"):
        unkeyed.decode(macd, kind, identity)
    with pytest.raises(RecordDamagedError, match="header checksum"):
        other.decode(macd, kind, identity)
    with pytest.raises(RecordDamagedError):
        other.read_header(macd)


def test_clearing_the_keyed_flag_does_not_pass_a_mac_as_a_plain_digest():
    macd = bytearray(Codec(KEY).encode(RecordKind.WRITES, {"t": "1"}, b"data"))
    macd[6] = 0
    assert_damaged(Codec(), bytes(macd), RecordKind.WRITES, {"t": "1"})


@pytest.mark.parametrize("bad_key", [b"", b"short", b"x" * 15, b"x" * 65])
def test_key_length_is_checked(bad_key):
    with pytest.raises(ValueError, match="16 to 64"):
        Codec(bad_key)


# -- declared sizes ------------------------------------------------------------


def _peak_allocation(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def _zstd(content: bytes) -> bytes:
    params = zstandard.ZstdCompressionParameters.from_level(
        3, write_checksum=True, write_content_size=True
    )
    return zstandard.ZstdCompressor(compression_params=params).compress(content)


def _refuse(codec: Codec, data: bytes, match: str) -> int:
    def attempt():
        with pytest.raises(RecordDamagedError, match=match):
            codec.decode(data, RecordKind.WRITES, None)

    return _peak_allocation(attempt)


def test_huge_declared_lengths_are_refused_without_allocating():
    codec = Codec()
    valid = codec.encode(RecordKind.WRITES, {"t": "1"}, b"x" * 100)
    fixed = list(_FIXED.unpack_from(valid, 0))

    def with_field(index: int, value: int) -> bytes:
        fields = list(fixed)
        fields[index] = value
        return _FIXED.pack(*fields) + valid[HEADER_SIZE:]

    limit = 1 << 20
    assert _refuse(codec, with_field(5, MAX_IDENTITY_SIZE + 1), "identity size") < limit
    assert _refuse(codec, with_field(5, 2**32 - 1), "identity size") < limit
    assert _refuse(codec, with_field(6, 2**64 - 1), "header declares") < limit
    assert _refuse(codec, with_field(7, 2**64 - 1), "declared content size") < limit


def test_huge_sizes_inside_correct_digests_are_refused_without_allocating():
    """Sizes a writer declared (digests intact) are bounded too, not only damaged ones."""
    small = Codec(max_content_size=1 << 20)
    identity = encode_identity({"t": "1"})
    # 128 KiB: large enough that zstd stores the size in 4 bytes, right after byte 5
    payload = _zstd(b"y" * (1 << 17))
    # header says 2 GiB: over this codec's limit, refused before zstd runs
    over_limit = small._frame(RecordKind.WRITES, identity, payload, (1 << 31) - 1)
    assert _refuse(small, over_limit, "exceeds the limit") < 1 << 20

    # the zstd frame itself declares 4 GiB while the header says 128 KiB: zstd would
    # allocate what its frame says, so the two must agree before it runs
    frame_header_len = 5  # magic + frame header descriptor; the 4-byte size follows
    lying_frame = (
        payload[:frame_header_len] + struct.pack("<I", 2**32 - 1) + payload[frame_header_len + 4 :]
    )
    assert zstandard.frame_content_size(lying_frame) == 2**32 - 1
    codec = Codec()
    lying = codec._frame(RecordKind.WRITES, identity, lying_frame, 1 << 17)
    assert _refuse(codec, lying, "zstd frame declares") < 1 << 20

    not_zstd = codec._frame(RecordKind.WRITES, identity, b"\x00" * 32, 32)
    with pytest.raises(RecordDamagedError):
        codec.decode(not_zstd, RecordKind.WRITES, None)


@PROPERTY
@given(st.binary(min_size=1, max_size=200), st.integers(0, 1 << 16))
def test_payload_that_is_not_what_the_header_says_is_damage(payload, declared):
    """Correct digests around a payload that is not a matching zstd frame."""
    codec = Codec()
    data = codec._frame(RecordKind.WRITES, encode_identity({"t": "1"}), payload, declared)
    try:
        content = codec.decode(data, RecordKind.WRITES, None)
    except RecordDamagedError:
        return
    # only a real zstd frame of exactly the declared size decodes
    assert zstandard.ZstdDecompressor().decompress(payload) == content
    assert len(content) == declared


# -- record contents: verified bytes with a surprising shape -------------------

msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def checkpoint_like(draw):
    """Content shaped roughly like a checkpoint or writes record, with holes."""
    base = {
        "v": draw(st.sampled_from([1, 1, 2, "1", None])),
        "checkpoint": draw(st.sampled_from([["json", b"{}"], ["json"], "x", None])),
        "metadata": draw(st.sampled_from([["json", b"{}"], [1, 2], None])),
        "values": draw(st.dictionaries(st.text(max_size=4), msgpack_values, max_size=3)),
        "refs": draw(st.dictionaries(st.text(max_size=4), msgpack_values, max_size=3)),
        "task_path": draw(st.sampled_from(["", 3, None])),
        "writes": draw(st.lists(msgpack_values, max_size=3)),
    }
    dropped = draw(st.sets(st.sampled_from(sorted(base)), max_size=3))
    return {k: v for k, v in base.items() if k not in dropped}


@PROPERTY
@given(st.one_of(msgpack_values, checkpoint_like()), identities)
def test_verified_content_of_unexpected_shape_is_damage(body, identity):
    """... or, when it names a content version or value encoding greater than the ones
    this package knows, a record from a newer version: never another exception."""
    codec = Codec()
    content = pack(body)
    checkpoint = codec.encode(RecordKind.CHECKPOINT, identity, content)
    writes = codec.encode(RecordKind.WRITES, identity, content)
    for decode, data in ((decode_checkpoint, checkpoint), (decode_writes, writes)):
        try:
            decode(codec, data, {})
        except NewerFormatError:
            assert decode is decode_checkpoint  # writes records name no such thing
        except RecordDamagedError:
            pass


@PROPERTY
@given(st.binary(max_size=64), identities)
def test_verified_content_that_is_not_msgpack_is_damage(content, identity):
    codec = Codec()
    for kind, decode in (
        (RecordKind.CHECKPOINT, decode_checkpoint),
        (RecordKind.WRITES, decode_writes),
    ):
        with contextlib.suppress(RecordDamagedError):
            decode(codec, codec.encode(kind, identity, content), {})


def test_sizes_in_layout_match_the_documented_frame():
    """The offsets the tests above rely on are the documented ones."""
    codec = Codec()
    identity = {"a": "b"}
    data = codec.encode(RecordKind.WRITES, identity, b"")
    ident = encode_identity(identity)
    assert data[:4] == MAGIC
    assert data[HEADER_SIZE : HEADER_SIZE + len(ident)] == ident
    assert len(data) == MIN_RECORD_SIZE + len(ident) + len(_zstd(b""))
    assert RECORD_DIGEST_SIZE == 32 and HEADER_DIGEST_SIZE == 16


@pytest.mark.parametrize("index", [float("inf"), float("nan"), "x", None, [1]])
def test_writes_record_with_a_non_integer_index_is_damage(index):
    codec = Codec()
    identity = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1"}
    identity |= {"task_id": "x", "slot": "n"}
    body = {"v": 1, "task_path": "", "writes": [[index, "channel", "json", b"1"]]}
    data = codec.encode(RecordKind.WRITES, identity, pack(body))
    with pytest.raises(RecordDamagedError, match="unexpected shape"):
        decode_writes(codec, data, {})


def test_codecs_share_their_zstd_contexts(monkeypatch):
    """A context costs more to make than a small record costs to compress or read: a
    codec made later (a saver opened per request) uses those earlier codecs made."""
    made = {"compressors": 0, "decompressors": 0}
    real_compressor, real_decompressor = zstandard.ZstdCompressor, zstandard.ZstdDecompressor

    def compressor(*args, **kwargs):
        made["compressors"] += 1
        return real_compressor(*args, **kwargs)

    def decompressor(*args, **kwargs):
        made["decompressors"] += 1
        return real_decompressor(*args, **kwargs)

    monkeypatch.setattr(zstandard, "ZstdCompressor", compressor)
    monkeypatch.setattr(zstandard, "ZstdDecompressor", decompressor)
    content = b"a step's state " * 200
    identity = {"thread_id": "t"}
    level = 7  # a level no other test encodes with: its pool starts empty here
    first = Codec(compression_level=level)
    data = first.encode(RecordKind.CHECKPOINT, identity, content)
    assert first.decode(data, RecordKind.CHECKPOINT, identity) == content
    assert made["compressors"] == 1
    made_by_first = dict(made)
    for _ in range(3):
        later = Codec(compression_level=level)
        again = later.encode(RecordKind.CHECKPOINT, identity, content)
        assert later.decode(again, RecordKind.CHECKPOINT, identity) == content
        assert later.decode(data, RecordKind.CHECKPOINT, identity) == content
    assert made == made_by_first
