"""make_checkpoint runs llm-compressor's oneshot in its own venv and records what it made. Here the venv is
a stand-in: a `bin/python` that runs this interpreter with a fake llmcompressor package first on the path, whose
oneshot writes a checkpoint directory (or fails, when asked to)."""

import json
import sys
import textwrap

import pytest

from infertune.errors import InfertuneError
from infertune.quantize.llm_checkpoint_make import RECORD_SUFFIX, find_llmc, make_checkpoint, with_group_size
from infertune.quantize.llm_checkpoint_rules import FP8, INT8, W4A16

FAKE = '''
import json, os, pathlib
def oneshot(**kw):
    if os.environ.get("FAKE_LLMC_KILL"):
        os.kill(os.getpid(), 9)
    if os.environ.get("FAKE_LLMC_FAIL"):
        for i in range(30):
            print(f"(1/31): Calibrating:  {i}%|##   | {i}/71 [00:01<00:05,  1.2it/s]", flush=True)
        raise RuntimeError("GPTQ: Hessian of model.layers.0.self_attn.q_proj is not positive definite")
    out = pathlib.Path(kw["output_dir"]); out.mkdir(parents=True)
    print("Quantizing model.layers.0 ...", flush=True)
    (out / "model.safetensors").write_bytes(b"0" * 4096)
    (out / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "compressed-tensors"}}))
    (out / "seen.json").write_text(json.dumps({k: v for k, v in kw.items() if k != "recipe"}
                                              | {"recipe": [repr(r) for r in kw["recipe"]]}))
'''
MOD = "class {0}:\n    def __init__(self, **kw): self.kw = kw\n    def __repr__(self): return '{0}' + repr(self.kw)\n"


@pytest.fixture
def venv(tmp_path):
    site = tmp_path / "site" / "llmcompressor"
    (site / "modifiers" / "quantization").mkdir(parents=True)
    (site / "modifiers" / "transform").mkdir()
    (site / "__init__.py").write_text(FAKE)
    (site / "modifiers" / "__init__.py").write_text("")
    (site / "modifiers" / "quantization" / "__init__.py").write_text(MOD.format("GPTQModifier")
                                                                      + MOD.format("QuantizationModifier"))
    (site / "modifiers" / "transform" / "__init__.py").write_text(MOD.format("SmoothQuantModifier"))
    py = tmp_path / "venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        PYTHONPATH={tmp_path / 'site'} exec {sys.executable} "$@"
        """))
    py.chmod(0o755)
    return tmp_path / "venv"


@pytest.fixture
def model(tmp_path):
    d = tmp_path / "SmolLM2"
    d.mkdir()
    (d / "config.json").write_text("{}")
    return d


def calib(tmp_path, n):
    f = tmp_path / "cal" / "train.json"
    f.parent.mkdir()
    f.write_text("".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(n)))
    return f


def test_makes_the_checkpoint_and_records_it_beside(venv, model, tmp_path):
    out = tmp_path / "SmolLM2-W8A8"
    rec = make_checkpoint(model, INT8, calib(tmp_path, 7), out, venv)
    seen = json.loads((out / "seen.json").read_text())
    assert seen["dataset_path"] == str(tmp_path / "cal") and seen["num_calibration_samples"] == 7
    assert seen["model"] == str(model) and seen["output_dir"] == str(out)
    assert [r.split("(")[0].split("{")[0] for r in seen["recipe"]] == ["SmoothQuantModifier", "GPTQModifier"]
    on_disk = json.loads((tmp_path / f"SmolLM2-W8A8{RECORD_SUFFIX}").read_text())
    assert on_disk == json.loads(rec.model_dump_json())
    assert rec.n_calibration == 7 and rec.scheme == "int8-w8a8" and rec.wall_s > 0
    assert rec.size_bytes == sum(p.stat().st_size for p in out.iterdir()) and rec.size_bytes > 4096
    assert rec.quantization_config == {"quant_method": "compressed-tensors"}
    assert rec.versions["llmcompressor"] == "absent"  # the fake has no distribution metadata: said, not invented
    assert "Quantizing model.layers.0" in (tmp_path / "SmolLM2-W8A8.log").read_text()


def test_a_failing_step_is_an_infertune_error_with_the_log_tail(venv, model, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LLMC_FAIL", "1")
    with pytest.raises(InfertuneError, match="not positive definite") as e:
        make_checkpoint(model, W4A16, calib(tmp_path, 3), tmp_path / "out", venv)
    assert "exit code 1" in str(e.value) and not (tmp_path / f"out{RECORD_SUFFIX}").exists()
    assert "Calibrating" not in str(e.value)  # 30 progress bars came last; the message skips them


def test_a_killed_step_says_so(venv, model, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LLMC_KILL", "1")
    with pytest.raises(InfertuneError, match="killed by signal 9"):
        make_checkpoint(model, W4A16, calib(tmp_path, 3), tmp_path / "out", venv)


def test_missing_venv_says_how_to_make_it(tmp_path, model, monkeypatch):
    monkeypatch.delenv("INFERTUNE_LLMC_VENV", raising=False)
    with pytest.raises(InfertuneError, match="make llmc-env"):
        find_llmc(tmp_path / "nope")
    with pytest.raises(InfertuneError, match="make llmc-env"):
        make_checkpoint(model, INT8, calib(tmp_path, 2), tmp_path / "o", tmp_path / "nope")


def test_inputs_are_checked_before_anything_runs(venv, model, tmp_path):
    with pytest.raises(InfertuneError, match="no config.json"):
        make_checkpoint(tmp_path / "empty", INT8, None, tmp_path / "o", venv)
    with pytest.raises(InfertuneError, match="calibration file"):
        make_checkpoint(model, W4A16, tmp_path / "none.json", tmp_path / "o", venv)
    rec = make_checkpoint(model, FP8, None, tmp_path / "fp8", venv)  # data-free: no calibration needed
    assert rec.n_calibration == 0 and "dataset" not in rec.oneshot


def test_group_size_override_keeps_int4_symmetric_groups(venv, model, tmp_path):
    mods = with_group_size(W4A16, 64)
    rec = make_checkpoint(model, W4A16, calib(tmp_path, 2), tmp_path / "g64", venv, recipe=mods)
    [gptq] = rec.recipe
    assert "scheme" not in gptq["args"] and gptq["args"]["ignore"] == ["lm_head"]
    w = gptq["args"]["config_groups"]["group_0"]["weights"]
    assert (w["num_bits"], w["group_size"], w["strategy"], w["symmetric"]) == (4, 64, "group", True)
