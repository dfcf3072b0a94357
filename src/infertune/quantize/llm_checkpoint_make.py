"""Make a quantized checkpoint that vLLM loads: llm-compressor's `oneshot` (quantize/llm_checkpoint_step.py names the
call) run as a subprocess of the llm-compressor venv, calibrated on the workload's split (quantize/llm_calibration.py).

A subprocess, not an import: llmcompressor 0.14.0.1 pins transformers<=5.17 and infertune's venv has 5.19, so it
lives in `.venv-llmc` (`make llmc-env`), as vLLM lives in `.venv-vllm`. What was made (scheme, recipe, calibration
size, wall seconds, bytes on disk, the versions that made it) is written beside the checkpoint as
`<out_dir>.infertune.json`; the directory itself stays exactly what llm-compressor wrote, which is what vLLM reads.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from collections import deque
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infertune.errors import InfertuneError
from infertune.quantize.llm_checkpoint_rules import QUANT, Modifier, Scheme
from infertune.quantize.llm_checkpoint_step import LLMC_PIN, LLMC_VENV, MAX_SEQ, oneshot_args, oneshot_code

RECORD_SUFFIX = ".infertune.json"
PROGRESS = re.compile(r"\d+%\|.*\|")  # a tqdm bar ("(3/31): Calibrating:  20%|██| 14/71 [...]")
# the child prints what ran, so the record names the versions that made the checkpoint, not the ones we hoped for
VERSIONS = ("import json, importlib.metadata as m\n"
            "def v(p):\n    try:\n        return m.version(p)\n"
            "    except m.PackageNotFoundError:\n        return 'absent'\n"
            "print('INFERTUNE_VERSIONS', json.dumps({p: v(p) for p in ('llmcompressor', 'compressed-tensors', 'torch', "
            "'transformers')}), flush=True)\n")


class CheckpointRecord(BaseModel):
    """What make_checkpoint made, written beside the checkpoint."""

    format: str = "infertune-checkpoint/1"
    scheme: str
    label: str
    model: str
    output: str
    recipe: list[dict[str, Any]]
    oneshot: dict[str, Any]
    n_calibration: int
    calibration_file: str | None
    wall_s: float
    size_bytes: int
    quantization_config: dict[str, Any]  # what vLLM will read from the checkpoint's config.json
    versions: dict[str, str]
    command: str
    log: str


def find_llmc(venv: str | Path | None = None) -> str:
    """The llm-compressor venv's python: `venv`, $INFERTUNE_LLMC_VENV, ./.venv-llmc, <repo>/.venv-llmc."""
    tried = [Path(venv)] if venv else []
    if not venv and os.environ.get("INFERTUNE_LLMC_VENV"):
        tried.append(Path(os.environ["INFERTUNE_LLMC_VENV"]))
    if not tried:
        tried += [Path.cwd() / LLMC_VENV, Path(__file__).resolve().parents[3] / LLMC_VENV]
    for v in tried:
        py = v / "bin" / "python"
        if py.exists() and subprocess.run([str(py), "-c", "import importlib.util as u, sys; "
                                           "sys.exit(u.find_spec('llmcompressor') is None)"],
                                          capture_output=True, timeout=120).returncode == 0:
            return str(py)
    raise InfertuneError(f"no llm-compressor venv with llmcompressor importable (looked in "
                         f"{', '.join(map(str, dict.fromkeys(tried)))}). It pins its own transformers, so it gets its "
                         f"own venv: `make llmc-env` (python3 -m venv {LLMC_VENV} && {LLMC_VENV}/bin/pip install "
                         f"torch==2.13.0 {LLMC_PIN}), or pass venv= / set INFERTUNE_LLMC_VENV")


def with_group_size(scheme: Scheme, group_size: int) -> tuple[Modifier, ...]:
    """The scheme's GPTQ W4A16 recipe with int4 groups of `group_size` input columns instead of the preset's 128
    (a model whose hidden size 128 does not divide, SmolLM2-135M's 576 = 4.5 x 128, needs one that does)."""
    out = []
    for m in scheme.recipe:
        a = dict(m.args)
        if m.name == "GPTQModifier" and a.get("scheme") == "W4A16":
            weights = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": group_size}
            a.pop("scheme")
            a["config_groups"] = {"group_0": {"targets": ["Linear"], "weights": weights}}
            m = Modifier(m.name, QUANT, tuple(a.items()))
        out.append(m)
    return tuple(out)


def _size(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def _run(argv: list[str], log: Path, label: str, console) -> tuple[int, list[str], float]:
    """Run the step, every line to `log`, a live status (elapsed seconds, the child's last line) on stderr."""
    tail: deque[str] = deque(maxlen=20)
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    with log.open("w", encoding="utf-8") as f, console.status(f"llm-compressor {label}: starting") as status:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                env=env, start_new_session=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                f.write(line)
                f.flush()
                if line.strip():
                    if not PROGRESS.search(line):  # an error's last lines, not tqdm's bars, go into the message
                        tail.append(line.rstrip())
                    status.update(f"llm-compressor {label}: {time.monotonic() - t0:.0f} s  {line.strip()[:100]}")
            code = proc.wait()
        except BaseException:  # Ctrl-C: no orphaned quantizer holding the model in memory
            proc.kill()
            proc.wait()
            raise
    return code, list(tail), time.monotonic() - t0


def make_checkpoint(model_dir: str | Path, scheme: Scheme, calib_file: str | Path | None, out_dir: str | Path,
                    venv: str | Path | None = None, *, recipe: tuple[Modifier, ...] | None = None,
                    max_seq_length: int = MAX_SEQ, console=None) -> CheckpointRecord:
    """Quantize the HF directory `model_dir` with `scheme` (calibrated on `calib_file`, a calibration.FILE written
    by write_calibration) into `out_dir`; returns the record also written to `<out_dir>.infertune.json`.
    `recipe` replaces the scheme's (e.g. with_group_size). Raises InfertuneError when the venv is missing, an
    input is, or the step fails (with the log's last lines)."""
    from infertune.console import console as make_console

    console = console or make_console()
    model, out = Path(model_dir).resolve(), Path(out_dir).resolve()
    if not (model / "config.json").is_file():
        raise InfertuneError(f"{model} has no config.json: make_checkpoint needs an HF model directory")
    n, cal = 0, None
    if scheme.calibrated:
        if calib_file is None or not Path(calib_file).is_file():
            raise InfertuneError(f"{scheme.label} is calibrated and the calibration file {calib_file} does not exist; "
                                 "write it with infertune.quantize.llm_calibration.write_calibration")
        cal = Path(calib_file).resolve()
        if cal.name != "train.json":  # oneshot finds the split's file by name inside dataset_path
            raise InfertuneError(f"the calibration file must be named train.json (oneshot's 'train' split), got {cal}")
        n = sum(1 for ln in cal.read_text(encoding="utf-8").splitlines() if ln.strip())
        if n == 0:
            raise InfertuneError(f"{cal} holds no calibration texts")
    py = find_llmc(venv)
    args = oneshot_args(scheme, str(model), str(out), str(cal.parent) if cal else "", n, max_seq_length)
    mods = recipe or scheme.recipe
    argv = [py, "-c", VERSIONS + oneshot_code(scheme, args, mods)]
    out.parent.mkdir(parents=True, exist_ok=True)
    log = Path(str(out) + ".log")
    console.print(f"llm-compressor {scheme.label}: {model.name} -> {out} ({n} calibration texts; log {log})")
    code, tail, wall = _run(argv, log, scheme.label, console)
    if code != 0 or not (out / "config.json").is_file():
        why = (f"killed by signal {-code}" if code < 0 else f"exit code {code}") if code else "it wrote no config.json"
        raise InfertuneError(f"llm-compressor {scheme.label} failed on {model} ({why}, after {wall:.0f} s). "
                             f"Last lines of {log}:\n" + "\n".join(tail[-12:]))
    text = log.read_text(encoding="utf-8", errors="replace")
    versions = next((json.loads(ln.split(" ", 1)[1]) for ln in text.splitlines()
                     if ln.startswith("INFERTUNE_VERSIONS ")), {})
    qcfg = json.loads((out / "config.json").read_text()).get("quantization_config") or {}
    rec = CheckpointRecord(
        scheme=scheme.id, label=scheme.label, model=str(model), output=str(out),
        recipe=[{"modifier": m.name, "module": m.module, "args": dict(m.args)} for m in mods], oneshot=args,
        n_calibration=n, calibration_file=str(cal) if cal else None, wall_s=round(wall, 3), size_bytes=_size(out),
        quantization_config=qcfg, versions=versions, command=shlex.join(argv), log=str(log))
    Path(str(out) + RECORD_SUFFIX).write_text(rec.model_dump_json(indent=2) + "\n")
    console.print(f"llm-compressor {scheme.label}: done in {wall:.0f} s, {rec.size_bytes / 2**20:.1f} MiB on disk")
    return rec


__all__ = ["CheckpointRecord", "make_checkpoint", "find_llmc", "with_group_size", "RECORD_SUFFIX"]
