"""What a CUDA graph records, run eagerly on the CPU: a batch at its bucketed shape (filler rows, masked extra
columns; an encoder with the 4D mask built from the 2D one, a decoder with none) gives the vectors of each
text run alone. The capture itself needs a GPU (tests/gpu/test_cuda_graphs.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infertune.engines.cuda_graphs import bucket_width, graph_rows, grid, why_not
from infertune.models.embedding import row_cosines

ROOT = Path(__file__).resolve().parents[3]
TEXTS = ["hi", "What is the capital of France?", "ok",
         "The quarterly report shows revenue growth of four percent, driven mostly by cloud services in Europe.",
         "Transformers use attention to mix information across positions in a sequence.", "a b c d e f g", "x"]


def test_graph_buckets_bound_the_filler_and_the_shape_count():
    for w in range(1, 600):
        b = bucket_width(w, 512)
        assert min(w, 512) <= b <= 512 and (b - w) / w <= max(0.25, 15 / w)
    assert len({bucket_width(w, 512) for w in range(1, 513)}) <= 19
    for n in range(1, 2049):
        assert n <= graph_rows(n) <= max(n + 1, 4 * n / 3)
    shapes = grid(512, 16384)
    assert all(r * w <= 16384 and r <= 64 for r, w in shapes) and len(shapes) <= 260
    assert shapes[0] == (1, 16) and shapes == sorted(shapes, key=lambda s: (s[0] * s[1], s))


def _graphed(model: str, **kw):
    from infertune.engines.cuda_graphs import GraphedEmbedder
    from infertune.engines.embedding_artifact import load_model

    return GraphedEmbedder(load_model(model, "cpu", **kw))


@pytest.mark.parametrize("model,kw", [
    ("minilm", {}),
    (str(ROOT / ".cache" / "smollm2_hf"), {"task": "embed"}),
])
def test_bucketed_4d_masked_forward_equals_the_plain_forward(model, kw):
    import torch

    if "smollm2" in model and not Path(model, "config.json").exists():
        pytest.skip("SmolLM2 HF directory not converted (make vllm-env)")
    g = _graphed(model, **kw)
    ids = g.token_ids(TEXTS)
    batch = g.collate(ids)
    # each text alone through the plain forward: no padding anywhere
    want = g.postprocess(np.concatenate([super(type(g), g).forward(g.collate([row])) for row in ids]))
    big_ids, big_mask = g.padded(batch)
    assert big_ids.shape[0] >= len(TEXTS) and big_ids.shape[1] >= batch["input_ids"].shape[1]
    assert big_mask[len(TEXTS):, 0].all()  # filler rows attend one token: no NaN
    with torch.inference_mode():
        got = g._run(torch.from_numpy(big_ids), torch.from_numpy(big_mask)).numpy()[: len(TEXTS)]
    got = g.postprocess(got)
    cos = row_cosines(got, want)
    assert cos.min() >= 0.99999, cos


def test_why_not_names_the_reason():
    from infertune.engines.embedding_artifact import load_model

    assert "CUDA device" in why_not(load_model("minilm", "cpu"))
    assert "engine" in why_not(object())


class _Replay:
    def replay(self):
        pass


def test_a_shape_that_fails_to_capture_runs_eagerly_and_a_wrong_graph_turns_graphs_off(monkeypatch):
    """The fallbacks, without a GPU: `_capture` stands in for torch.cuda.graph. A capture that raises marks its
    shape eager (the batch is still answered, by the eager forward); a graph whose replay disagrees with the
    eager rows turns graphs off; a graph that agrees is replayed from the second sight on."""
    import torch

    g = _graphed("minilm")
    batch = g.collate(g.token_ids(TEXTS[:3]))
    want = super(type(g), g).forward(batch)

    def boom(ids, mask):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(g, "_capture", boom)
    np.testing.assert_allclose(g.forward(batch), want, rtol=1e-5, atol=1e-6)
    assert g.stats["eager_shapes"] == 1 and g.shapes[g.padded(batch)[0].shape] is None and g.on
    np.testing.assert_allclose(g.forward(batch), want, rtol=1e-5, atol=1e-6)  # eager again, no new capture
    assert g.stats["eager_shapes"] == 1

    from infertune.engines.cuda_graphs import _Shape

    def capture(good: bool):
        def run(ids, mask):
            with torch.inference_mode():
                warm = g._run(torch.from_numpy(ids), torch.from_numpy(mask))
            out = warm.clone() if good else torch.randn_like(warm)
            inputs = {"ids": torch.from_numpy(ids.copy()), "mask": torch.from_numpy(mask.copy())}
            return _Shape(_Replay(), inputs, out), warm.numpy()
        return run

    other = g.collate(g.token_ids(TEXTS[:5]))  # another shape
    monkeypatch.setattr(g, "_capture", capture(good=True))
    g.forward(other)
    assert g.stats["captured"] == 1 and g.on
    g.forward(other)
    assert g.stats["replays"] == 1
    third = g.collate(g.token_ids(TEXTS))
    monkeypatch.setattr(g, "_capture", capture(good=False))
    got = g.forward(third)  # the eager rows answer; graphs go off
    assert not g.on
    np.testing.assert_allclose(got, super(type(g), g).forward(third), rtol=1e-4, atol=1e-5)


def test_with_graphs_leaves_a_cpu_engine_as_it_is_and_refuses_on():
    from infertune.engines.embedding_artifact import load_model
    from infertune.engines.graphs import with_graphs
    from infertune.errors import InfertuneError

    emb = load_model("minilm", "cpu")
    for mode in ("auto", "padded", "off"):
        got, why = with_graphs(emb, mode)
        assert got is emb and why
    for mode in ("on", "packed"):
        with pytest.raises(InfertuneError, match="CUDA device"):
            with_graphs(emb, mode)
