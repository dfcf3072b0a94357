"""Quantized checkpoints made once per (model, recipe, calibration text): tune asks for a scheme and gets the
directory back, made now or found from an earlier run.

Making one costs minutes to tens of minutes on a CPU (GPTQ walks every layer over the calibration split), and a
second tune of the same model on the same traffic would make the same bytes again. The key is the content that
decides the checkpoint: the model's config and weight files, the recipe, the calibration texts, the oneshot limits
and the llm-compressor pin. A different workload gives a different calibration split and so a new checkpoint.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from infertune.errors import InfertuneError
from infertune.quantize.llm_checkpoint_make import RECORD_SUFFIX, CheckpointRecord, make_checkpoint, with_group_size
from infertune.quantize.llm_checkpoint_rules import W4A16, Modifier, Scheme
from infertune.quantize.llm_checkpoint_step import LLMC_PIN, MAX_SEQ

GROUP_SIZES = (128, 64, 32)  # int4 group widths vLLM's kernels take, the preset's first


def group_size_for(model_dir: str | Path) -> int:
    """The widest int4 group that divides every Linear's input size (hidden and intermediate), since vLLM sizes a
    layer's scales as input_size // group_size: SmolLM2-135M's hidden 576 takes 64, not the preset's 128."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    text = cfg.get("text_config") or cfg
    sizes = [int(text[k]) for k in ("hidden_size", "intermediate_size") if text.get(k)]
    for g in GROUP_SIZES:
        if all(s % g == 0 for s in sizes):
            return g
    raise InfertuneError(f"no int4 group size in {GROUP_SIZES} divides the Linear input sizes {sizes} of {model_dir}")


def recipe_for(scheme: Scheme, model_dir: str | Path) -> tuple[Modifier, ...]:
    if scheme.id == W4A16.id:
        g = group_size_for(model_dir)
        return scheme.recipe if g == 128 else with_group_size(scheme, g)
    return scheme.recipe


def _digest(paths: list[Path], extra: str) -> str:
    h = hashlib.sha256(extra.encode())
    for p in paths:
        h.update(p.name.encode())
        with p.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()[:12]


def checkpoint_key(model_dir: str | Path, scheme: Scheme, recipe: tuple[Modifier, ...], calib_file: str | Path | None,
                   max_seq_length: int = MAX_SEQ) -> str:
    model = Path(model_dir)
    files = sorted([model / "config.json", *model.glob("*.safetensors")])
    if calib_file is not None:
        files.append(Path(calib_file))
    extra = json.dumps([scheme.id, [m.call() for m in recipe], max_seq_length, LLMC_PIN])
    return _digest(files, extra)


def cached_checkpoint(model_dir: str | Path, scheme: Scheme, calib_file: str | Path | None, cache_dir: str | Path, *,
                      venv: str | Path | None = None, max_seq_length: int = MAX_SEQ,
                      console=None) -> tuple[Path, CheckpointRecord, bool]:
    """(checkpoint directory, its record, whether it was found made) for `scheme` on `model_dir`, calibrated on
    `calib_file`. The directory is `<cache_dir>/<model>-<suffix>-<key>`; a half-written one is made again."""
    recipe = recipe_for(scheme, model_dir)
    key = checkpoint_key(model_dir, scheme, recipe, calib_file if scheme.calibrated else None, max_seq_length)
    suffix = (scheme.suffix if recipe == scheme.recipe
              else scheme.suffix.replace("G128", f"G{group_size_for(model_dir)}"))
    out = Path(cache_dir) / f"{Path(model_dir).name}-{suffix}-{key}"
    rec_file = Path(str(out) + RECORD_SUFFIX)
    if rec_file.is_file() and (out / "config.json").is_file():
        return out, CheckpointRecord.model_validate_json(rec_file.read_text()), True
    rec = make_checkpoint(model_dir, scheme, calib_file, out, venv, recipe=recipe, max_seq_length=max_seq_length,
                          console=console)
    return out, rec, False


__all__ = ["cached_checkpoint", "checkpoint_key", "group_size_for", "recipe_for"]
