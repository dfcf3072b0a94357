"""`infertune export`: the model in a portable format, checked against the original on the user's inputs.

ONNX is written by the exporter tune uses (engines/onnx_export.py), OpenVINO IR is read from that ONNX and saved as the
OpenVINO backend saves it, and both are run through the backends' own Embedders for the check, so what export
writes is what tune measured. Next to the model: report.json (per-bucket cosine, opset, dynamic axes, inputs),
the tokenizer, and for ONNX a tensorrt.sh with the trtexec build for the workload's lengths. A causal LM gets
tensorrt-llm.sh instead (TensorRT-LLM builds its own engines from the checkpoint, not from ONNX).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from infertune.errors import InfertuneError
from infertune.export.config import ExportConfig, ExportResult

__all__ = ["ExportConfig", "ExportResult", "export"]

WORKSPACE_MIB = 4096


def _default_out(model: str, to: str) -> Path:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model.rstrip("/")).name.removesuffix(".pt").removesuffix(".pth"))
    return Path("exports") / f"{name or 'model'}-{to}"


def onnx_signature(path: Path) -> tuple[int, list[str], list[str], dict[str, dict[str, str]]]:
    """(opset, inputs, outputs, dynamic axes) read back from the written file."""
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=0)
    axes: dict[str, dict[str, str]] = {}
    for v in [*m.graph.input, *m.graph.output]:
        dims = {str(i): d.dim_param for i, d in enumerate(v.type.tensor_type.shape.dim) if d.dim_param}
        if dims:
            axes[v.name] = dims
    return opset, [i.name for i in m.graph.input], [o.name for o in m.graph.output], axes


class _Source:
    """The original model, however it was given: a spec (what the backends take), the tokenizer, the reference
    forward for one input, and how to write model.onnx."""

    def __init__(self, cfg: ExportConfig):
        from infertune.models.resolve import resolve_model

        self.cfg = cfg
        ref = resolve_model(cfg.model)
        self.kind = ref.format
        self.script = None
        if ref.format == "torch-file":  # any .pt / .pth: what it holds decides
            from infertune.export import torch_file

            kind, why = torch_file.kind_of(ref.path)
            if kind == "pickled-model":
                torch_file.refuse_pickled(ref.path, why)
            if kind == "state_dict":
                ref = resolve_model(str(torch_file.state_dict_model_dir(ref.path, cfg.config)))
                self.kind = "state_dict"
            else:
                self.kind = "torchscript"
                self._load_script(ref.path)
                return
        self._load_hf(ref)

    def _load_hf(self, ref) -> None:
        from infertune.models.embedding import embedding_spec, load_encoder, load_tokenizer

        self.spec = embedding_spec(ref, pooling=self.cfg.pooling, task=self.cfg.task)
        if self.kind == "state_dict":
            import dataclasses

            self.spec = dataclasses.replace(self.spec, name=self.cfg.model, source_format="state_dict")
        self.tokenizer = load_tokenizer(self.spec)
        self.model = load_encoder(self.spec, dtype="fp32")
        self.token_types = bool(getattr(self.model.config, "type_vocab_size", 0))
        self.names = ["input_ids", "attention_mask"] + (["token_type_ids"] if self.token_types else [])

    def _load_script(self, path: Path) -> None:
        import torch
        from transformers import AutoTokenizer

        from infertune.export.torch_file import input_names
        from infertune.models.embedding import EmbeddingSpec

        tdir = Path(self.cfg.tokenizer or path.parent).expanduser()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(tdir))
        except Exception as e:  # noqa: BLE001 - any loader failure is the user's missing tokenizer
            raise InfertuneError(f"{path} is TorchScript but {tdir} has no tokenizer it can load ({type(e).__name__}); "
                                 "pass --tokenizer DIR (the model's tokenizer files)") from e
        self.script = torch.jit.load(str(path), map_location="cpu").eval()
        self.names = input_names(self.script)
        unknown = [n for n in self.names if n not in ("input_ids", "attention_mask", "token_type_ids")]
        if unknown or "input_ids" not in self.names:
            raise InfertuneError(f"{path}: forward takes {', '.join(self.names)}; export handles text encoders "
                                 "taking input_ids [, attention_mask, token_type_ids]")
        self.token_types = "token_type_ids" in self.names
        limit = int(getattr(self.tokenizer, "model_max_length", 512) or 512)
        cfg_file = tdir / "config.json"
        if cfg_file.exists():
            limit = min(limit, int(json.loads(cfg_file.read_text()).get("max_position_embeddings", limit)))
        self.model = self.script
        self.spec = EmbeddingSpec(name=self.cfg.model, path=str(tdir), pooling=self.cfg.pooling or "mean",
                                  max_length=min(limit, 8192), source_format="torchscript")

    def reference(self):
        from infertune.export.check import torch_reference

        return torch_reference(self.model, self.spec.pooling, self.names, self.token_types,
                               call="script" if self.script is not None else "hf")

    def write_onnx(self, out: Path, dummy: dict[str, np.ndarray]) -> dict[str, Any]:
        from infertune.engines.onnx_export import export_encoder, export_torchscript

        if self.script is not None:
            return export_torchscript(self.script, self.names, self.spec.pooling, dummy, out, self.cfg.opset)
        return export_encoder(self.spec, out, self.cfg.opset, dummy=dummy)


def _embedder(cfg: ExportConfig, src: _Source, onnx_path: Path):
    """The backend's own Embedder on the exported file, as tune runs it."""
    import dataclasses

    spec = dataclasses.replace(src.spec, dim=src.spec.dim or 1)
    if cfg.to == "onnx":
        from infertune.engines.onnxruntime import OrtEmbedder

        return OrtEmbedder(spec, src.tokenizer, onnx_path, "cpu", {})
    import openvino as ov

    from infertune.engines.openvino import OpenVinoEmbedder

    return OpenVinoEmbedder(spec, src.tokenizer, ov.Core().read_model(str(onnx_path)), "cpu", {}, "fp32")


def _require(cfg: ExportConfig) -> None:
    from infertune.extras import installed, pip_install

    mods = ["torch", "transformers", "onnx", "onnxruntime"] + (["openvino"] if cfg.to == "openvino" else [])
    gone = [m for m in mods if not installed(m)]
    if gone:
        extras = ["torch", "onnx"] + (["openvino"] if cfg.to == "openvino" else [])
        raise InfertuneError(f"infertune export --to {cfg.to} needs {', '.join(gone)}, not installed here; run: "
                             f"{pip_install(extras)}")


def export(cfg: ExportConfig) -> ExportResult:
    """Export `cfg.model` to ONNX or OpenVINO IR, check it per length bucket of the workload, write the report."""
    t0 = time.perf_counter()
    _require(cfg)
    from infertune.models.kind import model_kind
    from infertune.models.resolve import resolve_model
    from infertune.workloads.texts import load_workload

    out = Path(cfg.out or _default_out(cfg.model, cfg.to))
    wl = load_workload(cfg.workload)
    ref = resolve_model(cfg.model)
    if ref.format != "torch-file" and model_kind(ref, cfg.task).task == "generate":
        from infertune.export.generator import export_generator

        return export_generator(cfg, ref, wl, out, t0)
    src = _Source(cfg)
    tok = src.tokenizer
    full = [len(x) for x in tok(list(wl.items), truncation=False)["input_ids"]]
    ids = tok(list(wl.items), truncation=True, max_length=src.spec.max_length)["input_ids"]
    out.mkdir(parents=True, exist_ok=True)
    longest = sorted(range(len(ids)), key=lambda i: -len(ids[i]))[:2]  # the export traces a real, padded batch
    work = Path(tempfile.mkdtemp(prefix="infertune-export-")) if cfg.to == "openvino" else out
    onnx_path = work / "model.onnx"
    try:
        from infertune.engines.base import Embedder

        collate = Embedder(src.spec, tok)
        collate.needs_token_types = src.token_types
        info = src.write_onnx(onnx_path, collate.collate([ids[i] for i in longest]))
        opset, inputs, outputs, axes = onnx_signature(onnx_path)
        emb = _embedder(cfg, src, onnx_path)
        from infertune.export.check import check_buckets

        buckets = check_buckets(ids, src.reference(), lambda rows: emb.forward(emb.collate(rows)))
        files = _write(cfg, emb, out, src)
    finally:
        if work is not out:
            shutil.rmtree(work, ignore_errors=True)
    worst = min(b.min_cosine for b in buckets)
    notes = [f"ONNX written in {info['export_s']} s ({info['size_mb']} MB); checked with "
             f"{'ONNX Runtime (CPU)' if cfg.to == 'onnx' else 'OpenVINO (CPU, f32)'} against PyTorch fp32, each input "
             "alone as the reference"]
    cap = src.spec.max_length
    over = sum(1 for n in full if n > cap)
    if over:
        notes.append(f"{over} of {len(full)} workload inputs are longer than the model's {cap} tokens and were "
                     "checked truncated, as serve truncates them (--truncate) or refuses them")
    script = None
    if cfg.to == "onnx":
        script = _tensorrt_script(cfg, out, [min(n, cap) for n in full], cap, tuple(inputs))
        files.append(script.name)
    else:
        notes.append("TensorRT reads ONNX, not OpenVINO IR: `--to onnx` writes the TensorRT build script too")
    result = ExportResult(
        model=cfg.model, source=src.kind, to=cfg.to, out=str(out),
        path=str(out / ("model.onnx" if cfg.to == "onnx" else "model.xml")), files=sorted(files), opset=opset,
        inputs=inputs, outputs=outputs, dynamic_axes=axes, pooling=src.spec.pooling, buckets=buckets,
        min_cosine=worst, min_cosine_required=cfg.min_cosine, passed=worst >= cfg.min_cosine, workload=wl.source,
        truncated_inputs=over, tensorrt_script=str(script) if script else None, notes=notes,
        wall_s=round(time.perf_counter() - t0, 1))
    (out / "report.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2))
    return result


def _write(cfg: ExportConfig, emb, out: Path, src: _Source) -> list[str]:
    """The model file(s), the tokenizer and the spec a server needs beside them; returns the names written."""
    if cfg.to == "openvino":
        emb.save(out)  # model.xml / model.bin (fp32 kept) + tokenizer/, as the OpenVINO backend's artifact
    else:
        src.tokenizer.save_pretrained(out / "tokenizer")
        (out / "tokenizer" / "infertune_embedding.json").write_text(json.dumps(src.spec.to_dict(), indent=2))
    return sorted(p.name for p in out.iterdir() if p.name != "report.json") + ["report.json"]


def _tensorrt_script(cfg: ExportConfig, out: Path, lengths: list[int], cap: int, inputs: tuple[str, ...]) -> Path:
    from infertune.plan.tensorrt import length_profiles, script, trtexec_bench, trtexec_build

    profiles, _ = length_profiles(lengths, cap, cfg.batch_tokens)
    build = trtexec_build("model.onnx", "model.plan", profiles, inputs, cfg.precision, WORKSPACE_MIB)
    header = (f"TensorRT engine for {cfg.model}, written by `infertune export` (run it where TensorRT is installed,\n"
              f"in this directory): one optimisation profile per length bucket of {len(lengths)} workload inputs,\n"
              f"lengths capped at the model's {cap} tokens, {cfg.precision}. An application picks the profile whose\n"
              "range holds its batch's longest input (IExecutionContext.setOptimizationProfileAsync).")
    path = out / "tensorrt.sh"
    path.write_text(script([("build the engine", build), ("time it", trtexec_bench("model.plan", profiles[0], inputs))],
                           header))
    path.chmod(0o755)
    return path
