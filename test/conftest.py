import os

import numpy as np
import pytest

MODES = ("inorder", "random", "relaxed")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# Alternatives measured on the H200 and kept off by default, whose tests run several cases
# of the same comparison (on == off, bit for bit): the first case stays in the default run,
# the others are marked `slow` (`pytest -m slow` runs them) to keep the suite's time.
VARIANT_TESTS = {
    "test_select_lists.py": (
        "test_sel_h1_scanning_its_slice_from_lds_gives_the_same_messages",  # lds_scan
        "test_early_emit_by_the_last_histogram_pass",  # early_emit
        "test_grouped_digit_counts_publish_the_same_messages",  # grouped_counts
        "test_wide_lean_scan_writes_the_same_lists_and_messages",  # lean_lane_keys=32
        "test_lean_refills_write_the_same_lists_and_messages",  # lean_refill
        "test_coalesced_lean_loads_write_the_same_lists_and_messages",  # lean_coalesced
        "test_lean_any_special_writes_the_same_lists_and_messages",  # lean_any_special
        "test_lean_scan_prefetches_and_early_loads_change_no_bit",  # lean prefetches
        "test_scan_ahead_writes_the_same_lists_and_messages",  # scan_ahead
        "test_scan_unroll_writes_the_same_lists_and_messages",  # scan_unroll
    ),
    "test_select_group_max.py": (
        "test_given_maxima_select_what_scanning_every_group_selects",  # distributions
    ),
    "test_select_tail_rows.py": (
        "test_every_distribution_selects_what_the_rounds_select",  # tail_max_per_slice
        "test_every_distribution_by_key_count_selects_what_the_rounds_select",  # tail_min_keys
    ),
    "test_front.py": (
        "test_tagged_partial_sums_give_the_same_bits",  # tagged_parts
    ),
    "test_index_fixup.py": (
        "test_the_waits_beside_the_plan_give_the_same_bits",  # waits_aside
        "test_one_poller_a_cta_gives_the_same_bits",  # one_poller
    ),
    "test_group_max.py": (
        "test_one_request_of_eight_rows_writes_every_groups_maximum",  # memory modes
        "test_sel_h1_skipping_groups_lists_what_the_spans_loop_lists",  # group_skip
        "test_one_pair_chains_maxima_a_chain_behind_are_the_same_bits",  # defer_narrow_gmax
        "test_the_fused_tail_by_key_count_selects_what_the_rounds_select",  # tail_min_keys
    ),
    "test_index_score_pipeline.py": (
        "test_keys_in_shared_memory_score_as_the_register_path",  # ss_keys
        "test_sm90a_keys_in_shared_memory_ptx",  # ss_keys
        "test_deferred_stores_give_the_same_bits",  # defer_stores
        "test_warpgroup_turns_give_the_same_bits",  # turns
        "test_head_sum_on_mma_sync_gives_the_same_bits",  # sum_mma=mma_sync
        "test_grouped_first_digit_counts_give_the_same_histograms",  # grouped_hist
        "test_split_pairs_on_four_warpgroups_give_the_same_bits",  # split_pairs
        "test_one_pair_alternating_scores_are_bit_identical_to_chain_wait_epilogue",
        "test_pipelined_scores_are_bit_identical_to_the_one_chain_path",
        "test_keys_through_tma_give_the_same_bits",  # tma keys
        "test_warm_first_asks_for_the_first_pages_read",  # warm_first
    ),
}


@pytest.hookimpl(tryfirst=True)  # before the `-m 'not slow'` deselection
def pytest_collection_modifyitems(config, items):
    """Variant tests (VARIANT_TESTS): every case past a test's first is marked slow; GPU and
    emulator tests skip (visibly, with a reason) where their machine is absent."""
    seen, modules = set(), {}
    for item in items:
        fn, base = getattr(item, "originalname", item.name), os.path.basename(str(item.fspath))
        if getattr(item, "module", None) is not None:
            modules[base] = item.module
        if fn in VARIANT_TESTS.get(base, ()):
            if fn in seen:
                item.add_marker(pytest.mark.slow)
            seen.add(fn)
    # a renamed test would silently run every case again: each name must be a test function
    # of its module (not merely collected: a run of one test collects the others of no file)
    missing = {n for f, m in modules.items() for n in VARIANT_TESTS.get(f, ())
               if not callable(getattr(m, n, None))}
    if missing:
        raise pytest.UsageError(f"conftest.VARIANT_TESTS names no such test: {sorted(missing)}")
    _skip_absent_machines(items)


def _skip_absent_machines(items):
    """GPU and emulator tests skip (visibly, with a reason) where their machine is absent."""
    have_gpu = False
    try:
        import torch
        have_gpu = torch.cuda.is_available()
    except Exception:
        pass
    have_emu = bool(os.environ.get("MONOKERNEL_TINYGRAD"))
    for item in items:
        if "gpu" in item.keywords and not have_gpu:
            item.add_marker(pytest.mark.skip(reason="no CUDA GPU on this machine"))
        if "emulator" in item.keywords and not have_emu:
            item.add_marker(pytest.mark.skip(reason="MONOKERNEL_TINYGRAD names no tinygrad tree"))


PTXAS_PATHS = ("/usr/local/cuda/bin/ptxas", "/usr/local/bin/ptxas")


def ptxas_report(ptx: str, arch: str = "sm_90a"):
    """ptxas -v's stderr for `ptx` where a ptxas is installed (None elsewhere: the caller's
    check then rests on the PTX alone); fails the test if ptxas rejects the PTX."""
    import subprocess
    import tempfile
    exe = next((p for p in PTXAS_PATHS if os.path.exists(p)), None)
    if exe is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        out = subprocess.run([exe, f"-arch={arch}", "-v", src, "-o", os.path.join(d, "k.o")],
                             capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stderr


# local memory an sm_90a rows-8 index build may hold in its persistent job loop, outside
# every inner loop (IndexScore.narrow_prefetch: 4 bytes, reloaded once a job; the selection's
# lean listing loop, SelectConfig.lean_scan: 16 more, measured faster with them, bench/
# NOTES.md v22); a key or scan loop holds none (tools.sass.inner_loop_spills, where nvdisasm
# is installed)
JOB_LOOP_SPILL_BYTES = 20
# ... and the fused index's at rows 8 with its refined first digits (on by default on sm_90a,
# stages.index.FINE_DIGITS_ON_NVIDIA: 36 bytes with the fold, 40 without), none in a loop of
# the job loop either (checked with nvdisasm 13.5, bench/NOTES.md v31)
INDEX_JOB_LOOP_SPILL_BYTES = 40


def check_job_loop_spills(report: str, ptx: str, limit: int = JOB_LOOP_SPILL_BYTES):
    """ptxas's report of `ptx`: at most `limit` bytes of spill stores, none of them (where
    nvdisasm is installed) inside a loop of the job loop."""
    import re
    from tools import sass
    spilled = int(re.search(r"(\d+) bytes spill stores", report).group(1))
    assert spilled <= limit, report
    if spilled and sass.find_tool("nvdisasm"):
        assert not sass.inner_loop_spills(*sass.parse(sass.disassemble(ptx))), report


def gemv_ys(inp, builds, *, N, K, R, ksplit=1, mode="random", seed=0):
    """y of gemv_mma built with each keyword set in `builds` (2 waves, the interpreter), each
    run on a NaN-poisoned copy of y (and fresh split scratch): the proof GEMV's variants
    compared bit for bit by the tests that add one."""
    from monokernel import interp
    from monokernel.proofs import gemv_mma
    ys = []
    for kw in builds:
        kern = gemv_mma.build("interp", N=N, K=K, R=R, waves=2, ksplit=ksplit, **kw)
        run_inp = dict(inp, y=np.full_like(inp["y"], np.nan),
                       **({} if ksplit == 1 else gemv_mma.scratch(N, ksplit, L=32)))
        interp.run(kern, run_inp, grid=N // 16 * ksplit, mode=mode, seed=seed)
        ys.append(run_inp["y"])
    return ys
