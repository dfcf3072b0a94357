"""A transformer's shape read from config.json, and what follows from it analytically (no torch).

Parameters, weight bytes per dtype, KV-cache bytes per token (MHA/GQA/MQA and MLA) and FLOPs per token.
FLOP convention: a (m x k) @ (k x n) matmul costs 2*m*k*n. Attention scores and values cost 4*H*d*L per
query token over L keys (QK^T and AV, counted over the full L x L square as FLOP counters do; a causal
kernel skips about half in prefill). `infertune inspect` checks these figures against torch's FLOP counter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError

DTYPE_BYTES = {"fp32": 4.0, "float32": 4.0, "bf16": 2.0, "bfloat16": 2.0, "fp16": 2.0, "float16": 2.0,
               "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2.5 / 128}  # int4: 4-bit + fp16 scale & 4-bit zero per 128
ENCODER_TYPES = {"bert", "roberta", "xlm-roberta", "mpnet", "distilbert", "electra", "deberta", "deberta-v2",
                 "modernbert", "nomic_bert", "new", "camembert", "albert"}

ROTARY_ENCODERS = {"modernbert", "nomic_bert", "new"}  # rotary positions, no Linear biases
POOLER_ENCODERS = {"bert", "roberta", "xlm-roberta", "camembert", "mpnet"}  # HF *Model adds a dense pooler


def load_config(model: str | Path) -> dict[str, Any]:
    """config.json of a model directory, a path to the file itself, or an alias (minilm)."""
    p = Path(str(model)).expanduser()
    if not p.exists():
        from infertune.models.resolve import resolve_model

        p = resolve_model(str(model)).path
    if p.is_file() and p.suffix in (".pt", ".pth", ".gguf", ".safetensors", ".onnx", ".bin"):
        raise InfertuneError(f"{p} is a weights file ({p.suffix}): plan reads the architecture from config.json; pass "
                             "the model's directory or its config.json"
                             + (" (`infertune export` reads a .pt)" if p.suffix in (".pt", ".pth") else ""))
    if p.is_dir():
        p = p / "config.json"
    if not p.exists():
        raise InfertuneError(f"no config.json at {p}; pass a model directory or its config.json")
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise InfertuneError(f"cannot read {p}: {e}") from e


def _text(cfg: dict) -> dict:
    for path in (("text_config",), ("thinker_config", "text_config"), ("llm_config",), ("language_config",)):
        sub: Any = cfg
        for k in path:
            sub = sub.get(k) if isinstance(sub, dict) else None
        if isinstance(sub, dict) and sub.get("hidden_size"):
            return {**sub, "architectures": cfg.get("architectures", [])}
    return cfg


@dataclass(frozen=True)
class Arch:
    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    encoder: bool
    gated_mlp: bool
    max_positions: int
    dtype: str
    # MoE
    experts: int = 0
    experts_per_tok: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    shared_intermediate: int = 0
    dense_layers: int = 0  # leading dense layers before the MoE ones (DeepSeek first_k_dense_replace)
    # MLA (DeepSeek-V2/V3)
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    sliding_window_layers: int = 0
    # encoders (BERT family): what a decoder count leaves out
    position_embeddings: int = 0  # absolute position table rows (0: rotary / relative)
    type_vocab: int = 0  # token_type_ids table rows
    biases: bool = False  # Linear and LayerNorm biases
    pooler: bool = False  # HF's dense pooler (BertModel, RobertaModel, MPNetModel)

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts else 0

    # ---- parameters -------------------------------------------------------------------------------
    def attn_params(self) -> int:
        h, nq = self.hidden, self.heads
        if self.mla:
            qk = self.qk_nope_dim + self.qk_rope_dim
            q = h * self.q_lora_rank + self.q_lora_rank * nq * qk if self.q_lora_rank else h * nq * qk
            kv = (h * (self.kv_lora_rank + self.qk_rope_dim)
                  + self.kv_lora_rank * nq * (self.qk_nope_dim + self.v_head_dim))
            return q + kv + nq * self.v_head_dim * h
        d = self.head_dim
        return h * nq * d + 2 * h * self.kv_heads * d + nq * d * h

    def mlp_params(self, active: bool = False) -> int:
        """All MLP/expert weights over the model (active=True: only the experts a token uses)."""
        m = 3 if self.gated_mlp else 2
        dense = self.hidden * self.intermediate * m * (self.layers - self.moe_layers)
        if not self.experts:
            return dense
        n = self.experts_per_tok if active else self.experts
        per_layer = (n * self.moe_intermediate + self.shared_experts * self.moe_intermediate
                     + self.shared_intermediate) * self.hidden * 3 + self.hidden * self.experts  # + router
        return dense + per_layer * self.moe_layers

    def embed_params(self) -> int:
        return self.vocab * self.hidden

    def lm_head_params(self) -> int:
        return 0 if (self.tied or self.encoder) else self.vocab * self.hidden

    def encoder_extra_params(self) -> int:
        """Position and token-type tables, biases (Linear and LayerNorm) and the pooler; 0 for decoders."""
        h = self.hidden
        extra = (self.position_embeddings + self.type_vocab) * h + h * int(self.pooler) * (h + 1)
        if self.biases:
            qkv_o = self.heads * self.head_dim + 2 * self.kv_heads * self.head_dim + h
            extra += self.layers * (qkv_o + self.intermediate + h + 2 * h) + h  # + LayerNorm biases, embeddings' LN
        return extra

    def params(self, active: bool = False) -> int:
        norms = self.layers * 2 * self.hidden + self.hidden
        return (self.layers * self.attn_params() + self.mlp_params(active) + self.embed_params()
                + self.lm_head_params() + norms + self.encoder_extra_params())

    def linear_params(self, active: bool = False) -> int:
        """Weights inside transformer blocks' Linear layers (what weight quantization shrinks)."""
        return self.layers * self.attn_params() + self.mlp_params(active)

    def weights_bytes(self, dtype: str = "bf16", active: bool = False) -> int:
        """Quantized formats shrink Linear layers; embeddings, lm_head and norms stay 16-bit."""
        b = DTYPE_BYTES[dtype]
        rest = self.params(active) - self.linear_params(active)
        return int(self.linear_params(active) * b + rest * (4.0 if b == 4.0 else 2.0))

    def decode_read_bytes(self, dtype: str = "bf16") -> int:
        """Bytes of weights one decode step reads: all active weights, except that an untied input
        embedding table is only gathered one row per token."""
        untied_embed = 0 if self.tied else self.embed_params() * (4 if DTYPE_BYTES[dtype] == 4.0 else 2)
        return self.weights_bytes(dtype, active=True) - untied_embed

    # ---- KV cache ---------------------------------------------------------------------------------
    def kv_heads_per_gpu(self, tp: int = 1) -> int:
        """vLLM: KV heads are split across TP ranks and replicated when TP > KV heads; MLA keeps 1."""
        return 1 if self.mla else max(1, self.kv_heads // tp)

    def kv_bytes_per_token(self, kv_dtype: str = "bf16", tp: int = 1) -> int:
        """Per GPU, summed over layers. MLA caches one latent (kv_lora_rank + rope dim) per token, no 2x."""
        if self.encoder:
            return 0
        b = DTYPE_BYTES[kv_dtype]
        if self.mla:
            return int(self.layers * (self.kv_lora_rank + self.qk_rope_dim) * b)
        return int(self.layers * 2 * self.kv_heads_per_gpu(tp) * self.head_dim * b)

    # ---- FLOPs ------------------------------------------------------------------------------------
    def attn_core_flops(self, context: int) -> float:
        """Scores + weighted values for one query token attending to `context` keys, all layers."""
        qk = self.qk_nope_dim + self.qk_rope_dim if self.mla else self.head_dim
        v = self.v_head_dim if self.mla else self.head_dim
        return float(self.layers * 2 * self.heads * (qk + v) * context)

    def flops_per_token(self, context: int, phase: str = "prefill") -> dict[str, float]:
        """prefill: average per prompt token over a `context`-token prompt (lm_head once per prompt,
        attention over the full square); decode: one new token attending to `context` cached tokens."""
        linear = 2.0 * self.linear_params(active=True)
        head = 2.0 * self.vocab * self.hidden * (0 if self.encoder else 1)
        if phase == "prefill":
            head /= max(context, 1)
        attn = self.attn_core_flops(context)
        return {"linear": linear, "attention": attn, "lm_head": head, "total": linear + attn + head}

    def activation_bytes_per_token(self, dtype: str = "bf16", tp: int = 1) -> int:
        """Peak live activations per batched token in vLLM's profile run: the MLP's fused gate_up output
        (2I), its activation output (I) and ~3 hidden-sized buffers (residual, normed input, output)."""
        inter = self.intermediate
        if self.experts:
            inter = max(self.intermediate if self.dense_layers else 0,
                        self.experts_per_tok * self.moe_intermediate + self.shared_experts * self.moe_intermediate)
        b = 2 if DTYPE_BYTES.get(dtype, 2) <= 2 else 4
        return int(b * (3 * inter / tp + 3 * self.hidden))


def arch_from_config(cfg: dict[str, Any]) -> Arch:
    c = _text(cfg)
    g = c.get
    h = g("hidden_size") or g("d_model") or g("n_embd")
    layers = g("num_hidden_layers") or g("n_layer") or g("num_layers")
    heads = g("num_attention_heads") or g("n_head")
    if not (h and layers and heads):
        raise InfertuneError("config.json lacks hidden_size / num_hidden_layers / num_attention_heads; "
                             "is it a transformer language or embedding model?")
    mt = str(g("model_type", ""))
    archs = " ".join(c.get("architectures") or [])
    encoder = mt in ENCODER_TYPES and "CausalLM" not in archs
    kv = g("num_key_value_heads") or (1 if g("multi_query") else heads)
    experts = g("n_routed_experts") or g("num_experts") or g("num_local_experts") or 0
    dense_layers = g("first_k_dense_replace", 0) if experts else 0
    layer_types = g("layer_types") or []
    act = str(g("hidden_act") or g("hidden_activation") or g("activation_function") or "")
    gated = not encoder and mt not in ("gpt2", "gpt_neox", "opt", "falcon", "bloom", "phi") and "gelu_new" not in act
    return Arch(
        model_type=mt, hidden=int(h), layers=int(layers), heads=int(heads), kv_heads=int(kv),
        head_dim=int(g("head_dim") or h // heads), intermediate=int(g("intermediate_size") or g("ffn_dim") or 4 * h),
        vocab=int(g("vocab_size") or 0), tied=bool(g("tie_word_embeddings", True)), encoder=encoder, gated_mlp=gated,
        max_positions=int(g("max_position_embeddings") or g("n_positions") or 0),
        dtype=str(g("torch_dtype") or g("dtype") or "float32"),
        experts=int(experts), experts_per_tok=int(g("num_experts_per_tok") or 0),
        moe_intermediate=int(g("moe_intermediate_size") or 0), shared_experts=int(g("n_shared_experts") or 0),
        shared_intermediate=int(g("shared_expert_intermediate_size") or 0), dense_layers=int(dense_layers or 0),
        kv_lora_rank=int(g("kv_lora_rank") or 0), q_lora_rank=int(g("q_lora_rank") or 0),
        qk_nope_dim=int(g("qk_nope_head_dim") or 0), qk_rope_dim=int(g("qk_rope_head_dim") or 0),
        v_head_dim=int(g("v_head_dim") or 0),
        sliding_window_layers=sum(1 for t in layer_types if "sliding" in str(t)),
        position_embeddings=int(g("max_position_embeddings") or 0) if encoder and mt not in ROTARY_ENCODERS
        and g("position_embedding_type", "absolute") == "absolute" else 0,
        type_vocab=int(g("type_vocab_size") or 0) if encoder else 0,
        biases=encoder and mt not in ROTARY_ENCODERS, pooler=encoder and mt in POOLER_ENCODERS,
    )
