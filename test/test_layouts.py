"""Layouts: regions, tags, the arena, the offset-width proof and host-side decoding."""
import json
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from layouts import (DATA_OFFSET, INT32_MAX, LINE, TAG_MAX, Access, Arena, BulkBuffer, PlainBuffer,
                     TaggedPairs, counter_word, decode, decode_all, next_tag,
                     pack_pair, prove, prove_all, region_access, tag_distance, tag_for, unpack_pair,
                     write_bulk, write_pairs, write_plain)
from monokernel import types as T


# -- tags --------------------------------------------------------------------------------------

def test_tags_start_at_one_and_grow_by_one_per_launch():
    L = 5
    assert tag_for(0, 0, L) == 1
    seq = [tag_for(s, l, L) for s in range(4) for l in range(L)]
    assert seq == list(range(1, 4 * L + 1))


@pytest.mark.parametrize("L", [1, 3, 64, 81])
def test_tags_at_the_wrap_skip_zero_and_restart_at_one(L):
    P = 2**32 - 1
    # find (step, launch) with serial P-2, P-1, P, P+1 around the wrap
    tags = []
    for serial in range(P - 2, P + 2):
        s, l = divmod(serial, L)
        tags.append(tag_for(s, l, L))
    assert tags == [TAG_MAX - 1, TAG_MAX, 1, 2]
    assert next_tag(TAG_MAX) == 1 and next_tag(TAG_MAX - 1) == TAG_MAX
    assert tag_distance(TAG_MAX, 1) == 1 and tag_distance(TAG_MAX - 1, 2) == 3
    # the second wrap, far later, behaves the same
    s, l = divmod(2 * P - 1, L)
    assert tag_for(s, l, L) == TAG_MAX
    s, l = divmod(2 * P, L)
    assert tag_for(s, l, L) == 1


@settings(max_examples=200, deadline=None)
@given(step=st.integers(0, 2**40), L=st.integers(1, 200), data=st.data())
def test_tags_are_never_zero_and_each_launch_is_the_next_tag(step, L, data):
    launch = data.draw(st.integers(0, L - 1))
    t = tag_for(step, launch, L)
    assert 1 <= t <= TAG_MAX
    nxt = tag_for(step, launch + 1, L) if launch + 1 < L else tag_for(step + 1, 0, L)
    assert nxt == next_tag(t)


def test_tag_arguments_are_checked():
    with pytest.raises(ValueError, match="launch = 3 must be < launches_per_step = 3"):
        tag_for(0, 3, 3)
    with pytest.raises(ValueError, match="step"):
        tag_for(-1, 0, 3)
    with pytest.raises(ValueError, match="launches_per_step"):
        tag_for(0, 0, 0)
    assert unpack_pair(pack_pair(0xDEADBEEF, TAG_MAX)) == (0xDEADBEEF, TAG_MAX)


# -- regions and the arena ---------------------------------------------------------------------

def sample_regions():
    return [
        TaggedPairs("mailbox_partial", 37, T.f32),
        PlainBuffer("odd_plain", T.u8, (3,)),
        BulkBuffer("normed_h", T.bf16, (4, 6144), publishers=12),
        TaggedPairs("mailbox_topk", (2, 5), "i32"),
        PlainBuffer("error_word", T.u32, (1,)),
        BulkBuffer("tiny_bulk", np.float32, (1,), publishers=1),
    ]


def test_mailbox_pairs_are_8_byte_words_each_one_aligned_64bit_access():
    r = TaggedPairs("mb", 37, T.f32)
    assert r.nbytes == 37 * 8 and r.align == 8
    with pytest.raises(ValueError, match="32-bit value"):
        TaggedPairs("mb16", 4, T.bf16)
    with pytest.raises(ValueError, match="32-bit value"):
        TaggedPairs("mb64", 4, T.i64)
    a = Arena.from_regions(sample_regions())
    for name in ("mailbox_partial", "mailbox_topk"):
        p = a[name]
        assert p.data_offset % 8 == 0
        assert all((p.data_offset + 8 * i) % 8 == 0 for i in range(p.region.elements))


def test_arena_places_every_region_on_its_own_128_byte_lines():
    a = Arena.from_regions(sample_regions())
    assert LINE == 128
    spans = []
    for p in a:
        assert p.offset % 128 == 0 and p.span % 128 == 0 and p.span >= p.nbytes
        spans.append(range(p.offset // 128, (p.offset + p.span) // 128))
    lines = [l for s in spans for l in s]
    assert len(lines) == len(set(lines))  # no line shared by two regions
    assert a.total_bytes % 128 == 0 and a.total_bytes == a.placements[-1].end
    b = a["normed_h"]
    assert b.counter_offset == b.offset and b.data_offset == b.offset + DATA_OFFSET == b.offset + 128
    assert b.nbytes == 128 + 4 * 6144 * 2 and b.region.align == 128
    assert a["odd_plain"].span == 128 and a["mailbox_topk"].offset == a["normed_h"].end


def test_arena_is_deterministic_and_round_trips_through_its_manifest():
    a1 = Arena.from_regions(sample_regions())
    a2 = Arena.from_regions(sample_regions())
    assert json.dumps(a1.to_json()) == json.dumps(a2.to_json())
    m = json.loads(json.dumps(a1.to_json()))
    assert m["total_bytes"] == a1.total_bytes
    assert [r["name"] for r in m["regions"]] == a1.names
    assert Arena.from_json(m) == a1
    assert a1.offset("error_word") == a1["error_word"].offset and a1.region("normed_h").publishers == 12
    assert "normed_h" in a1 and "nope" not in a1
    assert "bulk" in str(a1)


def test_arena_duplicate_region_name_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="duplicate region name 'mailbox_topk'"):
        Arena.from_regions([TaggedPairs("mailbox_topk", 4), PlainBuffer("mailbox_topk", T.i32, (4,))])
    with pytest.raises(KeyError, match="no region 'missing'"):
        Arena.from_regions(sample_regions())["missing"]


def test_region_arguments_are_checked():
    with pytest.raises(ValueError, match="publishers"):
        BulkBuffer("b", T.f32, (4,), publishers=0)
    with pytest.raises(ValueError, match="shape"):
        PlainBuffer("p", T.f32, (0,))
    with pytest.raises(ValueError, match="unknown dtype"):
        PlainBuffer("p", "f33", (1,))


# -- the bulk counter protocol -----------------------------------------------------------------

def test_bulk_counter_completes_after_all_publishers_and_never_needs_resetting():
    r = BulkBuffer("b", T.f32, (8,), publishers=7)
    rng = random.Random(0)
    word = 0  # zeroed scratch: tag 0 = never published
    P = 2**32 - 1
    serials = list(range(0, 4)) + list(range(P - 3, P + 3))  # includes the tag wrap
    for serial in serials:
        tag = tag_for(serial, 0, 1)
        assert word != r.complete_word(tag)  # the previous launch's word never looks complete
        for _ in range(r.publishers):  # any order of the publishers' CAS updates
            word = r.counter_after_publish(word, tag)
            rng.random()
        assert word == r.complete_word(tag) == (tag << 32) | 7
    one = BulkBuffer("one", T.f32, (8,), publishers=1)
    assert one.counter_after_publish(counter_word(5, 1), 6) == one.complete_word(6) == (6 << 32) | 1


# -- the offset proof --------------------------------------------------------------------------

def test_access_with_largest_byte_offset_exactly_int32_max_takes_the_buffer32_path():
    a = Access("u8_exact", "t", 1, (0, INT32_MAX), int32_index=True)
    p = prove(a)
    assert (p.addressing, p.max_byte_offset, p.max_index) == ("buffer32", INT32_MAX, INT32_MAX)
    # fp32: 3 bytes of base offset + 4 * (2**29 - 1) = INT32_MAX
    f = prove(Access("f32_exact", "t", 4, (0, 2**29 - 1), base_offset=3))
    assert f.addressing == "buffer32" and f.max_byte_offset == INT32_MAX


def test_access_one_byte_or_one_element_past_int32_max_takes_the_global64_path():
    one_byte = prove(Access("f32_byte_past", "t", 4, (0, 2**29 - 1), base_offset=4))
    assert one_byte.addressing == "global64" and one_byte.max_byte_offset == INT32_MAX + 1
    one_elem = prove(Access("f32_elem_past", "t", 4, (0, 2**29), base_offset=3))
    assert one_elem.addressing == "global64" and one_elem.max_byte_offset == INT32_MAX + 4
    # a 1-byte element past INT32_MAX: the index itself no longer fits int32, so it must be
    # computed in 64 bits (and then the access is global64)
    with pytest.raises(ValueError, match=r"'u8_past'.*2147483648"):
        prove(Access("u8_past", "t", 1, (0, INT32_MAX + 1)))
    p = prove(Access("u8_past", "t", 1, (0, INT32_MAX + 1), int32_index=False))
    assert p.addressing == "global64" and p.max_index == 0


def logits_access(s_q, s_k):
    """The seed's fp32 logits [s_q, s_k]: re-based per row (row * s_k in int32), the column
    index inside the row in int32, and the flat element offset row * s_k + col in int32 too
    (what the fixed gate bounds)."""
    return Access(f"logits_{s_q}x{s_k}", "logits", 4, (0, s_k - 1), rebase_step=s_k,
                  rebase_count=s_q, int32_flat=True, buffer_elems=s_q * s_k)


@pytest.mark.parametrize("s_q,s_k", [(8192, 65536), (8192, 95457), (8192, 131072),
                                     (16384, 131072), (8192, 262144)])
def test_seed_fp32_logits_rebased_per_row_are_buffer32_although_tensor_bytes_exceed_int32(s_q, s_k):
    p = prove(logits_access(s_q, s_k))
    tensor_bytes = s_q * s_k * 4
    assert tensor_bytes > INT32_MAX  # a gate on tensor bytes would refuse buffer ops: wrong
    assert p.addressing == "buffer32"
    assert p.max_byte_offset == (s_k - 1) * 4  # one row, after re-basing
    assert p.max_index == s_q * s_k - 1 <= INT32_MAX


def test_seed_boundary_shapes_put_the_largest_int32_index_exactly_at_int32_max():
    for s_q, s_k in [(8192, 262144), (16384, 131072)]:
        assert prove(logits_access(s_q, s_k)).max_index == INT32_MAX


@pytest.mark.parametrize("s_q,s_k", [(16384, 139264), (32768, 131072)])
def test_int32_index_overflow_raises_naming_the_access_and_the_value(s_q, s_k):
    a = logits_access(s_q, s_k)
    with pytest.raises(ValueError) as e:
        prove(a)
    msg = str(e.value)
    assert a.name in msg and "int32" in msg
    assert str(s_q * s_k - 1) in msg or str((s_q - 1) * s_k) in msg


def test_int32_rebase_offset_overflow_raises_even_when_each_row_is_small():
    a = Access("rows", "kv", 2, (0, 575), rebase_step=576, rebase_count=2**22)
    with pytest.raises(ValueError, match=r"'rows'.*re-base offset.*2415918528"):
        prove(a)
    # the same access with the row offset computed in 64 bits is fine and buffer32
    p = prove(Access("rows64", "kv", 2, (0, 575), rebase_step=576, rebase_count=2**22,
                     int32_rebase=False))
    assert p.addressing == "buffer32" and p.max_byte_offset == 575 * 2 and p.max_index == 575


def test_region_access_counts_the_region_offset_when_the_resource_is_the_arena():
    a = Arena.from_regions(sample_regions())
    r = region_access(a, "mailbox_topk", (0, 9))
    p = prove(r)
    assert r.elem_bytes == 8 and p.max_byte_offset == a["mailbox_topk"].data_offset + 9 * 8
    assert prove(region_access(a, "mailbox_topk", (0, 9), resource="region")).max_byte_offset == 72
    with pytest.raises(ValueError, match="past the end"):
        prove(region_access(a, "mailbox_topk", (0, 10)))
    proofs = prove_all([r, region_access(a, "normed_h", (0, 6143), name="h")])
    assert set(proofs) == {"mailbox_topk", "h"} and proofs["h"].to_json()["addressing"] == "buffer32"


# -- decoding ----------------------------------------------------------------------------------

def test_mailbox_pairs_written_by_numpy_decode_to_values_and_tags():
    a = Arena.from_regions(sample_regions())
    img = a.zeros()
    p = a["mailbox_partial"]
    vals = np.linspace(-3, 3, 37).astype(np.float32)
    vals[5] = np.float32("nan")
    tags = np.arange(37, dtype=np.uint64) + np.uint64(TAG_MAX - 20)
    words = (tags << np.uint64(32)) | vals.view(np.uint32).astype(np.uint64)
    img[p.data_offset:p.data_offset + 37 * 8] = words.astype("<u8").view(np.uint8)
    # value in the low 32 bits = bytes +0..3, tag in the high 32 bits = bytes +4..7
    assert img[p.data_offset + 4:p.data_offset + 8].view("<u4")[0] == TAG_MAX - 20
    d = decode(a, img, "mailbox_partial")
    assert d.values.dtype == np.float32 and d.tags.dtype == np.uint32
    assert d.values.view(np.uint32).tolist() == vals.view(np.uint32).tolist()  # NaN bits kept
    assert d.tags.tolist() == tags.astype(np.uint32).tolist()
    # untouched mailbox: tag 0 = never written
    t = decode(a, img, "mailbox_topk")
    assert t.values.shape == (2, 5) and not t.written.any()


def test_bulk_and_plain_written_by_numpy_decode_round_trip():
    a = Arena.from_regions(sample_regions())
    img = a.zeros()
    b = a["normed_h"]
    h = np.random.default_rng(0).integers(0, 2**16, (4, 6144), dtype=np.uint16)  # bf16 bits
    img[b.data_offset:b.data_offset + h.nbytes] = h.view(np.uint8).reshape(-1)
    img[b.counter_offset:b.counter_offset + 8] = np.array([(9 << 32) | 12], "<u8").view(np.uint8)
    d = decode(a, img, "normed_h")
    assert d.data.dtype == np.uint16 and np.array_equal(d.data, h)
    assert (d.counter_tag, d.counter_count) == (9, 12) and d.complete(9, 12) and not d.complete(10, 12)
    e = a["error_word"]
    img[e.data_offset:e.data_offset + 4] = np.array([0xC0FFEE], "<u4").view(np.uint8)
    assert decode(a, img, "error_word").tolist() == [0xC0FFEE]
    # a torch uint8 tensor decodes the same
    all_np = decode_all(a, img)
    all_t = decode_all(a, torch.from_numpy(img.copy()))
    assert set(all_np) == set(a.names)
    assert np.array_equal(all_t["normed_h"].data, h) and all_t["error_word"].tolist() == [0xC0FFEE]
    # decoded arrays are copies
    img[:] = 0
    assert np.array_equal(all_np["normed_h"].data, h)


def test_host_writers_and_decoder_round_trip_every_region_kind():
    a = Arena.from_regions(sample_regions())
    img = a.zeros()
    rng = np.random.default_rng(1)
    v = rng.integers(-2**31, 2**31, (2, 5), dtype=np.int32)
    write_pairs(a, img, "mailbox_topk", v, tag=tag_for(3, 1, 4))
    write_bulk(a, img, "tiny_bulk", [1.5], tag=TAG_MAX)
    write_plain(a, img, "odd_plain", [1, 2, 255])
    d = decode_all(a, img)
    assert np.array_equal(d["mailbox_topk"].values, v) and d["mailbox_topk"].all_tagged(14)
    assert d["tiny_bulk"].data.tolist() == [1.5] and d["tiny_bulk"].counter_word == (TAG_MAX << 32) | 1
    assert d["odd_plain"].tolist() == [1, 2, 255]
    assert not d["mailbox_partial"].written.any() and d["normed_h"].counter_word == 0
    with pytest.raises(ValueError, match="not pairs"):
        write_pairs(a, img, "odd_plain", [1], 1)
    with pytest.raises(ValueError, match="arena image has 128 bytes"):
        decode(a, np.zeros(128, np.uint8), "odd_plain")
    with pytest.raises(ValueError, match="uint8"):
        decode(a, np.zeros(a.total_bytes, np.int8), "odd_plain")
