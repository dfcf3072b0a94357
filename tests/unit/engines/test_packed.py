"""Packed (padding-free) batches for decoder embedders, run on the CPU with the text-by-text SDPA stand-in for
FlashAttention varlen: the layout (positions restart per text, filler text, empty slots), the batch planner, and
the pooled vectors of a packed batch against each text run alone, for a tiny random Qwen3 (GQA, q/k norms) and,
where converted, the real SmolLM2 weights. The kernel and the graphs themselves need a GPU
(tests/gpu/test_cuda_graphs.py)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from infertune.batching import plan_packed
from infertune.engines import varlen
from infertune.engines.packed_graphs import packed_grid, slot_bucket, token_bucket
from infertune.models.embedding import row_cosines

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
from tiny_models import tiny_model_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
TEXTS = ["hi", "What is the capital of France?", "ok",
         "The quarterly report shows revenue growth of four percent, driven mostly by cloud services in Europe.",
         "Transformers use attention to mix information across positions in a sequence.", "a b c d e f g", "x"]


def test_buckets_bound_the_filler_and_the_shape_count():
    for n in range(1, 40000, 7):
        t = token_bucket(n)
        assert n <= t and t - n < (256 if n <= 4096 else 512 if n <= 8192 else 1024 if n <= 16384 else 2048)
    for k in range(0, 3000):
        s = slot_bucket(k)
        assert s >= k + 1 and (s == 16 or s < 2 * (k + 1))
    grid = packed_grid(16384, 512)
    assert len(grid) <= 140 and all(t <= 16384 and s <= 128 for t, s in grid)
    assert grid == sorted(grid, key=lambda x: (x[0] * x[1], x)) and grid[0] == (256, 16)


def test_plan_packed_keeps_order_fills_the_budget_and_splits_evenly():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lens = rng.integers(1, 513, size=int(rng.integers(1, 300))).tolist()
        plan = plan_packed(lens, 4096, 64)
        assert [i for b in plan for i in b] == list(range(len(lens)))  # every item once, arrival order
        sums = [sum(lens[i] for i in b) for b in plan]
        assert all(s <= 4096 or len(b) == 1 for s, b in zip(sums, plan, strict=True))
        assert all(len(b) <= 64 for b in plan)
        # no more batches than twice the fewest possible
        fewest = max(-(-sum(lens) // 4096), -(-len(lens) // 64))
        assert len(plan) <= 2 * fewest
    assert plan_packed([], 4096, 64) == []
    assert plan_packed([5000], 4096, 64) == [[0]]  # one text over the budget still runs


def test_packed_layout():
    ids = np.array([[5, 6, 7, 0], [8, 0, 0, 0], [9, 10, 0, 0]])
    mask = (ids != 0).astype(np.int64)
    p = varlen.Packed(ids, mask, pad_id=0, tokens=10, slots=16)
    assert p.n == 3 and p.ids.tolist() == [5, 6, 7, 8, 9, 10, 0, 0, 0, 0]
    assert p.cu.tolist()[:6] == [0, 3, 4, 6, 10, 10] and len(p.cu) == 17 and p.cu[-1] == 10
    assert p.pos.tolist() == [0, 1, 2, 0, 0, 1, 0, 1, 2, 3]  # positions restart per text; filler too
    assert p.last[:3].tolist() == [2, 3, 5] and p.first[:3].tolist() == [0, 3, 4]
    assert p.seg.tolist() == [0, 0, 0, 1, 2, 2, 3, 3, 3, 3] and p.lens[:4].tolist() == [3, 1, 2, 4]
    wrapped = varlen.Packed(ids, mask, pad_id=0, tokens=10, slots=16, max_len=3)  # a position table of 3 rows
    assert wrapped.pos.tolist() == [0, 1, 2, 0, 0, 1, 0, 1, 2, 0]  # the filler's positions wrap; texts' do not
    exact = varlen.Packed(ids, mask, pad_id=0)  # no buckets: the batch's own tokens and one empty filler
    assert len(exact.ids) == 6 and exact.cu.tolist() == [0, 3, 4, 6, 6]


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    """A 2-layer random Qwen3 embedder (GQA 4:2 heads, q/k norms), MiniLM's tokenizer."""
    return str(tiny_model_dir(tmp_path_factory.mktemp("m"), "Qwen3-Embedding-tiny", {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": 30522, "max_position_embeddings": 512, "tie_word_embeddings": True,
        "torch_dtype": "float32"}))


def _emb(model: str):
    from infertune.engines.embedding_artifact import load_model
    from infertune.engines.packed_graphs import PackedGraphEmbedder

    return PackedGraphEmbedder(load_model(model, "cpu", task="embed"))


def _alone(g, ids):
    from infertune.engines.torch_eager import TorchEmbedder

    return np.concatenate([TorchEmbedder.forward(g, g.collate([row])) for row in ids])


def _packed_equals_alone(g) -> tuple[dict, np.ndarray, int]:
    """Checks `g` (graphs off: they need a GPU) on TEXTS: a packed batch at a graph's bucketed size (filler
    tokens, empty slots) and then the engine's path (packing checked once against the padded forward, batches
    run packed at their own size) both give each text's vector run alone. Returns the batch, the engine's
    output and the batch's real tokens."""
    import torch

    g.on = False
    ids = g.token_ids(TEXTS)
    batch = g.collate(ids)
    want = _alone(g, ids)
    used = int(batch["attention_mask"].sum())
    p = varlen.Packed(batch["input_ids"], batch["attention_mask"], g.pad_id, token_bucket(used), slot_bucket(len(ids)))
    with torch.inference_mode():
        got = g._run_packed(g._tensors(p))[: len(ids)].numpy()
    assert row_cosines(got, want).min() >= 0.99999, row_cosines(got, want)
    out = g.forward(batch)
    assert g.packed and row_cosines(out, want).min() >= 0.99999
    return batch, out, used


@pytest.fixture(scope="module")
def loaded():
    """Models loaded in this module, by path: SmolLM2's weights are read once for both poolings (each test wraps
    the loaded model in its own engine, whose state is its own)."""
    return {}


@pytest.mark.parametrize("which", ["tiny-qwen3", "smollm2"])
@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_packed_batch_equals_each_text_alone(which, pooling, tiny_qwen3, loaded):
    from infertune.engines.embedding_artifact import load_model
    from infertune.engines.packed_graphs import PackedGraphEmbedder

    model = tiny_qwen3 if which == "tiny-qwen3" else str(ROOT / ".cache" / "smollm2_hf")
    if which == "smollm2" and not Path(model, "config.json").exists():
        pytest.skip("SmolLM2 HF directory not converted (make vllm-env)")
    if model not in loaded:
        loaded[model] = load_model(model, "cpu", task="embed")
    g = PackedGraphEmbedder(loaded[model])
    g.spec = dataclasses.replace(g.spec, pooling=pooling)
    assert varlen.why_not(g) is None
    _, _, used = _packed_equals_alone(g)
    assert g.stats["packing_check_cosine"] >= 0.99999 and g.ran_tokens == used


def test_a_packing_mismatch_falls_back_to_padded_batches(tiny_qwen3, monkeypatch):
    """A varlen kernel that gives other rows (here: zeros) fails the packing check: the engine logs it and runs
    padded batches, answering from the padded forward."""
    import torch

    g = _emb(tiny_qwen3)
    g.on = False
    monkeypatch.setattr(varlen, "_reference", lambda q, *a: torch.zeros_like(q))
    ids = g.token_ids(TEXTS)
    batch = g.collate(ids)
    out = g.forward(batch)
    assert not g.packed and g.pad_rows(5) >= 5
    assert row_cosines(out, _alone(g, ids)).min() >= 0.99999


def test_an_encoder_packs_only_when_asked_and_equals_each_text_alone():
    """MiniLM (BERT, bidirectional, token types, mean pooling), real weights: packed only with encoders=True
    (`--cuda-graphs packed`); then a bucketed packed batch gives each text's vector run alone."""
    import torch

    from infertune.engines.embedding_artifact import load_model
    from infertune.engines.packed_graphs import PackedGraphEmbedder

    emb = load_model("minilm", "cpu")
    assert "decoder" in varlen.why_not(emb) and varlen.why_not(emb, encoders=True) is None
    g = PackedGraphEmbedder(emb)
    batch, out, used = _packed_equals_alone(g)
    # a graph's filler can be longer than BERT's 512-row position table (a 4,096-token bucket): positions wrap
    p = varlen.Packed(batch["input_ids"], batch["attention_mask"], g.pad_id, used + 1500, 16, max_len=g.max_len)
    with torch.inference_mode():
        got = g._run_packed(g._tensors(p))[: len(out)].numpy()
    assert row_cosines(got, out).min() >= 0.99999


def test_why_not_packs_only_decoders_by_default(tiny_qwen3):
    from infertune.engines.embedding_artifact import load_model

    assert "decoder" in varlen.why_not(load_model("minilm", "cpu"))
    emb = load_model(tiny_qwen3, "cpu", task="embed")
    emb.spec = dataclasses.replace(emb.spec, pooling="max")
    assert "pooling" in varlen.why_not(emb)


def test_length_buckets_are_few_and_cover_the_longest_text():
    from infertune.engines.packed_graphs import len_bucket

    for longest in range(1, 40961, 13):
        b = len_bucket(longest, 512, 40960)
        assert longest <= b <= 40960 and (b == 512 or b < 2 * longest)
    assert len({len_bucket(n, 512, 40960) for n in range(1, 40961)}) == 8  # 512 .. 32,768, 40,960


class _Rerun:
    """A CPU stand-in for a captured graph: `replay` runs the recorded forward again on the static inputs."""

    def __init__(self, again):
        self.replay = again


def test_a_batch_with_a_long_text_gets_its_own_graph_at_its_length_bucket(tmp_path, monkeypatch):
    """A text over 512 tokens no longer sends its batch out of the graphs: the batch is captured at its length
    bucket (here 1,024), answered from the replay from then on, and each text's vector is the one it has alone."""
    import torch

    from infertune.engines.cuda_graphs import _Shape

    model = str(tiny_model_dir(tmp_path, "Qwen3-Embedding-tiny-long", {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": 30522, "max_position_embeddings": 4096, "tie_word_embeddings": True,
        "torch_dtype": "float32"}))
    g = _emb(model)

    def record(run, inputs):
        with torch.inference_mode():
            out = run(**inputs)
        shape = _Shape(None, inputs, out)

        def again():
            with torch.inference_mode():
                shape.out.copy_(run(**shape.inputs))
        shape.graph = _Rerun(again)
        return shape, out.numpy().copy()

    monkeypatch.setattr(g, "_record", record)
    texts = TEXTS + ["word " * 700]
    ids = g.token_ids(texts)
    assert max(map(len, ids)) > 600
    batch = g.collate(ids)
    first = g.forward(batch)  # packing checked, then the shape captured
    keys = [k for k, v in g.shapes.items() if v is not None]
    assert keys and all(k[2] == 1024 for k in keys), g.shapes
    again = g.forward(batch)
    assert g.stats["replays"] == 1
    want = _alone(g, ids)
    assert row_cosines(first, want).min() >= 0.99999 and row_cosines(again, want).min() >= 0.99999
