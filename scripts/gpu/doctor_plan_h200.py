"""Issue #5 on a lent H200: (1) `infertune doctor --json` reports driver, CUDA, compute capability, ECC and
the torch arch list; (2) `plan`'s bs=1 decode roofline for the Qwen3-0.6B shape vs a measured decode step.

Run from the repository root:  PYTHONPATH=src python scripts/gpu/doctor_plan_h200.py
No network, no weights: the model is built from tests/unit/configs/qwen3-0.6b.json with random bf16 weights.
Decode is measured two ways, both batch 1 against a static 512-slot KV cache:
  graph: a minimal static-shape Qwen3 decode step (RMSNorm, q/k norms, RoPE, GQA SDPA, SwiGLU, tied lm_head)
         captured in a CUDA graph and replayed (what an engine with CUDA graphs does);
  eager: the same step without the graph (host-bound), and HF transformers' forward with a DynamicCache.
Prints a table last; writes $OUT/doctor_plan_h200.json when OUT is set. `--device cpu` tests the code path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "unit" / "configs" / "qwen3-0.6b.json"
sys.path.insert(0, str(ROOT / "src"))


def run_doctor() -> dict:
    extra = os.environ.get("PYTHONPATH", "")  # keep carried wheels (e.g. /tmp/site) importable
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), extra) if p),
           "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "infertune.cli.main", "doctor", "--json"], capture_output=True,
                       text=True, env=env, timeout=300)
    print(p.stderr[-6000:], file=sys.stderr)
    rep = json.loads(p.stdout)
    gpus = (rep["facts"].get("gpus") or {}).get("gpus") or []
    t = rep["facts"].get("torch") or {}
    drv = next((f["data"] for f in rep["findings"] if f["check"] == "driver"), {})
    return {"exit_code": p.returncode, "worst": rep["worst"], "wall_s": round(time.perf_counter() - t0, 1),
            "driver": drv.get("driver"), "cuda_driver_api": drv.get("cuda"), "gpu_source": drv.get("source"),
            "gpus": [{k: g.get(k) for k in ("name", "cc", "ecc", "mig", "memory_mib")} for g in gpus],
            "torch": t.get("version"), "torch_cuda": t.get("cuda"), "arch_list": t.get("arch_list"),
            "non_ok": [f"{f['level']}: {f['check']}: {f['message']}" for f in rep["findings"] if f["level"] != "ok"]}


def stats(xs: list[float]) -> dict:
    s = sorted(xs)
    q = lambda p: s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]  # noqa: E731
    return {"median": statistics.median(s), "p5": q(0.05), "p95": q(0.95), "n": len(s)}


class Qwen3Decode:
    """One static-shape decode step of the Qwen3 architecture with random weights (bf16)."""

    def __init__(self, cfg: dict, max_len: int, device: str, dtype):
        import torch

        g = torch.Generator(device="cpu").manual_seed(0)
        h, nq, nkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        inter, v, L = cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]

        def w(*shape):
            return (torch.randn(*shape, generator=g) * 0.02).to(device=device, dtype=dtype)

        self.cfg, self.h, self.nq, self.nkv, self.d, self.L = cfg, h, nq, nkv, d, L
        self.embed = w(v, h)  # tied with the lm_head
        self.layers = [dict(qkv=w((nq + 2 * nkv) * d, h), o=w(h, nq * d), gu=w(2 * inter, h), down=w(h, inter),
                            n1=torch.ones(h, device=device, dtype=dtype), n2=torch.ones(h, device=device, dtype=dtype),
                            qn=torch.ones(d, device=device, dtype=dtype), kn=torch.ones(d, device=device, dtype=dtype))
                       for _ in range(L)]
        self.norm = torch.ones(h, device=device, dtype=dtype)
        self.k = torch.zeros(L, 1, nkv, max_len, d, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        inv = 1.0 / (cfg.get("rope_theta", 1e6) ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = torch.outer(torch.arange(max_len, dtype=torch.float32), inv)
        self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(device, dtype)
        self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(device, dtype)
        self.tok = torch.zeros(1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.mask = torch.full((1, 1, 1, max_len), float("-inf"), device=device, dtype=dtype)
        self.logits = None
        self.weight_bytes = sum(t.numel() * t.element_size() for lay in self.layers for t in lay.values()) \
            + self.embed.numel() * self.embed.element_size()

    @staticmethod
    def rms(x, w, eps=1e-6):
        import torch

        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

    def rope(self, x, cos, sin):
        import torch

        x1, x2 = x[..., : self.d // 2], x[..., self.d // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def step(self):
        import torch.nn.functional as F

        x = self.embed.index_select(0, self.tok).view(1, 1, self.h)
        cos, sin = self.cos.index_select(0, self.pos), self.sin.index_select(0, self.pos)
        for i, lay in enumerate(self.layers):
            r = self.rms(x, lay["n1"])
            qkv = F.linear(r, lay["qkv"])
            q, k, v = qkv.split([self.nq * self.d, self.nkv * self.d, self.nkv * self.d], -1)
            q = self.rope(self.rms(q.view(1, 1, self.nq, self.d), lay["qn"]), cos, sin).transpose(1, 2)
            k = self.rope(self.rms(k.view(1, 1, self.nkv, self.d), lay["kn"]), cos, sin).transpose(1, 2)
            self.k[i].index_copy_(2, self.pos, k)
            self.v[i].index_copy_(2, self.pos, v.view(1, 1, self.nkv, self.d).transpose(1, 2))
            a = F.scaled_dot_product_attention(q, self.k[i], self.v[i], attn_mask=self.mask, enable_gqa=True)
            x = x + F.linear(a.transpose(1, 2).reshape(1, 1, self.nq * self.d), lay["o"])
            gate, up = F.linear(self.rms(x, lay["n2"]), lay["gu"]).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, lay["down"])
        self.logits = F.linear(self.rms(x, self.norm), self.embed)
        return self.logits

    def set_position(self, p: int):
        self.pos.fill_(p)
        self.mask[..., p] = 0.0


def time_steps(fn, model, steps: int, start: int, device: str) -> list[float]:
    import torch

    out = []
    for s in range(steps):
        model.set_position(start + s)
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def measure_decode(device: str, steps: int, max_len: int) -> dict:
    import torch

    cfg = json.loads(CONFIG.read_text())
    dtype = torch.bfloat16
    res: dict = {}
    with torch.inference_mode():
        m = Qwen3Decode(cfg, max_len, device, dtype)
        res["weight_bytes"] = m.weight_bytes
        prefill = max_len - steps - 40  # steps attend to a nearly full cache
        m.mask[..., :prefill] = 0.0
        eager = time_steps(m.step, m, min(steps, 50), prefill, device)
        res["eager_ms"] = stats(eager[5:] if len(eager) > 10 else eager)
        if device == "cuda":
            for p in range(prefill, prefill + 10):  # warm up on a side stream, then capture
                m.set_position(p)
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    m.step()
                torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                m.step()
            # check the graph computes what eager does at the same position
            m.set_position(prefill + 20)
            graph.replay()
            ref = m.logits.clone()
            m.step()
            res["graph_vs_eager_max_abs_diff"] = float((m.logits - ref).abs().max())
            for _ in range(20):
                graph.replay()
            t = time_steps(graph.replay, m, steps, prefill + 21, device)
            res["graph_ms"] = stats(t)
            from infertune.hardware.bandwidth import memory_bandwidth
            from infertune.hardware.gpus import read_gpus

            bw = memory_bandwidth("cuda", mib=1024, reps=20, warmup=3)  # 1 GiB copy: read + write bytes
            res["copy_tb_s"] = {"median": bw["gb_per_s"] / 1e3, "min": bw["range"][0] / 1e3,
                                "max": bw["range"][1] / 1e3, "n": bw["n"]}
            res["total_memory_gib"] = read_gpus()[0].memory_gb
    try:  # HF transformers' own eager decode, for reference
        from transformers import AutoConfig, AutoModelForCausalLM

        with torch.inference_mode():
            hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(CONFIG)),
                                                  dtype=dtype).to(device).eval()
            ids = torch.randint(0, 1000, (1, 128), device=device)
            out = hf(input_ids=ids, use_cache=True)
            pkv, nxt = out.past_key_values, ids[:, -1:]
            times = []
            for _ in range(min(steps, 40)):
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = hf(input_ids=nxt, past_key_values=pkv, use_cache=True)
                pkv = out.past_key_values
                if device == "cuda":
                    torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) * 1e3)
            res["hf_eager_ms"] = stats(times[5:] if len(times) > 10 else times)
    except Exception as e:  # transformers missing or changed: the main figures stand without it
        res["hf_eager_error"] = f"{type(e).__name__}: {e}"[:300]
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--max-len", type=int, default=512)
    args = ap.parse_args()
    from infertune.plan.planner import PlanConfig, plan

    doc = run_doctor()
    dec = measure_decode(args.device, args.steps, args.max_len)
    pr = plan(PlanConfig(model=str(CONFIG), gpu="H200", context=args.max_len))
    roof = pr.decode_step_ms_roofline
    out = {"doctor": doc, "decode": dec, "plan": {"decode_step_ms_roofline": roof, "weights_bytes": pr.weights_bytes,
           "kv_bytes_per_token": pr.kv_bytes_per_token, "context": pr.context,
           "bandwidth_gbs": pr.gpu["bandwidth_gbs"]}}
    rows = [("doctor exit / worst", f"{doc['exit_code']} / {doc['worst']}"),
            ("driver / CUDA driver API", f"{doc['driver']} / {doc['cuda_driver_api']} (via {doc['gpu_source']})"),
            ("GPUs (name, CC, ECC, MIG)",
             "; ".join(f"{g['name']} {g['cc']} ECC={g['ecc']} MIG={g['mig']}" for g in doc["gpus"]) or "none"),
            ("torch / CUDA / arch list", f"{doc['torch']} / {doc['torch_cuda']} / {' '.join(doc['arch_list'] or [])}"),
            ("plan roofline bs=1 (spec 4.8 TB/s)",
             f"{roof:.4f} ms/step ({pr.weights_bytes / 1e9:.3f} GB weights + KV {args.max_len} tok)"),
            ("model weight bytes (built)", f"{dec['weight_bytes'] / 1e9:.3f} GB")]
    for key, label in (("graph_ms", "measured CUDA-graph step"), ("eager_ms", "measured eager step (same code)"),
                       ("hf_eager_ms", "measured HF eager step")):
        if key in dec:
            s = dec[key]
            rows.append((label, f"median {s['median']:.4f} ms (p5 {s['p5']:.4f}, p95 {s['p95']:.4f}, n={s['n']}); "
                                f"roofline/measured = {roof / s['median']:.3f}"))
    if "copy_tb_s" in dec:
        bw = dec["copy_tb_s"]["median"]
        rows.append(("measured copy bandwidth", f"{bw:.2f} TB/s (n={dec['copy_tb_s']['n']}); roofline at it: "
                     f"{roof * 4.8 / bw:.4f} ms"))
        rows.append(("graph vs eager logits max |diff|", f"{dec['graph_vs_eager_max_abs_diff']:.3g}"))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"]).mkdir(parents=True, exist_ok=True)
        (Path(os.environ["OUT"]) / "doctor_plan_h200.json").write_text(json.dumps(out, indent=2, default=str))
    print("\nnon-ok findings:", *doc["non_ok"], sep="\n  ")
    w = max(len(r[0]) for r in rows)
    print("\n" + "\n".join(f"{a:<{w}}  {b}" for a, b in rows))


if __name__ == "__main__":
    main()
