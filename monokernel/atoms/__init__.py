"""Registry of MMA atoms (see base.py for what an atom states).

`ATOMS` maps name -> atom; `atom(name)` looks one up; `atoms_for(target)` lists the atoms a
chip has (the interpreter, "interp", runs every atom: it executes them from their maps).
"""
from __future__ import annotations

from ..targets import target as _target
from . import amd, nvidia
from .base import MMAAtom, SmemOperand
from .nvidia import smem_descriptor, wgmma_e4m3

ATOMS: dict = {a.name: a for a in amd.ATOMS + nvidia.ATOMS}


def atom(name: str) -> MMAAtom:
    try:
        return ATOMS[name]
    except KeyError:
        raise ValueError(f"unknown MMA atom {name!r}; known: {sorted(ATOMS)}") from None


def atoms_for(target_name) -> list:
    t = _target(target_name)
    if t.name == "interp":
        return list(ATOMS.values())
    return [a for a in ATOMS.values() if t.name in a.targets]


__all__ = ["ATOMS", "MMAAtom", "SmemOperand", "atom", "atoms_for", "smem_descriptor", "wgmma_e4m3"]
