"""The notes plan adds for a layout: tensor parallel over NVLink or PCIe, mixture-of-experts advice, and what the
vLLM plan assumed."""

from __future__ import annotations

from typing import Any

from infertune.plan.arch import Arch


def interconnect_of(g: dict[str, Any], given: str = "auto") -> str:
    """SXM/HGX boards connect every GPU through NVLink switches; PCIe cards (NVL pairs, optional bridges
    aside) and GeForce cards talk over PCIe."""
    if given != "auto":
        return given
    n = g["name"].upper()
    return "nvlink" if n.endswith("-SXM") or n.startswith("B200") else "pcie"


def parallel_notes(g: dict[str, Any], tp: int, given: str = "auto") -> list[str]:
    if tp <= 1:
        return []
    link = interconnect_of(g, given)
    how = "given" if given != "auto" else (f"assumed for {g['name']}; "
                                           "pass --interconnect if `nvidia-smi topo -m` says otherwise")
    if link == "nvlink":
        return [f"TP={tp} over NVLink ({how}): the per-layer all-reduces are cheap"]
    out = [f"TP={tp} over PCIe ({how}): two all-reduces per layer cross PCIe, which costs decode latency; "
           "if the model fits fewer GPUs, one replica per GPU behind a load balancer usually serves more, and "
           "--pipeline-parallel-size sends activations only once per stage boundary"]
    if g.get("kind") in ("consumer", "laptop"):
        out.append("GeForce cards have no NVLink and peer-to-peer is often disabled: if NCCL hangs at start, try "
                   "NCCL_P2P_DISABLE=1 (`infertune doctor explain` knows the signature)")
    return out


def moe_notes(a: Arch, gpus: int) -> list[str]:
    out = [f"MoE: {a.experts} experts, {a.experts_per_tok} active per token ({a.params(active=True) / 1e9:.2f} B of "
           f"{a.params() / 1e9:.2f} B parameters): decode reads only the active experts' weights, but all of them "
           "must be resident"]
    if gpus > 1:
        out.append("MoE over several GPUs: add --enable-expert-parallel (experts sharded whole across GPUs instead "
                   "of every expert split by TP; fewer, larger matmuls)")
    out.append("MoE with CUDA graphs: vLLM captures graphs for decode batch sizes up to --max-num-seqs; keep them "
               "(no --enforce-eager) unless capture fails, then lower --max-num-seqs first")
    return out


def vllm_notes(a: Arch, g: dict[str, Any], cfg: Any, tp: int, batched: int, seqs: int) -> list[str]:
    """What a causal LM's plan assumed (KV of sliding-window layers, spec rooflines, the activation peak's batch) and
    how vLLM's defaults (chunked prefill, prefix caching) and the interconnect shape it. `cfg`: the PlanConfig."""
    notes = []
    if a.sliding_window_layers:
        notes.append(f"{a.sliding_window_layers} sliding-window layers counted as full attention (KV overestimated)")
    notes.append("rooflines use the spec bandwidth and dense peak (an upper bound on speed); measured decode on an "
                 "H200 reaches ~86% of spec bandwidth for copies, less for small models with per-layer overheads")
    notes += parallel_notes(g, tp, cfg.interconnect)
    notes.append(f"vLLM (V1) runs chunked prefill and prefix caching by default: --max-num-batched-tokens {batched} "
                 "caps the tokens per step (smaller: steadier inter-token latency; larger: faster prefill and "
                 "throughput); prompts sharing a prefix (system prompt, few-shot) reuse its KV blocks")
    notes.append(f"activation peak modelled for max_num_batched_tokens={batched}, max_num_seqs={seqs}; "
                 f"non-torch memory {cfg.non_torch_gib} GiB per GPU (+{cfg.nccl_gib} GiB with TP > 1)")
    return notes
