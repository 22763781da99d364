import pytest

from spec import CONFIGS, BuildSpec, SpecError, build_matrix, config


def test_glm5_numbers_match_the_model_notes():
    c = config("glm5")
    assert (c.hidden, c.q_lora_rank, c.kv_lora_rank, c.qk_rope, c.index_heads) == (6144, 2048, 512, 64, 32)
    assert c.front_out == 2624
    assert c.mla_cache_bytes("fp8") == 656 and c.mla_cache_bytes("bf16") == 1152
    assert c.index_key_bytes == 132


def test_index_sharing_layers_of_glm52():
    c = config("glm5.2")
    own = [i for i in range(78) if c.runs_indexer(i)]
    assert own == [0, 1, 2] + list(range(6, 78, 4)) and len(own) == 21
    assert all(config("glm5").runs_indexer(i) for i in range(78))


def test_tiny_keeps_the_structure():
    t = config("tiny")
    assert t.index_topk == 2048 and t.max_context >= 8192 and t.front_k_splits >= 2


@pytest.mark.parametrize("kw, bad", [(dict(rows=3), "rows 3"), (dict(tp=6), "TP 6"),
                                     (dict(target="gfx1100"), "gfx1100"), (dict(kv="int4"), "int4")])
def test_bad_spec_is_a_clear_error(kw, bad):
    with pytest.raises(SpecError, match=bad):
        BuildSpec.make("glm5", **kw)


def test_unknown_config_is_named():
    with pytest.raises(ValueError, match="glm9"):
        config("glm9")


def test_tp_defaults_and_matrix():
    assert BuildSpec.make("tiny").tp == 1 and BuildSpec.make("glm5").tp == 8
    m = build_matrix(["glm5"], [8], [2, 4, 8], ["fp8"], ["gfx950", "gfx942"])
    assert len(m) == 6 and m[0].path == "glm5/tp8/r2/fp8"
    assert set(CONFIGS) >= {"glm5", "glm5.1", "glm5.2", "glm5.3", "tiny"}
