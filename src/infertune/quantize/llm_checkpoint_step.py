"""The step that makes a quantized checkpoint for vLLM: llm-compressor's `oneshot` with a scheme's recipe
(quantize/llm_checkpoint_rules.py), calibrated on the workload's length-stratified calibration split, written as
a compressed-tensors directory. vLLM reads `quantization_config` from that directory's config.json, so it
is served with no `--quantization` flag (passing one that differs, e.g. awq_marlin or fp8, is refused:
"Quantization method specified in the model config (compressed-tensors) does not match ...").

This module names the step (recipe, oneshot arguments, the command, where the calibration file goes); it
does not run it. llmcompressor 0.14.0.1 (PyPI) pins torch>=2.10,<=2.14 and transformers>=5.15,<=5.17 in its
wheel's metadata, and infertune's own venv has transformers 5.19, so the step runs from its own venv, as
vLLM does.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infertune.quantize.llm_checkpoint_rules import Scheme, lit

LLMC_PIN = "llmcompressor==0.14.0.1"
LLMC_VENV = ".venv-llmc"  # `make llmc-env` builds it (CPU torch 2.13.0; pins in constraints-llmc.txt)
INSTALL = f"python3 -m venv {LLMC_VENV} && {LLMC_VENV}/bin/pip install torch==2.13.0 {LLMC_PIN}"
MAX_SAMPLES = 512  # oneshot's default num_calibration_samples, and where vLLM's guides start
MAX_SEQ = 2048  # vLLM's llm-compressor guides' starting max_seq_length
EVAL_FRACTION = 0.7  # TuneConfig.eval_fraction's default: the calibration split is the other 30%


class CheckpointStep(BaseModel):
    """What makes one quantized checkpoint: enough to run it by hand, and what plan/deploy print."""

    scheme: str
    label: str
    tool: str = "llm-compressor"
    install: str = INSTALL
    recipe: list[dict[str, Any]]  # [{"modifier", "module", "args"}], in order
    oneshot: dict[str, Any]  # keyword arguments of llmcompressor.oneshot, recipe apart
    calibration: dict[str, Any]
    output: str  # the checkpoint directory vLLM serves
    command: str  # one shell line


def output_dir(model_dir: str, name: str, scheme: Scheme) -> str:
    """Beside the model (`/models/Llama-3-8B` -> `/models/Llama-3-8B-W4A16-G128`), as llm-compressor's examples
    name it; inside the folder of a config file that is not named for the model; in the current directory for
    a hub id. Always absolute: docker and deploy mount it, and a relative name would read as a hub id."""
    if not model_dir.startswith("/"):
        return str(Path.cwd() / f"{name}-{scheme.suffix}")
    p = Path(model_dir)
    return str((p.parent if p.name == name else p) / f"{name}-{scheme.suffix}")


def calibration_of(scheme: Scheme, out: str, workload: str | None, n_calibration: int | None) -> dict[str, Any]:
    if not scheme.calibrated:
        return {"needed": False, "why": "FP8_DYNAMIC takes weight scales from the weights and activation scales per "
                                        "token at run time"}
    return {
        "needed": True,
        "source": workload or "the built-in chat sample (infertune/data/sample_chat.jsonl; --workload: your traffic)",
        "split": f"{round((1 - EVAL_FRACTION) * 100)}% of each token-length bucket "
                 f"(infertune.workloads.buckets.stratified_split, eval_fraction {EVAL_FRACTION}, seed 0)",
        "requests": n_calibration,
        "file": f"{out}.calibration/train.json",
        "format": 'JSON lines, {"text": the request rendered with the model\'s chat template}',
        "written_by": "infertune.quantize.llm_calibration.write_calibration (make_checkpoint writes it); oneshot "
                      "reads it as the 'train' split of a json dataset",
    }


def oneshot_args(scheme: Scheme, model: str, out: str, dataset_path: str, n_calibration: int | None,
                 max_seq_length: int = MAX_SEQ) -> dict[str, Any]:
    """oneshot's keyword arguments, the recipe apart. `dataset_path` is the folder that holds train.json."""
    args: dict[str, Any] = {"model": model}
    if scheme.calibrated:  # oneshot without a dataset runs data-free (what FP8_DYNAMIC needs)
        args |= {"dataset": "json", "dataset_path": dataset_path, "splits": "train", "text_column": "text",
                 "num_calibration_samples": min(MAX_SAMPLES, n_calibration or MAX_SAMPLES),
                 "max_seq_length": min(MAX_SEQ, max_seq_length)}
    args["output_dir"] = out
    return args


def oneshot_code(scheme: Scheme, args: dict[str, Any], recipe: tuple | None = None) -> str:
    """One line of Python that runs oneshot with `args` and the scheme's recipe (or `recipe`, same shape)."""
    mods = scheme.recipe if recipe is None else recipe
    imports = "; ".join(f"from {m} import {', '.join(sorted({x.name for x in mods if x.module == m}))}"
                        for m in dict.fromkeys(x.module for x in mods))
    return (f"from llmcompressor import oneshot; {imports}; oneshot("
            + ", ".join(f"{k}={lit(v)}" for k, v in args.items())
            + ", recipe=[" + ", ".join(x.call() for x in mods) + "])")


def llm_compressor_step(scheme: Scheme, model: str, name: str, *, workload: str | None = None,
                        n_calibration: int | None = None, max_seq_length: int = MAX_SEQ) -> CheckpointStep:
    """The llm-compressor step for `scheme` on `model` (a directory or hub id)."""
    out = output_dir(model, name, scheme)
    cal = calibration_of(scheme, out, workload, n_calibration)
    args = oneshot_args(scheme, model, out, f"{out}.calibration", n_calibration, max_seq_length)
    code = oneshot_code(scheme, args)
    return CheckpointStep(
        scheme=scheme.id, label=scheme.label, output=out, oneshot=args, calibration=cal,
        recipe=[{"modifier": x.name, "module": x.module, "args": dict(x.args)} for x in scheme.recipe],
        command=shlex.join([f"{LLMC_VENV}/bin/python", "-c", code]))


__all__ = ["CheckpointStep", "llm_compressor_step", "oneshot_args", "oneshot_code", "output_dir", "INSTALL", "LLMC_PIN",
           "LLMC_VENV"]
