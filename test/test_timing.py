"""monokernel.launch.timing.timed_graph's warm-up, with torch's CUDA calls faked (no GPU in
CI): every input of the graph's rotation is first used outside the capture, so a launch's
one-time host work for a new buffer (a TMA descriptor's copy to the device) never becomes a
node the graph replays (v50b: every first round ~1-2 us a launch slower)."""
from __future__ import annotations

import contextlib
import sys
import types

import pytest

from monokernel.launch import timing


def _fake_torch():
    """The torch.cuda surface timed_graph and timed use; `state.capturing` while a graph is
    being captured, its captured calls replayed by CUDAGraph.replay."""
    state = types.SimpleNamespace(capturing=False, captured=[])

    class Stream:
        def wait_stream(self, other):
            pass

    class CUDAGraph:
        def replay(self):
            for fn in state.captured:
                fn()

    @contextlib.contextmanager
    def graph(g):
        state.capturing = True
        yield
        state.capturing = False

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return 1.0

    cuda = types.SimpleNamespace(Stream=Stream, current_stream=Stream, CUDAGraph=CUDAGraph,
                                 graph=graph, Event=Event, synchronize=lambda: None,
                                 stream=lambda s: contextlib.nullcontext())
    return types.SimpleNamespace(cuda=cuda), state


@pytest.mark.parametrize("per_graph", [1, 3, 20])
def test_every_input_of_the_rotation_is_seen_before_the_capture(monkeypatch, per_graph):
    torch, state = _fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    seen_uncaptured, first_seen_in_capture = set(), []
    calls = {"i": 0}

    def launch():  # rotates its inputs as time_layers' next_args does
        copy = calls["i"] % per_graph
        calls["i"] += 1
        if state.capturing and copy not in seen_uncaptured:
            first_seen_in_capture.append(copy)
        if not state.capturing:
            seen_uncaptured.add(copy)

    real_graph = torch.cuda.graph

    @contextlib.contextmanager
    def capture(g):  # what the capture records: the launches made inside it
        with real_graph(g):
            start = calls["i"]
            yield
        state.captured = [launch] * (calls["i"] - start)
    monkeypatch.setattr(torch.cuda, "graph", capture)
    assert timing.timed_graph(launch, per_graph=per_graph, reps=2) == pytest.approx(
        1e3 / per_graph)
    assert not first_seen_in_capture, first_seen_in_capture
    assert seen_uncaptured == set(range(per_graph))
