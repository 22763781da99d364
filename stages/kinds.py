"""Launch kinds: the name a user builds, checks and times, and how each is composed.

A kind's name never changes meaning; it only gains stages (DESIGN.md section 1). Every kind
is a function BuildSpec -> stages.launch.Launch, plus seeded inputs scaled as real
activations and weights (never zeros), so tools (build, check_layer, time_layers, lint)
work on any kind the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Kind:
    name: str
    doc: str
    launch: Callable  # (spec: spec.BuildSpec) -> stages.launch.Launch
    inputs: Callable  # (launch, spec, rng: numpy Generator) -> dict of numpy inputs
    # False for test-only kinds (e.g. "synthetic"): tools build/check/time them only when named
    default: bool = True
    # the keywords of `launch` a user may set with --tune launch.ATTR=VALUE
    # (tools.common.LAUNCH_TUNABLES): "waves" (waves a CTA), "select_digits" (the selection's
    # radix plan), "q_splits" (the index q projection's split); a kind that fixes a part
    # itself does not list it
    launch_tunables: tuple = ()


KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    if kind.name in KINDS:
        raise ValueError(f"launch kind {kind.name!r} registered twice")
    KINDS[kind.name] = kind
    return kind


def kind(name: str) -> Kind:
    _load()
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown launch kind {name!r}; known: {', '.join(sorted(KINDS))}") from None


def names() -> list[str]:
    _load()
    return sorted(KINDS)


def default_names() -> list[str]:
    """The kinds a tool runs when none is named: every registered kind but test-only ones."""
    _load()
    return sorted(n for n, k in KINDS.items() if k.default)


KIND_MODULES = ("synthetic", "select", "front", "index")


def _load():
    """Import the modules that register kinds (each registers itself on import). A module
    that does not exist yet is skipped; any other import error propagates."""
    import importlib
    for mod in KIND_MODULES:
        try:
            importlib.import_module(f"{__package__}.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{mod}":
                raise
