"""Proof kernels: small kernels, each with a torch/numpy float64 reference, that prove one part
of the compiler end to end (interpreter in its three modes, gfx950/gfx942 code objects, and on
the H200). `PROOFS` lists them with the parameters the README's build uses."""
from __future__ import annotations

from .registry import PROOFS, ProofKernel

__all__ = ["PROOFS", "ProofKernel"]
