"""Scratch layout: region primitives, the arena, mailbox tags, the offset-width proof,
host-side decoding, and the kernel side of the mailbox protocol (protocol.py: DSL helpers
that form every arena access from the layout) (DESIGN.md sections 4 and 5). Pure Python,
shared by host and kernel."""
from .arena import BASE_ALIGN, Arena, Placement
from .decode import (BulkData, PairsData, as_bytes, decode, decode_all, write_bulk, write_pairs,
                     write_plain)
from .offsets import INT32_MAX, Access, OffsetProof, prove, prove_all, region_access
from .protocol import (Mailbox, acquire_bulk, load_data, poll_pair, publish_pair, release_bulk,
                       store_data)
from .regions import (DATA_OFFSET, LINE, PAIR_BYTES, BulkBuffer, PlainBuffer, Region, TaggedPairs,
                      counter_after_publish, counter_word)
from .tags import (TAG_MAX, TAG_NEVER, TAG_PERIOD, launch_serial, next_tag, pack_pair, tag_distance,
                   tag_for, unpack_pair)

__all__ = [
    "Arena", "Placement", "BASE_ALIGN",
    "BulkData", "PairsData", "as_bytes", "decode", "decode_all", "write_bulk", "write_pairs", "write_plain",
    "Mailbox", "publish_pair", "poll_pair", "store_data", "load_data", "release_bulk", "acquire_bulk",
    "INT32_MAX", "Access", "OffsetProof", "prove", "prove_all", "region_access",
    "LINE", "PAIR_BYTES", "DATA_OFFSET", "Region", "TaggedPairs", "BulkBuffer", "PlainBuffer",
    "counter_word", "counter_after_publish",
    "TAG_MAX", "TAG_NEVER", "TAG_PERIOD", "launch_serial", "next_tag", "pack_pair", "tag_distance",
    "tag_for", "unpack_pair",
]
