"""bench/ncu_sass.py: reading an Nsight Compute SASS source page (CSV, as `ncu --page source
--csv --print-source sass` writes it): the stall totals, the regions of instructions
executed alike (a prologue, a loop), a span's hottest instructions."""
import csv
import gzip

from bench import ncu_sass

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
          "stall_long_sb", "stall_wait", "stall_long_sb (Not Issued)"]


def _page(path, rows):
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["Kernel Name", "k"])
        w.writerow(HEADER)
        for r in rows:
            w.writerow(r)


def test_regions_stalls_and_spans(tmp_path, capsys):
    rows = [[f"0x{i:x}", f"MOV R{i}, RZ", "1", "32", "0", "1", "0"] for i in range(4)]  # once
    rows += [[f"0x{i:x}", "LDG.E R2, [R4]" if i == 5 else f"IADD3 R{i}", "40" if i == 5 else "2",
              "3200", "38" if i == 5 else "0", "2", "38"] for i in range(4, 10)]  # a loop
    path = tmp_path / "k.csv.gz"
    _page(str(path), rows)
    data, ix, stalls = ncu_sass.load(str(path))
    assert stalls == ["stall_long_sb", "stall_wait"]  # the Not-Issued twins left out
    total = sum(int(r[ix[ncu_sass.SAMPLES]]) for r in data)
    assert total == 4 + 40 + 5 * 2
    (pro, loop) = ncu_sass.regions(data, ix, total)
    assert pro[:2] == (0, 3) and loop[:2] == (4, 9) and loop[3] == 3200
    assert abs(loop[2] - 50 / total) < 1e-12
    assert ncu_sass.main([str(path), "--span", "4", "9", "--min", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "long_sb=" in out and "LDG.E R2, [R4]" in out and "IADD3" not in out.split("span")[1]
