"""Share of the peak per candidate (tasks/embedding/peak.py): achieved Linear TFLOP/s from FLOPs per token and real
tokens/s, divided by the GPU's dense peak for the candidate's precision, found by the name torch reports."""

import json
import re
import sys
from pathlib import Path

import pytest

from infertune.hardware.gpu_specs import find_gpu
from infertune.results import CandidateResult, Latency, Measurement
from infertune.tasks.embedding.peak import (
    candidate_peak,
    linear_flops_per_token,
    peak_line,
    peak_precision,
    peak_record,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fixtures"))
import report_inputs as inputs  # noqa: E402

# a BERT-base shape: 12 layers, hidden 768, intermediate 3072
BERT = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512,
        "type_vocab_size": 2}
BERT_LINEAR_FLOPS = 2.0 * 12 * (4 * 768 * 768 + 2 * 768 * 3072)  # q, k, v, o and the two MLP matmuls per layer


def _measured(precision: str = "bf16", quant: str | None = None, tokens_per_s: float = 2.5e6) -> CandidateResult:
    m = Measurement(items_per_s=1000.0, items_per_s_runs=[1000.0], items_per_s_spread=(1000.0, 1000.0),
                    tokens_per_s=tokens_per_s * 0.9, padded_tokens_per_s=tokens_per_s * 1.3, latency_ms=Latency(),
                    batches_per_pass=4, items_per_pass=1000, padding_ratio=1.3, passes=8,
                    tokens_per_s_best=tokens_per_s)
    return CandidateResult(name=f"torch-compile/{precision}/tokens-16384", status="ok", measurement=m,
                           candidate={"backend": "torch-compile", "precision": precision, "quant": quant})


def _config_dir(tmp_path: Path, cfg: dict = BERT) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def test_flops_per_token_are_two_per_linear_weight(tmp_path):
    flops, why = linear_flops_per_token(_config_dir(tmp_path))
    assert why is None and flops == BERT_LINEAR_FLOPS


@pytest.mark.parametrize("reported, entry", [("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H200", "H200-SXM")])
@pytest.mark.parametrize("precision, quant, key", [
    ("bf16", None, "bf16_tflops"), ("fp16", None, "fp16_tflops"), ("fp8", "torchao-fp8", "fp8_tflops"),
    ("int8", "torchao-int8-dyn", "int8_tops"),
    ("mixed", "torchao-fp8", "fp8_tflops"), ("mixed", "torchao-int8-dyn", "int8_tops")])
def test_fraction_is_achieved_linear_tflops_over_the_dense_peak_of_the_precision(reported, entry, precision, quant,
                                                                                 key):
    r = _measured(precision, quant)
    p = candidate_peak(r, reported, (BERT_LINEAR_FLOPS, None))
    achieved = BERT_LINEAR_FLOPS * r.measurement.tokens_per_s_best / 1e12  # the best pass's real tokens
    peak = find_gpu(entry)[key]
    assert p.gpu == entry and p.gpu_reported == reported and p.note is None
    assert p.precision == (precision if precision != "mixed" else key.split("_")[0])
    assert p.linear_tflops == pytest.approx(achieved) and p.peak_tflops == peak
    assert p.fraction == pytest.approx(achieved / peak)


def test_the_h100_bf16_share_is_achieved_over_its_table_figure():
    p = peak_record(1e8, 2.5e6, "bf16", "NVIDIA H100 80GB HBM3")  # 250 TFLOP/s
    assert p.fraction == pytest.approx(250 / find_gpu("H100-SXM")["bf16_tflops"])
    assert 0.25 < p.fraction < 0.26  # the datasheet's dense bf16 figure is about 989 TFLOP/s


def test_a_gpu_not_in_the_table_keeps_the_achieved_figure_and_says_why():
    p = peak_record(BERT_LINEAR_FLOPS, 1e6, "bf16", "NVIDIA Imaginary X1")
    assert p.linear_tflops == pytest.approx(BERT_LINEAR_FLOPS * 1e6 / 1e12)
    assert p.fraction is None and p.peak_tflops is None and p.gpu is None
    assert "'NVIDIA Imaginary X1' is not in the GPU spec table" in p.note
    assert "no share of the peak" in peak_line(_measured().model_copy(update={"peak": p}))


def test_fp32_and_a_missing_key_are_notes_not_errors():
    fp32 = peak_record(BERT_LINEAR_FLOPS, 1e6, "fp32", "NVIDIA H100 80GB HBM3")
    assert fp32.fraction is None and "no dense fp32" in fp32.note and fp32.linear_tflops is not None
    t4 = peak_record(BERT_LINEAR_FLOPS, 1e6, "bf16", "Tesla T4")  # the T4 has no bf16
    assert t4.gpu == "T4" and t4.fraction is None and "no bf16 figure" in t4.note


def test_no_config_json_means_no_flops_and_a_note(tmp_path):
    flops = linear_flops_per_token(tmp_path)
    assert flops[0] is None and "config.json" in flops[1]
    p = candidate_peak(_measured(), "NVIDIA H200", flops)
    assert p.linear_tflops is None and p.fraction is None and p.peak_tflops is not None
    assert p.note == flops[1]


def test_no_gpu_or_no_measurement_means_no_peak():
    assert candidate_peak(_measured(), None, (BERT_LINEAR_FLOPS, None)) is None  # a CPU run
    unmeasured = CandidateResult(name="torch-eager/fp16/tokens-16384", status="skipped")
    assert candidate_peak(unmeasured, "NVIDIA H200", (BERT_LINEAR_FLOPS, None)) is None


def test_mixed_precision_uses_its_quantized_kind():
    assert peak_precision({"precision": "mixed", "quant": "torchao-fp8"}) == "fp8"
    assert peak_precision({"precision": "mixed", "quant": "ort-dynamic"}) == "int8"
    assert peak_precision({"precision": "bf16"}) == "bf16"


def test_the_winner_line_names_share_gpu_precision_and_both_figures():
    r = _measured("bf16", tokens_per_s=2.5e6)
    r.peak = candidate_peak(r, "NVIDIA H100 80GB HBM3", (1e8, None))
    peak = find_gpu("H100-SXM")["bf16_tflops"]
    share = round(250 / peak * 100)
    assert peak_line(r) == (f"{share}% of the H100-SXM's bf16 peak (250 of {peak:g} TFLOP/s in Linear layers, "
                            "best of n=8 passes)")
    r8 = _measured("int8", "torchao-int8-dyn")
    r8.peak = candidate_peak(r8, "NVIDIA H200", (1e8, None))
    assert re.search(r"int8 peak \(250 of [\d.]+ TOPS in Linear layers", peak_line(r8))


def _task(device: str, tmp_path: Path, gpu_name: str | None):
    from types import SimpleNamespace

    from infertune.config import TuneConfig
    from infertune.results import EnvFingerprint, TuneResult
    from infertune.tasks.embedding.task import EmbeddingTask

    task = EmbeddingTask(TuneConfig(device=device), None, None)
    task.spec = SimpleNamespace(path=str(_config_dir(tmp_path)))
    env = EnvFingerprint(gpu=[{"index": 0, "name": gpu_name}] if gpu_name else [])
    task.result = TuneResult(model="bert-shape", config={}, environment=env)
    return task


def _summarized(task, tokens_per_pass: int = 400_000, wall_s: float = 0.5):
    from types import SimpleNamespace

    from infertune.config import Candidate

    cand = Candidate(backend="torch-eager", precision="bf16")
    run = SimpleNamespace(results={cand.id: CandidateResult(name=cand.id, status="ok",
                                                            candidate=cand.model_dump(mode="json"))})
    p = {"items": 2000, "wall_s": wall_s, "latency_ms": [5.0, 6.0], "tokens": tokens_per_pass,
         "padded_tokens": tokens_per_pass * 2, "padded_per_batch": [tokens_per_pass], "batches": 2}
    slow = {**p, "wall_s": wall_s * 2}
    return task.summarize(run, cand, [{"passes": [slow, p], "peak_rss_mb": 1.0, "peak_gpu_mb": 2.0}])


def test_tune_records_the_peak_of_a_gpu_candidate_from_its_best_pass(tmp_path):
    got = _summarized(_task("cuda", tmp_path, "NVIDIA H100 80GB HBM3"))
    p = got["peak"]
    assert got["measurement"].tokens_per_s_best == pytest.approx(400_000 / 0.5)  # the faster pass
    assert p.tokens_per_s == pytest.approx(400_000 / 0.5) and p.flops_per_token == BERT_LINEAR_FLOPS
    assert p.fraction == pytest.approx(BERT_LINEAR_FLOPS * 800_000 / 1e12 / find_gpu("H100-SXM")["bf16_tflops"])


def test_a_cpu_tune_records_no_peak(tmp_path):
    assert _summarized(_task("cpu", tmp_path, None))["peak"] is None


def test_a_gpu_tune_on_an_unknown_gpu_records_a_note(tmp_path):
    p = _summarized(_task("cuda", tmp_path, "NVIDIA Imaginary X1"))["peak"]
    assert p.fraction is None and p.linear_tflops is not None and "not in the GPU spec table" in p.note


def test_report_shows_the_peak_table_only_when_candidates_have_peaks(tmp_path):
    from infertune.tasks.embedding.report import write_report

    res = inputs.tune_gpu_with_peaks()
    page = write_report(res, tmp_path / "gpu.html").read_text()
    assert '<h2 id="peak">' in page and "% of peak" in page
    win = res.winner
    assert f"{win.peak.fraction * 100:.1f}%" in page and f"{win.peak.linear_tflops:,.1f} TFLOP/s" in page
    cpu = write_report(inputs.tune(), tmp_path / "cpu.html").read_text()
    assert 'id="peak"' not in cpu


def test_console_summary_prints_the_winners_share(capsys):
    from infertune.tasks.embedding.report import print_summary

    res = inputs.tune_gpu_with_peaks()
    print_summary(res)
    err = " ".join(capsys.readouterr().err.split())
    assert f"Winner's share of the GPU: {peak_line(res.winner)}." in err
    assert "of the H200-SXM's bf16 peak" in err
