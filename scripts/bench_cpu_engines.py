"""The CPU engines side by side on MiniLM, in one process, interleaved: every round gives each engine one
timed pass over the same texts (length-sorted batches under a padded-token budget, tokenization
included), so drift on a shared box spreads over all of them. Prints prepare seconds, items/s (median,
min-max, n) and cosine vs PyTorch fp32 (mean / min) per engine, plus the environment.

    HF_HUB_OFFLINE=1 PYTHONPATH=src .venv/bin/python scripts/bench_cpu_engines.py --items 200 --passes 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

ENGINES = [  # (label, candidate kwargs)
    ("torch fp32", {"backend": "torch-eager"}),
    ("ORT fp32", {"backend": "onnxruntime"}),
    ("ORT dynamic int8", {"backend": "onnxruntime", "precision": "int8", "quant": "ort-dynamic"}),
    ("ORT dynamic int8, FFN down fp32", {"backend": "onnxruntime", "precision": "mixed", "quant": "ort-dynamic",
                                         "keep_high": tuple(f"encoder.layer.{i}.output.dense" for i in range(6))}),
    ("ORT static int8", {"backend": "onnxruntime", "precision": "int8", "quant": "ort-static"}),
    ("ORT static int8, all 36 Linear", {"backend": "onnxruntime", "precision": "int8", "quant": "ort-static",
                                        "options": (("ffn_down", "int8"),)}),
    ("OpenVINO fp32", {"backend": "openvino"}),
    ("OpenVINO int8 (NNCF)", {"backend": "openvino", "precision": "int8", "quant": "nncf-ptq"}),
    ("OpenVINO bf16", {"backend": "openvino", "precision": "bf16"}),
    ("torch bf16", {"backend": "torch-eager", "precision": "bf16"}),
]


def _cpu_stall_us() -> float | None:
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return None
    return float(line.rsplit("total=", 1)[1])


def _wait_quiet(limit_s: float, level: float = 5.0) -> None:
    """Wait until the 10-second CPU pressure average is below `level` percent (or `limit_s` passed)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            avg10 = float(Path("/proc/pressure/cpu").read_text().split()[1].split("=")[1])
        except (OSError, IndexError, ValueError):
            return
        if avg10 < level:
            return
        time.sleep(2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--calibration", type=int, default=64)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--budget", type=int, default=512, help="padded tokens per batch")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="/tmp/infertune-bench-cpu-engines")
    ap.add_argument("--quiet", type=float, default=0.15, help="rounds with more CPU pressure are not in the median")
    ap.add_argument("--wait-s", type=float, default=90, help="before a round, wait up to this long for a quiet box")
    ap.add_argument("--only", default="", help="comma-separated substrings of engine labels")
    a = ap.parse_args()

    import torch

    torch.set_num_threads(a.threads)
    from infertune.config import Batching, Candidate
    from infertune.hardware.fingerprint import fingerprint
    from infertune.models.embedding import embedding_spec, load_tokenizer
    from infertune.registry import load_backend
    from infertune.workloads.buckets import stratified_split, stratified_subsample
    from infertune.workloads.texts import load_workload

    spec = embedding_spec("minilm")
    items = load_workload(None).items
    lengths = [len(x) for x in load_tokenizer(spec)(items, truncation=False)["input_ids"]]
    calib_i, eval_i = stratified_split(lengths, 0.7, 0)
    evals = [items[i] for i in stratified_subsample(eval_i, lengths, a.items, 0)]
    calib = [items[i] for i in stratified_subsample(calib_i, lengths, a.calibration, 0)]
    batching = Batching(kind="tokens", size=a.budget)
    work = Path(a.work)
    engines = [(lab, kw) for lab, kw in ENGINES if not a.only or any(s in lab for s in a.only.split(","))]

    prepared, rows = {}, {}
    for label, kw in engines:
        cand = Candidate(**kw)
        backend = load_backend(cand.backend)
        if reason := backend.available(cand, "cpu"):
            rows[label] = {"skipped": reason}
            continue
        t0 = time.perf_counter()
        emb = backend.prepare(spec, cand, "cpu", work, calib)
        rows[label] = {"prepare_s": round(time.perf_counter() - t0, 1), "describe": emb.describe()}
        prepared[label] = emb
        print(f"prepared {label} in {rows[label]['prepare_s']} s", flush=True)

    ref = prepared["torch fp32"].embed(evals, batching, pooled=True)
    for label, emb in prepared.items():
        v = emb.embed(evals, batching, pooled=True)
        cos = (v * ref).sum(1) / (np.linalg.norm(v, axis=1) * np.linalg.norm(ref, axis=1))
        rows[label].update(cos_mean=float(cos.mean()), cos_min=float(cos.min()))
        emb.measure_pass(evals, batching)  # warm-up
        rows[label]["items_per_s"] = []
    # A shared box: other tenants' bursts slow whole rounds. Each round waits (up to --wait-s) for the
    # box to be quiet, records the CPU pressure during the round, and the table uses the quiet rounds.
    round_stall = []
    for r in range(a.passes):
        _wait_quiet(a.wait_s)
        stall0, t0 = _cpu_stall_us(), time.monotonic()
        order = list(prepared.items())
        order = order[r % len(order):] + order[: r % len(order)]  # rotate who goes first
        for label, emb in order:
            m = emb.measure_pass(evals, batching)
            rows[label]["items_per_s"].append(m["items"] / m["wall_s"])
        stall = (_cpu_stall_us() - stall0) / 1e6 / (time.monotonic() - t0) if stall0 is not None else 0.0
        round_stall.append(stall)
        print(f"round {r + 1}/{a.passes} done, CPU pressure {stall:.0%}", flush=True)
    quiet = [i for i, st in enumerate(round_stall) if st <= a.quiet] or list(range(a.passes))

    tokens = sum(min(n, spec.max_length) for n in (lengths[items.index(t)] for t in evals))
    env = fingerprint(a.threads).model_dump(mode="json")
    print(f"\n{len(evals)} texts ({tokens} tokens, mean {tokens / len(evals):.0f}), batches of <= {a.budget} "
          f"padded tokens, {a.threads} threads, {len(calib)} calibration texts; {env.get('cpu_model')}")
    print(f"CPU pressure per round (/proc/pressure/cpu 'some'): {', '.join(f'{x:.0%}' for x in round_stall)}; "
          f"medians over the {len(quiet)} rounds at <= {a.quiet:.0%}, range over all {a.passes}")
    base = statistics.median([rows["torch fp32"]["items_per_s"][i] for i in quiet])
    print("| engine | prepare s | items/s median of quiet rounds (min-max of all, n quiet/all) | best pass "
          "| x torch fp32 (median) | cos mean / min |")
    print("|---|---|---|---|---|---|")
    for label, row in rows.items():
        if "skipped" in row:
            print(f"| {label} | skipped: {row['skipped']} | | | | |")
            continue
        xs = row["items_per_s"]
        med = statistics.median([xs[i] for i in quiet])
        print(f"| {label} | {row['prepare_s']} | {med:.1f} ({min(xs):.1f}-{max(xs):.1f}, n={len(quiet)}/{len(xs)}) | "
              f"{max(xs):.1f} | {med / base:.2f} | {row['cos_mean']:.5f} / {row['cos_min']:.4f} |")
    Path(work).mkdir(parents=True, exist_ok=True)
    (work / "results.json").write_text(json.dumps({"rows": rows, "round_cpu_pressure": round_stall, "env": env},
                                                  indent=2, default=str))
    print(f"details (describe() of each engine, every pass): {work / 'results.json'}")


if __name__ == "__main__":
    main()
