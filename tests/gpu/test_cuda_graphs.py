"""CUDA graphs on a real GPU: each bucketed shape is captured once, checked against the eager forward, and
replayed; the replayed vectors equal the eager ones (how much faster replays are: benchmarks/gpu.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from infertune.models.embedding import row_cosines

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from tiny_models import tiny_model_dir  # noqa: E402

TEXTS = ["hi", "What is the capital of France?", "ok", "a b c d e f g", "x",
         "The quarterly report shows revenue growth of four percent, driven mostly by cloud services in Europe.",
         "Transformers use attention to mix information across positions in a sequence."]


@pytest.mark.gpu
def test_graphs_replay_the_eager_vectors():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from infertune.engines.embedding_artifact import load_model
    from infertune.engines.graphs import with_graphs

    model = os.environ.get("INFERTUNE_TEST_MINILM", "minilm")  # the GPU image has no embedded-model package
    eager = load_model(model, "cuda")
    g, why = with_graphs(load_model(model, "cuda"), "on")
    ids = g.token_ids(TEXTS)
    for n in (1, 3, 7):
        batch = g.collate(ids[:n])
        want = eager.forward(batch)
        first = g.forward(batch)  # first sight: eager answer, capture, check
        again = g.forward(batch)  # replay
        for got in (first, again):
            cos = row_cosines(got, want)
            assert cos.min() >= 0.9999
    assert g.on and g.stats["captured"] == 3 and g.stats["replays"] == 3, g.stats  # shapes (1,16) (3,16) (8,24)
    # how much faster a replay is than the eager forward is benchmarks/gpu.py's goal (`make bench`): a ratio
    # of two timings moves with what else runs on the box, so it is a benchmark, not a test


def _packed_graphs_equal_alone(emb, mode: str):
    """`emb` wrapped by with_graphs(mode) as packed graphs; on TEXTS the first forward (packing check, capture and
    its check) and the second (a replay) both give each text's vector run alone (half-precision bound)."""
    from infertune.engines.graphs import with_graphs
    from infertune.engines.packed_graphs import PackedGraphEmbedder
    from infertune.engines.torch_eager import TorchEmbedder

    g, why = with_graphs(emb, mode)
    assert isinstance(g, PackedGraphEmbedder), why
    ids = g.token_ids(TEXTS)
    want = np.concatenate([TorchEmbedder.forward(g, g.collate([row])) for row in ids])
    batch = g.collate(ids)
    for got in (g.forward(batch), g.forward(batch)):
        cos = row_cosines(got, want)
        assert cos.min() >= 0.999, cos
    return g


@pytest.mark.gpu
def test_packed_graphs_give_each_text_alone(tmp_path):
    """A decoder embedder (a tiny random Qwen3 in bf16: GQA, q/k norms): packed batches through FlashAttention
    varlen, captured and replayed, give each text's vector run alone (bf16 bound)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from infertune.engines.embedding_artifact import load_model

    d = tiny_model_dir(tmp_path, "Qwen3-Embedding-tiny", {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32,
        "vocab_size": 30522, "max_position_embeddings": 512, "tie_word_embeddings": True},
        tokenizer_from=os.environ.get("INFERTUNE_TEST_MINILM", "minilm"))
    emb = load_model(str(d), "cuda", task="embed")
    emb.model.to(torch.bfloat16)
    g = _packed_graphs_equal_alone(emb, "on")
    assert g.packed and g.on and g.stats["captured"] == 1 and g.stats["replays"] == 1, g.stats
    print(f"packed graphs: check cosine {g.stats['packing_check_cosine']}, graph {g.stats['worst_check_cosine']}",
          file=sys.stderr)


@pytest.mark.gpu
def test_packed_encoder_graphs_give_each_text_alone():
    """MiniLM in fp16 with --cuda-graphs packed: bidirectional FlashAttention varlen, token types, mean pooling,
    captured and replayed, give each text's vector run alone (half-precision bound)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from infertune.engines.embedding_artifact import load_model

    emb = load_model(os.environ.get("INFERTUNE_TEST_MINILM", "minilm"), "cuda")
    emb.model.half()
    g = _packed_graphs_equal_alone(emb, "packed")
    assert g.packed and g.on and g.stats["replays"] == 1, g.stats
    print(f"packed encoder graphs: check cosine {g.stats['packing_check_cosine']}", file=sys.stderr)


@pytest.mark.gpu
@pytest.mark.parametrize("precision,quant", [("bf16", None), ("fp8", "torchao-fp8")])
def test_compiled_packed_graphs_give_each_text_alone(tmp_path, precision, quant):
    """torch.compile'd block by block (one compile for the 4 blocks), in packed CUDA graphs: each text's vector
    as the uncompiled model gives it alone (bf16 bound; fp8 rowwise against its own eager twin: its quantized GEMMs
    round the same way). The first compile is timed and keyed."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if quant and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs compute capability >= 8.9")
    from infertune.config import Candidate
    from infertune.engines.graphs import with_graphs
    from infertune.engines.packed_graphs import PackedGraphEmbedder
    from infertune.engines.torch_compile import TorchCompile, warm_compile
    from infertune.models.embedding import embedding_spec
    from infertune.models.resolve import resolve_model

    d = tiny_model_dir(tmp_path, "Qwen3-Embedding-tiny", {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32,
        "vocab_size": 30522, "max_position_embeddings": 512, "tie_word_embeddings": True, "torch_dtype": "bfloat16"},
        tokenizer_from=os.environ.get("INFERTUNE_TEST_MINILM", "minilm"))
    spec = embedding_spec(resolve_model(str(d)), None, "embed", None, None)
    cand = Candidate(backend="torch-compile", precision=precision, quant=quant)
    emb = TorchCompile.prepare(spec, cand, "cuda", tmp_path / "work")
    g, why = with_graphs(emb, "on")
    assert isinstance(g, PackedGraphEmbedder), why
    rec = warm_compile(g)
    assert rec["seconds"] > 0 and rec["cache_key"] and rec["scope"].startswith("regional (4 x"), rec
    ids = g.token_ids(TEXTS)
    want = np.concatenate([g.reference_forward(g.collate([row])) for row in ids])
    batch = g.collate(ids)
    for got in (g.forward(batch), g.forward(batch)):  # capture and its check, then a replay
        cos = row_cosines(got, want)
        assert cos.min() >= 0.999, cos
    assert g.packed and g.on and g.stats["replays"] >= 1, g.stats
    print(f"compiled {precision} packed graphs: compile {rec}, min cosine {cos.min():.6f}", file=sys.stderr)
