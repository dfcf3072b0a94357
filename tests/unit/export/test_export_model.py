"""`infertune export` writes a model that gives the original's vectors in every length bucket of the
workload (cosine >= 0.9999 each input), for ONNX, OpenVINO and a TorchScript .pt traced from MiniLM; a state_dict
without --config and a pickled model are refused with one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infertune.errors import InfertuneError
from infertune.export.run import ExportConfig, export
from infertune.models.resolve import resolve_model

SRC = str(Path(__file__).parents[3] / "src")


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    """40 sample inputs spread over the length buckets (short ones and ones over MiniLM's 256 tokens)."""
    from infertune.workloads.texts import load_workload

    items = load_workload(None).items
    items = sorted(items, key=len)
    pick = items[:: max(1, len(items) // 40)][:40]
    f = tmp_path_factory.mktemp("wl") / "w.jsonl"
    f.write_text("".join(json.dumps({"input": t}) + "\n" for t in pick))
    return f


@pytest.mark.parametrize("to", ["onnx", "openvino"])
def test_export_minilm_checks_every_bucket(to, workload, tmp_path):
    r = export(ExportConfig(model="minilm", to=to, workload=workload, out=tmp_path / to))
    assert r.passed and len(r.buckets) >= 4 and all(b.min_cosine >= 0.9999 for b in r.buckets)
    assert Path(r.path).exists() and r.opset == 17
    assert r.inputs == ["input_ids", "attention_mask", "token_type_ids"]
    assert r.dynamic_axes["input_ids"] == {"0": "batch", "1": "sequence"}
    rep = json.loads((tmp_path / to / "report.json").read_text())
    assert rep["min_cosine"] == r.min_cosine and rep["buckets"][0]["items"] > 0
    if to == "onnx":
        subprocess.run(["bash", "-n", r.tensorrt_script], check=True)


def _traced(tmp_path: Path) -> Path:
    import torch
    from transformers import AutoModel

    src = resolve_model("minilm").path
    body = AutoModel.from_pretrained(src, attn_implementation="eager").eval()

    class Traced(torch.nn.Module):  # what a user's trace returns: per-token states, unpooled
        def __init__(self):
            super().__init__()
            self.body = body

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.body(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    model = Traced().eval()
    ids = torch.ones(2, 12, dtype=torch.long)
    d = tmp_path / "ts"
    d.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "config.json"):
        shutil.copy(src / f, d / f)
    with torch.no_grad():
        torch.jit.trace(model, (ids, torch.ones_like(ids), torch.zeros_like(ids))).save(str(d / "model.pt"))
    return d / "model.pt"


def test_torchscript_pt_exports_and_verifies(workload, tmp_path):
    pt = _traced(tmp_path)
    r = export(ExportConfig(model=str(pt), to="onnx", workload=workload, out=tmp_path / "out"))
    assert r.source == "torchscript" and r.passed and all(b.min_cosine >= 0.9999 for b in r.buckets)
    assert r.inputs == ["input_ids", "attention_mask", "token_type_ids"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = f"import sys; sys.argv = ['infertune', *{list(args)!r}]; from infertune.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})


def test_state_dict_without_config_and_pickled_model_are_one_line(tmp_path):
    import torch

    sd = tmp_path / "weights.pt"
    torch.save({"layer.weight": torch.ones(2, 2)}, sd)
    r = _cli("export", str(sd), "--to", "onnx", "--out", str(tmp_path / "o1"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and "Loading" not in ln]
    assert r.returncode == 2 and len(lines) == 1 and "--config" in lines[0] and "state_dict" in lines[0], r.stderr
    pickled = tmp_path / "model.pth"
    torch.save(torch.nn.Linear(2, 2), pickled)
    with pytest.raises(InfertuneError, match=r"unsafe.*TorchScript"):
        export(ExportConfig(model=str(pickled), to="onnx", out=tmp_path / "o2"))


def test_a_causal_lm_gets_the_tensorrt_llm_script_and_no_onnx(tmp_path):
    llama = Path(__file__).parents[1] / "configs" / "llama-3-8b.json"
    r = export(ExportConfig(model=str(llama), out=tmp_path / "llama"))
    assert r.path is None and r.buckets == [] and "model.onnx" not in r.files
    text = Path(r.tensorrt_script).read_text()
    assert "trtllm-build" in text and "trtllm-serve" in text and "trtexec" not in text
    subprocess.run(["bash", "-n", r.tensorrt_script], check=True)
