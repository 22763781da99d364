"""Mailbox tags (DESIGN.md section 4).

Every value a launch publishes carries the tag of that launch:

    tag_for(step, launch, launches_per_step)
        = (step * launches_per_step + launch) mod (2**32 - 1) + 1

`launches_per_step` counts every launch of a decode step (NextN draft launches included) and
`launch` is the launch's position in its step, so the tag grows by one per launch. It is never
0: 0 means "never written", so the scratch arena is zeroed once, at allocation, and never
reset between launches; a consumer waits for "tag == the current launch's tag", which a
stale word (older tag) or a fresh one (0) never satisfies.

The wrap. Tags live in 32 bits; after 2**32 - 1 launches the sequence goes from 2**32 - 1
back to 1, skipping 0. Consumers compare tags for equality only, never for order, so the
wrap needs no special case in the kernel. The one hazard is aliasing: a word last written
exactly a multiple of 2**32 - 1 launches ago would look current. Every region is rewritten
by each launch of the kind that owns it, and every kind runs at least once per step, so a
stale tag is never more than a few launches old (the wrap period is days of serving).
"""
from __future__ import annotations

TAG_NEVER = 0  # the tag of a word nobody has written (zeroed scratch)
TAG_BITS = 32
TAG_MAX = 2**32 - 1  # the largest tag
TAG_PERIOD = 2**32 - 1  # number of distinct tags (1 .. TAG_MAX)


def _check_int(name: str, v, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} = {v!r} must be an int >= {lo}")
    return v


def launch_serial(step: int, launch: int, launches_per_step: int) -> int:
    """The launch's serial number (unbounded): step * launches_per_step + launch."""
    _check_int("launches_per_step", launches_per_step, 1)
    _check_int("step", step)
    _check_int("launch", launch)
    if launch >= launches_per_step:
        raise ValueError(f"launch = {launch} must be < launches_per_step = {launches_per_step}")
    return step * launches_per_step + launch


def tag_for(step: int, launch: int, launches_per_step: int) -> int:
    """The tag of launch `launch` of decode step `step`: in 1 .. 2**32 - 1, never 0."""
    return launch_serial(step, launch, launches_per_step) % TAG_PERIOD + 1


def next_tag(tag: int) -> int:
    """The tag of the launch after the one tagged `tag` (2**32 - 1 is followed by 1)."""
    _check_int("tag", tag, 1)
    if tag > TAG_MAX:
        raise ValueError(f"tag = {tag} is over {TAG_MAX}")
    return 1 if tag == TAG_MAX else tag + 1


def tag_distance(older: int, newer: int) -> int:
    """How many launches separate two tags (mod the wrap period): 0 .. 2**32 - 2."""
    for n, t in (("older", older), ("newer", newer)):
        _check_int(n, t, 1)
        if t > TAG_MAX:
            raise ValueError(f"{n} tag = {t} is over {TAG_MAX}")
    return (newer - older) % TAG_PERIOD


def pack_pair(value_bits: int, tag: int) -> int:
    """The 64-bit word of a tagged pair: value bits in the low 32 bits, tag in the high 32."""
    if not 0 <= value_bits < 2**32:
        raise ValueError(f"value bits {value_bits!r} must fit in 32 bits")
    if not 0 <= tag <= TAG_MAX:
        raise ValueError(f"tag {tag!r} must fit in 32 bits")
    return (tag << 32) | value_bits


def unpack_pair(word: int) -> tuple[int, int]:
    """(value_bits, tag) of a 64-bit pair word."""
    if not 0 <= word < 2**64:
        raise ValueError(f"pair word {word!r} must fit in 64 bits")
    return word & 0xFFFFFFFF, word >> 32
