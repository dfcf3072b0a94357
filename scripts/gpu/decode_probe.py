#!/usr/bin/env python
"""Where does batch-1 decode time go for a Qwen3-0.6B-shape model on the H200? (issue 6)

Side by side in one process, bf16 random weights, 64-token prompt, greedy:
  naive        transformers generate()
  graph        static KV cache, torch.compile'd decode step captured as one CUDA graph (the current winner)
  graph+fuse   same, with q/k/v and gate/up projections fused into one matmul each (weights concatenated)
  multi-K      K decode steps (argmax and position update on the device) captured in one graph
Per-step time from CUDA events around graph replays (and host wall for the single-step variants).
Prints a table last; writes $OUT/decode_probe.json when OUT is set.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types

import torch

SHAPE = dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
             num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
             tie_word_embeddings=True, rope_theta=1e6, max_position_embeddings=40960, rms_norm_eps=1e-6)
STEPS = 64
ROWS = []


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def bandwidth():
    """Device copy bandwidth, GB/s: llm_h200.py's measurement (infertune.hardware.bandwidth, 2 GiB, n=20)."""
    from llm_h200 import bandwidth as measured

    return measured()["gb_per_s"]


def build_model(attn="sdpa"):
    """The Qwen3-0.6B shape with seeded random bf16 weights (same weights on every call)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(**SHAPE), dtype=torch.bfloat16,
                                                attn_implementation=attn).eval()


def prompt_ids():
    return torch.randint(0, SHAPE["vocab_size"], (1, 64), device="cuda",
                         generator=torch.Generator("cuda").manual_seed(1))


def med(xs):
    s = sorted(xs)
    return s[len(s) // 2], s[int(0.05 * (len(s) - 1))], s[int(0.95 * (len(s) - 1))]


def fuse(model):
    """Concatenate q/k/v and gate/up weights; patch the forwards to one matmul each (same math)."""
    from transformers.models.qwen3 import modeling_qwen3 as mq

    for layer in model.model.layers:
        at, mlp = layer.self_attn, layer.mlp
        at.qkv = torch.nn.Linear(at.q_proj.in_features, 1, bias=False, device="cuda", dtype=torch.bfloat16)
        at.qkv.weight = torch.nn.Parameter(torch.cat([at.q_proj.weight, at.k_proj.weight, at.v_proj.weight]))
        at.split = (at.q_proj.out_features, at.k_proj.out_features, at.v_proj.out_features)
        del at.q_proj, at.k_proj, at.v_proj

        def attn_forward(self, hidden_states, position_embeddings, attention_mask, past_key_values=None, **kw):
            shp = (*hidden_states.shape[:-1], -1, self.head_dim)
            q, k, v = self.qkv(hidden_states).split(self.split, dim=-1)
            q = self.q_norm(q.view(shp)).transpose(1, 2)
            k = self.k_norm(k.view(shp)).transpose(1, 2)
            v = v.view(shp).transpose(1, 2)
            cos, sin = position_embeddings
            q, k = mq.apply_rotary_pos_emb(q, k, cos, sin)
            if past_key_values is not None:
                k, v = past_key_values.update(k, v, self.layer_idx)
            fn = mq.ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, mq.eager_attention_forward)
            out, w = fn(self, q, k, v, attention_mask, dropout=0.0, scaling=self.scaling,
                        sliding_window=self.sliding_window, **kw)
            return self.o_proj(out.reshape(*hidden_states.shape[:-1], -1).contiguous()), w

        at.forward = types.MethodType(attn_forward, at)
        mlp.gate_up = torch.nn.Linear(mlp.hidden_size, 1, bias=False, device="cuda", dtype=torch.bfloat16)
        mlp.gate_up.weight = torch.nn.Parameter(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        del mlp.gate_proj, mlp.up_proj

        def mlp_forward(self, x):
            g, u = self.gate_up(x).chunk(2, dim=-1)
            return self.down_proj(self.act_fn(g) * u)

        mlp.forward = types.MethodType(mlp_forward, mlp)
    return model


def naive(model, ids):
    from transformers import StoppingCriteria, StoppingCriteriaList

    stamps = []

    class Stamp(StoppingCriteria):
        def __call__(self, input_ids, scores, **kw):
            torch.cuda.synchronize()
            stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=STEPS + 1,
                             min_new_tokens=STEPS + 1, do_sample=False,
                             stopping_criteria=StoppingCriteriaList([Stamp()]))
    return [(b - a) * 1000 for a, b in zip(stamps, stamps[1:], strict=False)], out[0, ids.shape[1]:].tolist()


def graphed(model, ids, k_steps=1, mode="max-autotune-no-cudagraphs", max_len=512):
    """Capture k_steps greedy decode steps (argmax + position increment on the device) as one graph."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=max_len)

    def step(tok, pos):
        return model(tok, past_key_values=cache, cache_position=pos, use_cache=True).logits[:, -1]

    fn = torch.compile(step, dynamic=False, mode=mode)
    L = ids.shape[1]
    tok = torch.zeros(1, 1, dtype=torch.long, device="cuda")
    pos = torch.zeros(1, dtype=torch.long, device="cuda")
    hist = torch.zeros(k_steps, dtype=torch.long, device="cuda")

    def body():
        for i in range(k_steps):
            logits = fn(tok, pos)
            nxt = logits.argmax(-1, keepdim=True)
            tok.copy_(nxt)
            hist[i : i + 1].copy_(nxt[0])
            pos.add_(1)

    def prefill():
        cache.reset()
        logits = model(ids, past_key_values=cache, cache_position=torch.arange(L, device="cuda"),
                       use_cache=True).logits[:, -1]
        tok.copy_(logits.argmax(-1, keepdim=True))
        pos.fill_(L)

    t0 = time.perf_counter()
    with torch.inference_mode():
        prefill()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                body()
        torch.cuda.current_stream().wait_stream(s)
        prefill()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        prep = time.perf_counter() - t0
        prefill()
        toks = [int(tok[0, 0])]
        ev, wall = [], []
        for _ in range(STEPS // k_steps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            t = time.perf_counter()
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            wall.append((time.perf_counter() - t) * 1000 / k_steps)
            ev.append(a.elapsed_time(b) / k_steps)
            toks += hist.tolist()
    return ev, wall, toks[: STEPS + 1], prep


def kernels_per_step(model):
    """Kernels launched by one compiled decode step (profiled outside a graph)."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=512)
    fn = torch.compile(lambda t, p: model(t, past_key_values=cache, cache_position=p, use_cache=True).logits[:, -1],
                       dynamic=False, mode="max-autotune-no-cudagraphs")
    tok = torch.zeros(1, 1, dtype=torch.long, device="cuda")
    pos = torch.full((1,), 3, dtype=torch.long, device="cuda")
    with torch.inference_mode():
        for _ in range(3):
            fn(tok, pos)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn(tok, pos)
            torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total_us = sum(e.device_time for e in ev) if ev and hasattr(ev[0], "device_time") else None
    return len(ev), total_us


def main():
    bw = bandwidth()
    model = build_model()
    nbytes = sum(p.numel() for p in model.parameters()) * 2
    roof = nbytes / (bw * 1e9) * 1000
    log(f"bandwidth {bw:.0f} GB/s; weights {nbytes / 1e9:.3f} GB; roofline {roof:.3f} ms/step")
    ids = prompt_ids()
    res = {"bandwidth_gb_s": bw, "weight_gb": nbytes / 1e9, "roofline_ms": roof, "variants": {}}
    nv, ref = naive(model, ids)
    res["variants"]["naive"] = {"wall_ms": med(nv)}
    ROWS.append(("naive generate()", None, med(nv)[0], "-", "-"))

    def agree(toks):
        return next((i for i, (a, b) in enumerate(zip(ref, toks, strict=False)) if a != b), len(toks))

    try:
        res["kernels_unfused"] = kernels_per_step(model)
    except Exception as e:  # noqa: BLE001
        res["kernels_unfused"] = str(e)[:200]
    import torch._inductor.config as ic

    plan = [("graph", False, 1, None), ("graph+fuse+coord", True, 1, "coord"),
            ("fuse+coord multi-16", True, 16, "coord")]
    fused = False
    for label, want_fuse, k, knob in plan:
        ic.coordinate_descent_tuning = knob == "coord"
        torch._dynamo.reset()
        if want_fuse and not fused:
            fuse(model)
            fused = True
            try:
                res["kernels_fused"] = kernels_per_step(model)
            except Exception as e:  # noqa: BLE001
                res["kernels_fused"] = str(e)[:200]
            torch._dynamo.reset()
        try:
            t = time.perf_counter()
            ev, wall, toks, prep = graphed(model, ids, k)
            e50 = med(ev)
            res["variants"][label] = {"event_ms": e50, "wall_ms": med(wall), "prep_s": prep,
                                      "greedy_agree": agree(toks), "of": len(toks), "roofline_frac": roof / e50[0]}
            ROWS.append((label, e50, med(wall)[0], f"{roof / e50[0] * 100:.1f}%", f"{agree(toks)}/{len(toks)}"))
            log(f"{label}: {e50[0]:.3f} ms/step ({time.perf_counter() - t:.0f} s)")
        except Exception as e:  # noqa: BLE001
            res["variants"][label] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            log(f"{label} failed: {res['variants'][label]['error']}")
    log(f"kernels per step unfused/fused: {res.get('kernels_unfused')} / {res.get('kernels_fused')}")
    print(f"{'variant':36s} {'event ms/step p50 (p5-p95)':28s} {'wall ms':>8s} {'roofline':>9s} greedy")
    for label, e, w, frac, ag in ROWS:
        es = f"{e[0]:.3f} ({e[1]:.3f}-{e[2]:.3f})" if e else "-"
        print(f"{label:36s} {es:28s} {w:8.3f} {frac:>9s} {ag}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "decode_probe.json"), "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
