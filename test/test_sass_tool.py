"""tools/sass.py: the control-word decoder on words ptxas wrote for the scoring loop (checked
against the loop's behaviour: the key loads set scoreboard 5, the loop's first instruction
waits for it), the loop finder on a small listing, and the CLI's clear error without ptxas /
nvdisasm. The full run (ptxas + nvdisasm) is exercised where they are installed."""
import sys

import pytest

from tools import sass

LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;     /* 0x00000a0000017a02 */
                                                              /* 0x000fe40000000f00 */
.L_x_1:
        /*0010*/                   IMAD.MOV.U32 R181, RZ, RZ, R20 ;     /* 0x000000ffffb57224 */
                                                              /* 0x020fe200078e0014 */
        /*0020*/                   WARPGROUP.ARRIVE ;     /* 0x00000000000079c5 */
                                                              /* 0x003fc80000000000 */
        /*0030*/                   LDG.E R170, desc[UR16][R26.64] ;     /* 0x000000101aaa7981 */
                                                              /* 0x000366000c1e1900 */
        /*0040*/              @!P0 STG.E desc[UR16][R240.64+0x128300], R31 ;     /* 0x000000101aaa7981 */
                                                              /* 0x000fe2000c101910 */
        /*0050*/              @P1 BRA `(.L_x_1) ;     /* 0x0000000000001947 */
                                                              /* 0x000fea000383ffff */
"""


def test_control_words_decode_as_the_scoring_loop_uses_them():
    assert sass.decode_control(0x020FE200078E0014) == (1, None, None, frozenset({5}))
    assert sass.decode_control(0x003FC80000000000) == (4, None, None, frozenset({0, 1}))
    assert sass.decode_control(0x000366000C1E1900) == (3, 5, 1, frozenset())


def test_loops_and_their_statistics_from_a_listing():
    instrs, labels = sass.parse(LISTING)
    assert [x.addr for x in instrs] == [0x0, 0x10, 0x20, 0x30, 0x40, 0x50]
    assert labels == {".L_x_1": 0x10}
    (body,) = sass.loops(instrs, labels)
    row = sass.loop_stats(body)
    assert row["instructions"] == 5 and row["from"] == "0x10" and row["to"] == "0x50"
    assert row["LDG"] == 1 and row["STG"] == 1 and row["spill"] == 0  # predicated STG counted
    assert row["stall clocks"] == sum(x.stall for x in body)
    assert row["scoreboard waits"] == 2
    assert sass.loops(instrs, labels, min_len=6) == []


def test_a_loops_listing_and_opcode_counts():
    instrs, labels = sass.parse(LISTING)
    (body,) = sass.loops(instrs, labels)
    text = sass.listing(body).splitlines()
    assert len(text) == 5 and text[0].startswith("0x00010") and "IMAD.MOV.U32" in text[0]
    assert text[0].split()[1:3] == ["1", "5"]  # one stall clock, waits for scoreboard 5
    assert text[2].split()[1:3] == ["3", "-"]  # the load: no wait
    assert dict(sass.opcode_counts(body)) == {"IMAD.MOV.U32": 1, "WARPGROUP.ARRIVE": 1,
                                              "LDG.E": 1, "STG.E": 1, "BRA": 1}


def _line(addr, text, control="0x000fe40000000f00"):
    return (f"        /*{addr:04x}*/                   {text} ;     /* 0x0000000000000000 */\n"
            f"                                                              /* {control} */\n")


def _nested(spill_inner: bool) -> str:
    """A job loop (.L_x_1) around a key loop (.L_x_2): a reload in the job loop, and
    (spill_inner) one in the key loop too."""
    return ("".join([_line(0x0, "STL [R1], R152")]) + ".L_x_1:\n" + _line(0x10, "LDL R152, [R1]")
            + ".L_x_2:\n" + _line(0x20, "LDL R153, [R1+0x4]" if spill_inner else "IADD3 R2, R2, 0x1, RZ")
            + _line(0x30, "@P1 BRA `(.L_x_2)") + _line(0x40, "@P0 BRA `(.L_x_1)"))


def test_inner_loop_spills_ignore_the_job_loop():
    """Spill code in the largest loop (a persistent kernel's job loop: one reload a job) is
    allowed; in any loop inside it (a key loop: every step) it is reported."""
    instrs, labels = sass.parse(_nested(False))
    assert len(sass.loops(instrs, labels)) == 2
    assert sass.inner_loop_spills(instrs, labels) == []
    instrs, labels = sass.parse(_nested(True))
    assert [x.text for x in sass.inner_loop_spills(instrs, labels)] == ["LDL R153, [R1+0x4]"]


def test_missing_tools_are_a_clear_error(monkeypatch, capsys, tmp_path):
    ptx = tmp_path / "k.ptx"
    ptx.write_text(".version 8.4\n.target sm_90a\n")
    monkeypatch.setenv("PTXAS", str(tmp_path / "no-ptxas"))
    assert sass.main(["--ptx", str(ptx)]) == 2
    assert "ptxas" in capsys.readouterr().err


def test_a_real_loop_where_ptxas_and_nvdisasm_are_installed():
    if sass.find_tool("ptxas") is None or sass.find_tool("nvdisasm") is None:
        pytest.skip("ptxas / nvdisasm not installed")
    from monokernel.build import build_many
    from spec import BuildSpec
    from stages.index import index_scoring_launch
    L = index_scoring_launch(BuildSpec.make("glm5", rows=2, target="sm_90a"))
    (art,) = build_many([L.kernel("sm_90a")])
    instrs, labels = sass.parse(sass.disassemble(art.data.decode()))
    rows = [sass.loop_stats(b) for b in sass.loops(instrs, labels, 100)]
    assert any(r["GMMA"] >= 4 and r["LDG"] >= 5 for r in rows), rows  # the key loop


def test_find_tool_looks_in_the_nvidia_wheels_bin_folders(tmp_path, monkeypatch):
    """A tool that only an nvidia-* wheel installs (the test extra's nvdisasm) is found in
    the wheel's bin folder; $NAME naming no file finds nothing."""
    import types
    exe = tmp_path / "nvidia" / "cu99" / "bin" / "monokernel-fake-tool"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setitem(sys.modules, "nvidia", types.SimpleNamespace(__path__=[str(exe.parents[2])]))
    monkeypatch.delenv("MONOKERNEL-FAKE-TOOL", raising=False)
    assert sass.find_tool("monokernel-fake-tool") == str(exe)
    monkeypatch.setenv("MONOKERNEL-FAKE-TOOL", str(tmp_path / "none"))
    assert sass.find_tool("monokernel-fake-tool") is None
