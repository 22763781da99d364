"""Stages (one module per stage family) and the composition of each launch kind.

A stage declares its jobs, the regions it reads and writes, a DSL body and a torch reference
(`base.py`); `launch.py` composes stages into a launch: arena layout, offset proofs, schedule
(checked deadlock-free), the linked persistent kernel, and runs on the interpreter or a GPU.
"""
from .base import Buffer, Job, Stage, Use, resolve
from .launch import Launch, Result

__all__ = ["Buffer", "Job", "Stage", "Use", "resolve", "Launch", "Result"]
