"""The artifact of a served causal-LM tune: exactly what was measured. `artifact/model` is the winner's checkpoint
(hard links into the checkpoint cache where the filesystem allows, else a copy), `manifest.json` names the vLLM
arguments and environment it was started with, its figures, and the greedy continuations it produced in tune,
which `infertune serve` asks for again once the server is up."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

from infertune.artifact import FORMAT, MANIFEST


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def commands(model_dir: Path, dtype: str, max_len: int, args: list[str], env: dict[str, str]) -> dict[str, str]:
    from infertune.engines.causal_lm.vllm_server import vllm_args

    base = vllm_args(model_dir, dtype, max_len)
    tail = shlex.join(base[2:] + args)
    env_txt = " ".join(f"{k}={v}" for k, v in env.items())
    return {"gpu": f"vllm serve {shlex.quote(str(model_dir))} {tail}",
            "cpu": (env_txt + " " if env_txt else "") + ".venv-vllm/bin/python -m vllm.entrypoints.openai.api_server "
                   + shlex.join(base + args)}


def save_served_artifact(run, result, out: Path, task) -> None:
    win = result.winner
    c = run.cands[win.name]
    ex = run.results[win.name].executed
    art = out / "artifact"
    model = art / "model"
    if art.exists():
        shutil.rmtree(art)
    shutil.copytree(ex["checkpoint"], model, copy_function=_link_or_copy)
    job = task.job(c)
    job_dtype, args = job["dtype"], job["args"]  # the arguments every server got, then the winner's own
    max_len = min(task.spec.max_length, 2048)
    env = {k: v for k, v in (ex.get("env") or {}).items()}
    greedy = [{"prompt": task.tok.decode(p), "prompt_ids": list(p), "prompt_tokens": len(p), "tokens": toks,
               "text": task.tok.decode(toks)} for p, toks in zip(task.sets.prompts, task.greedy[c.id], strict=True)]
    from infertune.engines.causal_lm.versions import engine_versions, python_of

    versions = engine_versions(python_of(task.vllm))  # the interpreter every candidate's server ran in
    result.lm["engine_versions"] = versions
    record = next((p for p in Path(ex["checkpoint"]).parent.glob(Path(ex["checkpoint"]).name + ".infertune.json")),
                  None)
    manifest: dict[str, Any] = {
        "format": FORMAT, "infertune": __import__("infertune").__version__, "kind": "causal-lm", "engine": "vllm",
        "model": task.spec.name, "lm": {k: v for k, v in task.spec.to_dict().items() if k != "path"},
        "candidate": c.model_dump(mode="json"), "candidate_id": c.id, "device": task.cfg.device,
        "checkpoint": {"source": ex["checkpoint"], "scheme": c.checkpoint,
                       "record": json.loads(record.read_text()) if record else None},
        "served_weights": f"the {c.checkpoint} checkpoint, served by vLLM exactly as tune measured it",
        "tune": {"slo": task.slo_text(), "goodput_rps": win.goodput_rps, "requests_per_s": win.requests_per_s,
                 "concurrency": task.cfg.lm_concurrency, "accuracy_budget": task.cfg.lm_accuracy.model_dump(),
                 "ttft_ms": win.ttft_ms.model_dump() if win.ttft_ms else None,
                 "tpot_ms": win.tpot_ms.model_dump() if win.tpot_ms else None,
                 "accuracy": win.accuracy.model_dump(exclude_none=True),
                 "speedup_vs_baseline": win.speedup_vs_baseline, "baseline": result.reference},
        "greedy": {"from": c.id, "ignore_eos": True, "samples": greedy},
        "vllm": {"model_dir": "model", "dtype": job_dtype, "max_model_len": max_len, "args": args,
                 "env": env, "commands": commands(art / "model", job_dtype, max_len, args, env)},
        "load": {"serve": f"infertune serve {art}"},
        "versions": versions,  # what tune measured with: plan/deploy pin the image to it, serve compares
    }
    # what `infertune verify` measures again: this host's fingerprint and the load tune's rate was measured on
    from infertune.hardware.fingerprint import fingerprint

    manifest["fingerprint"] = fingerprint(None).model_dump(mode="json")
    if getattr(task, "sets", None) is not None and Path(task.sets.load_file).exists():
        shutil.copy2(task.sets.load_file, art / "load.jsonl")
    (art / MANIFEST).write_text(json.dumps(manifest, indent=2))
    result.artifact = str(art)
    task.console.print(f"artifact: {art} ({c.id}; `infertune serve {art}` starts vLLM with "
                       f"{shlex.join(args) or 'its defaults'} and checks {len(greedy)} greedy continuations)",
                       highlight=False)


__all__ = ["save_served_artifact", "commands"]
