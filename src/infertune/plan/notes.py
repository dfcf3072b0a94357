"""The notes plan adds for a layout: tensor parallel over NVLink or PCIe, and mixture-of-experts advice."""

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
