"""Per-layer cost of a transformer from its shape (no torch): FLOPs per token, the bytes one step moves
through each layer, and their ratio, the arithmetic intensity (FLOP/byte) that says whether a layer is
bound by memory or by compute on a GPU (below the GPU's ridge point, peak FLOP/s / bandwidth: memory).

FLOPs follow Arch.flops_per_token (2 per weight a token multiplies through; an MoE layer counts its k routed
and its shared experts only; attention over the full context square), so the per-layer figures sum to its
total. Bytes are one step at batch 1: a prefill of n tokens, or one decode step against n cached tokens.
Per step a layer reads its weights once (MoE: only the experts the step's tokens reach: k in a decode step,
E(1 - (1 - k/E)^n) expected over n uniformly routed prefill tokens), reads and writes the activations of its
matmuls (each Linear's input and output, a fused q/k/v read once, as plan's roofline counts them), and
writes (prefill) or reads (decode) its KV cache. The attention core's own traffic is left out: flash/SDPA
kernels keep scores on chip and read q, k and v, which the projections' outputs already count.
"""

from __future__ import annotations

from infertune.plan.arch import Arch


def layer_key(i: int) -> str:
    """The key inspect's tables use for block i (the FLOP counter's module names map to the same)."""
    return f"layer{i:02d}"


def mlp_params(a: Arch, i: int, active: bool = True) -> tuple[int, int]:
    """(weights every token of block i uses, routed-expert weights: the k a token picks, or all E)."""
    if not a.experts or i < a.dense_layers:
        return a.hidden * a.intermediate * (3 if a.gated_mlp else 2), 0
    shared = (a.shared_experts * a.moe_intermediate + a.shared_intermediate) * a.hidden * 3 + a.hidden * a.experts
    return shared, (a.experts_per_tok if active else a.experts) * a.moe_intermediate * a.hidden * 3


def flops_by_layer(a: Arch, context: int, phase: str = "prefill") -> dict[str, float]:
    """FLOPs per token of each block and of lm_head; they sum to a.flops_per_token(context, phase)['total']."""
    core = a.attn_core_flops(context) / a.layers
    out = {layer_key(i): 2.0 * (a.attn_params() + sum(mlp_params(a, i))) + core for i in range(a.layers)}
    if not a.encoder:
        head = 2.0 * a.vocab * a.hidden
        out["lm_head"] = head / max(context, 1) if phase == "prefill" else head
    return out


def linear_shapes(a: Arch) -> dict[tuple[int, int], int]:
    """(K, N) -> how many of the blocks' Linear layers have that shape, over the model: in K features, out N, so a
    batch of M tokens runs an M x K x N GEMM through each (2 K N FLOPs per token). q, k and v are three projections
    and a gated MLP's gate and up two, as Hugging Face's modules hold them (a model that fuses them runs one GEMM of
    their summed N instead); an MoE layer counts the k routed and the shared experts a token runs, and its router.
    The counts times K N sum to a.linear_params(active=True); lm_head and a pooler (once per input) are left out."""
    h, nq, d = a.hidden, a.heads, a.head_dim
    out: dict[tuple[int, int], int] = {}

    def add(k: int, n: int, times: int) -> None:
        if k and n and times:
            out[(k, n)] = out.get((k, n), 0) + times

    if a.mla:
        qk = a.qk_nope_dim + a.qk_rope_dim
        if a.q_lora_rank:
            add(h, a.q_lora_rank, a.layers)
            add(a.q_lora_rank, nq * qk, a.layers)
        else:
            add(h, nq * qk, a.layers)
        add(h, a.kv_lora_rank + a.qk_rope_dim, a.layers)
        add(a.kv_lora_rank, nq * (a.qk_nope_dim + a.v_head_dim), a.layers)
        add(nq * a.v_head_dim, h, a.layers)
    else:
        add(h, nq * d, a.layers)
        add(h, a.kv_heads * d, 2 * a.layers)
        add(nq * d, h, a.layers)
    dense = a.layers - a.moe_layers
    m = 2 if a.gated_mlp else 1
    add(h, a.intermediate, m * dense)
    add(a.intermediate, h, dense)
    if a.moe_layers:
        per = a.experts_per_tok + a.shared_experts
        add(h, a.moe_intermediate, 2 * per * a.moe_layers)
        add(a.moe_intermediate, h, per * a.moe_layers)
        add(h, a.shared_intermediate, 2 * a.moe_layers)
        add(a.shared_intermediate, h, a.moe_layers)
        add(h, a.experts, a.moe_layers)  # the router
    return out


def params_by_part(a: Arch) -> dict[str, int]:
    """Every parameter of the model by what it is for; the parts sum to a.params()."""
    dense = sum(mlp_params(a, i, active=False)[0] for i in range(a.layers))
    routed = sum(mlp_params(a, i, active=False)[1] for i in range(a.layers))
    parts = {"attention": a.layers * a.attn_params(), "mlp" if not a.experts else "mlp, shared experts, router": dense,
             "routed experts": routed, "embedding": a.embed_params(), "lm_head": a.lm_head_params(),
             "norms": a.layers * 2 * a.hidden + a.hidden, "encoder extras": a.encoder_extra_params()}
    return {k: v for k, v in parts.items() if v}


def weight_bytes_by_layer(a: Arch, bytes_per_param: float) -> dict[str, tuple[float, float]]:
    """(weights every token uses, routed-expert weights) in bytes per block, and lm_head's (read even when tied)."""
    out = {}
    for i in range(a.layers):
        dense, routed = mlp_params(a, i, active=False)
        out[layer_key(i)] = ((a.attn_params() + dense + 2 * a.hidden) * bytes_per_param, routed * bytes_per_param)
    if not a.encoder:
        out["lm_head"] = (a.vocab * a.hidden * bytes_per_param, 0.0)
    return out


def _attn_io(a: Arch) -> int:
    h, nq = a.hidden, a.heads
    if a.mla:
        qk = a.qk_nope_dim + a.qk_rope_dim
        q = (h + a.q_lora_rank) + (a.q_lora_rank + nq * qk) if a.q_lora_rank else h + nq * qk
        kv = (h + a.kv_lora_rank + a.qk_rope_dim) + (a.kv_lora_rank + nq * (a.qk_nope_dim + a.v_head_dim))
        return q + kv + nq * a.v_head_dim + h
    d = a.head_dim
    return h + (nq + 2 * a.kv_heads) * d + nq * d + h


def io_values_per_token(a: Arch, key: str) -> float:
    """Activation values the matmuls of `key` read and write per token (multiply by the dtype's bytes)."""
    h = a.hidden
    if key in ("lm_head", "pooler"):
        return float(h + (a.vocab if key == "lm_head" else h))
    i = int(key.removeprefix("layer"))
    if a.experts and i >= a.dense_layers:
        per_expert = (h + 2 * a.moe_intermediate) + (a.moe_intermediate + h)
        shared = (h + 2 * a.shared_intermediate) + (a.shared_intermediate + h) if a.shared_intermediate else 0
        mlp = (a.experts_per_tok + a.shared_experts) * per_expert + shared + h + a.experts  # + the router
    else:
        inter = a.intermediate
        mlp = (h + 2 * inter) + (inter + h) if a.gated_mlp else 2 * (h + inter)
    return float(_attn_io(a) + mlp)


def experts_reached(a: Arch, tokens: int) -> float:
    """Expected distinct routed experts `tokens` tokens reach, each picking k of E uniformly (k when tokens=1)."""
    if not a.experts:
        return 0.0
    return a.experts * (1.0 - (1.0 - a.experts_per_tok / a.experts) ** tokens)


def step_bytes(a: Arch, key: str, weights: tuple[float, float], phase: str, n: int, act_bytes: int,
               kv_bytes_per_layer_token: float) -> float:
    """Bytes one step at batch 1 moves through `key`: a prefill of n tokens (lm_head and a pooler run on one
    token of it) or a decode step against n cached tokens. kv_bytes_per_layer_token is 0 for what caches nothing."""
    block = key.startswith("layer")
    tokens = n if phase == "prefill" and block else 1
    dense, routed = weights
    reach = experts_reached(a, tokens) / a.experts if a.experts and routed else 1.0
    out = dense + routed * reach + tokens * io_values_per_token(a, key) * act_bytes
    if block:
        out += kv_bytes_per_layer_token * (n if phase == "prefill" else n + 1)  # write the prompt's / read n, write 1
    return out


def intensity(flops_per_token: float, step_bytes_: float, phase: str, n: int) -> float:
    """FLOP/byte of one step: a prefill's per-token FLOPs (averaged over its n tokens) times n, a decode step's as is."""  # noqa: E501
    return flops_per_token * (n if phase == "prefill" else 1) / step_bytes_ if step_bytes_ else 0.0
