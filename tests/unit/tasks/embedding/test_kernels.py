"""The kernels that ran: a candidate labelled int8 whose engine ran fp32 GEMMs is rejected naming the count; mixed
precision is judged on the layers meant to be quantized; ORT's profile is read into GEMM kinds; the report shows the
kernel mix."""

import sys
from collections import Counter
from pathlib import Path

import numpy as np
from accuracy_helpers import B, EngineWorker, verifying_task, words

from infertune.config import Candidate, TuneConfig
from infertune.engines.kernels import kind_of, mix, ort_counts
from infertune.tasks.embedding.kernels import verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fixtures"))
import report_inputs as inputs  # noqa: E402


def _int8(**opts: str) -> Candidate:
    return Candidate(backend="fake", precision="int8", options=tuple(sorted(opts.items())), batching=B)


def test_an_int8_candidate_whose_gemms_ran_fp32_is_rejected_naming_the_count():
    why = verdict(_int8(), mix(Counter(fp32=36), Counter(fp32=12), 90_000_000, "torch.profiler", []))
    assert why.startswith("int8 requested, 0 of 36 GEMMs ran int8")
    # torch.ao keeps the pooler's Linear in fp32: 36 of 37 is quantized
    assert verdict(_int8(), mix(Counter(int8=36, fp32=1), Counter(), 1, "torch.profiler", [])) == ""
    # under half ran int8: rejected, the mix named
    assert "17 of 36 GEMMs ran int8: 19 fp32, 17 int8" in verdict(
        _int8(), mix(Counter(int8=17, fp32=19), Counter(), 1, "x", []))


def test_mixed_precision_is_judged_on_the_layers_meant_to_be_quantized():
    keep = tuple(f"layer.{i}" for i in range(20))
    mixed = Candidate(backend="onnxruntime", precision="mixed", quant="ort-dynamic", keep_high=keep)
    # 20 of 36 kept high: 16 meant int8, 16 ran int8
    assert verdict(mixed, mix(Counter(int8=16, fp32=20), Counter(), 1, "onnxruntime profile", [])) == ""
    why = verdict(mixed, mix(Counter(int8=4, fp32=32), Counter(), 1, "onnxruntime profile", []))
    assert why.startswith("int8 requested, 4 of 36 GEMMs ran int8 (16 meant to run it, 20 kept high)")


def test_unquantized_or_unprofiled_candidates_are_not_judged():
    fp32 = Candidate(backend="torch-eager", precision="fp32")
    assert verdict(fp32, mix(Counter(fp32=36), Counter(), 1, "torch.profiler", [])) == ""
    assert verdict(_int8(), None) == "" and verdict(_int8(), {"error": "boom"}) == ""
    assert verdict(_int8(), mix(Counter(), Counter(), 1, "torch.profiler", [])) == ""  # nothing seen: no verdict


def test_kinds_of_dtype_names():
    assert [kind_of(d) for d in ("float", "c10::BFloat16", "c10::Half", "u8", "i8", "f8e4m3", "f32", "bf16")] == [
        "fp32", "bf16", "fp16", "int8", "int8", "fp8", "fp32", "bf16"]


def test_ort_profile_counts_weight_gemms_by_kind_and_attention_apart():
    def node(op, *inputs):
        return {"cat": "Node", "name": f"{op}_1_kernel_time",
                "args": {"op_name": op, "provider": "CPUExecutionProvider", "input_type_shape": list(inputs)}}

    events = [node("DynamicQuantizeMatMul", {"float": [2, 16, 384]}, {"float": [384]}),
              node("MatMulIntegerToFloat", {"uint8": [2, 16, 384]}, {"float": []}),
              node("MatMul", {"float": [2, 16, 384]}),  # the weight is prepacked: not listed
              node("FusedMatMul", {"float": [2, 12, 16, 32]}, {"float": [2, 12, 32, 16]}),  # attention
              node("Softmax", {"float": [2, 12, 16, 16]}), {"cat": "Session", "name": "model_run"}]
    gemms, attention, examples = ort_counts(events)
    assert gemms == Counter(int8=2, fp32=1) and attention == Counter(fp32=1)
    assert examples[0] == "DynamicQuantizeMatMul (CPUExecutionProvider)"


def test_verification_rejects_an_int8_engine_that_reports_fp32_gemms():
    texts = [words(np.random.default_rng(i), 5 + i) for i in range(24)]
    task = verifying_task(TuneConfig(), texts)
    ref = Candidate(backend="fake", batching=B)
    assert task.verify(EngineWorker(ref, texts), ref)[1]  # the reference: verified first
    lying = _int8(gemms="fp32:36")
    acc, ok, why = task.verify(EngineWorker(lying, texts), lying)
    assert acc.cosine_min > 0.9999 and not ok  # its answers are right; what ran is not int8
    assert why.startswith("int8 requested, 0 of 36 GEMMs ran int8: 36 fp32 (fake)")
    honest = _int8(gemms="int8:36")
    assert task.verify(EngineWorker(honest, texts), honest)[1]


def test_report_shows_the_kernel_mix_per_engine(tmp_path):
    from infertune.tasks.embedding.report import write_report

    res = inputs.tune_with_kernels()
    page = write_report(res, tmp_path / "report.html").read_text()
    section = page[page.index('<h2 id="kernels">'):page.index("</table>", page.index('<h2 id="kernels">'))]
    assert "36 fp32" in section and "12 fp32" in section and "aten::addmm" in section and "85.8" in section
    engines = {r.name.rsplit("/", 1)[0] for r in res.candidates if r.status not in ("skipped", "failed")}
    assert section.count("<tr") - 1 == len(engines)  # one row per engine, not per batching variant
    assert 'id="kernels"' not in write_report(inputs.tune(), tmp_path / "none.html").read_text()
