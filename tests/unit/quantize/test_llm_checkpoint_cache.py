"""Checkpoints are made once per content: the key follows the model files, the recipe and the calibration texts,
and a made checkpoint is found again without llm-compressor."""

import json

import pytest

from infertune.errors import InfertuneError
from infertune.quantize.llm_checkpoint_cache import cached_checkpoint, checkpoint_key, group_size_for, recipe_for
from infertune.quantize.llm_checkpoint_rules import INT8, W4A16


def _model(d, hidden=576, inter=1536):
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"hidden_size": hidden, "intermediate_size": inter}))
    (d / "model.safetensors").write_bytes(b"weights")
    return d


def test_the_int4_group_is_the_widest_that_divides_every_linear_input(tmp_path):
    assert group_size_for(_model(tmp_path / "smol")) == 64  # 576 = 4.5 x 128
    assert group_size_for(_model(tmp_path / "llama", 4096, 14336)) == 128
    assert recipe_for(W4A16, tmp_path / "llama") == W4A16.recipe
    assert recipe_for(W4A16, tmp_path / "smol") != W4A16.recipe and recipe_for(INT8, tmp_path / "smol") == INT8.recipe
    with pytest.raises(InfertuneError, match="no int4 group size"):
        group_size_for(_model(tmp_path / "odd", 100, 300))


def test_the_key_follows_weights_recipe_and_calibration_text(tmp_path):
    m = _model(tmp_path / "m")
    cal = tmp_path / "train.json"
    cal.write_text('{"text": "a"}\n')
    k = checkpoint_key(m, INT8, INT8.recipe, cal)
    assert k == checkpoint_key(m, INT8, INT8.recipe, cal)
    assert k != checkpoint_key(m, W4A16, recipe_for(W4A16, m), cal)
    cal.write_text('{"text": "b"}\n')  # other traffic: another calibration split
    k2 = checkpoint_key(m, INT8, INT8.recipe, cal)
    assert k2 != k
    (m / "model.safetensors").write_bytes(b"other weights")
    assert checkpoint_key(m, INT8, INT8.recipe, cal) not in (k, k2)


def test_a_made_checkpoint_is_found_again_without_llm_compressor(tmp_path, monkeypatch):
    import infertune.quantize.llm_checkpoint_cache as cc

    m = _model(tmp_path / "m")
    cal = tmp_path / "train.json"
    cal.write_text('{"text": "a"}\n')
    made = []

    def fake_make(model, scheme, calib, out, venv=None, **kw):
        made.append(out)
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        rec = cc.CheckpointRecord(scheme=scheme.id, label=scheme.label, model=str(model), output=str(out),
                                  recipe=[], oneshot={}, n_calibration=1, calibration_file=str(calib), wall_s=1.0,
                                  size_bytes=2, quantization_config={}, versions={}, command="", log="")
        (out.parent / (out.name + ".infertune.json")).write_text(rec.model_dump_json())
        return rec

    monkeypatch.setattr(cc, "make_checkpoint", fake_make)
    p1, _, reused1 = cached_checkpoint(m, W4A16, cal, tmp_path / "cache")
    p2, rec, reused2 = cached_checkpoint(m, W4A16, cal, tmp_path / "cache")
    assert (reused1, reused2) == (False, True) and p1 == p2 and len(made) == 1
    assert p1.name.startswith("m-W4A16-G64-") and rec.scheme == "w4a16"
