"""Structural checks of a built kernel, run by `build_kernel` before anything executes it.

Python scoping lets a kernel author use a value built inside `with k.if_(...)` after the
block ends; neither the interpreter (which would see it only when the branch ran) nor LLVM
(which would reject it with a dominance error far from the kernel text) would explain that
well. Here it is a DSLError naming the value and the op.
"""
from __future__ import annotations

from .ir import Block, Kernel


class VerifyError(Exception):
    pass


def verify(kernel: Kernel):
    def walk(block: Block, visible: set):
        seen = set(visible)
        for op in block.ops:
            for a in op.args:
                if a.id not in seen:
                    raise VerifyError(f"{op.opcode} uses {a!r}, which is defined inside a region "
                                      "(if/for/while body) that does not enclose this use")
            if op.opcode == "opaque" and (len(op.args) != 1 or op.args[0].type != op.result.type):
                raise VerifyError(f"{op!r}: opaque takes one value and returns its type")
            if op.opcode == "for":
                walk(op.regions[0], seen | {op.attrs["iv"].id})
            elif op.opcode == "while":
                cond_seen = set(seen)
                walk(op.regions[0], cond_seen)
                walk(op.regions[1], seen | _defined(op.regions[0]))
            else:
                for r in op.regions:
                    walk(r, seen)
            seen.update(r.id for r in op.results)
    walk(kernel.body, set())


def _defined(block: Block) -> set:
    return {r.id for op in block.ops for r in op.results}
