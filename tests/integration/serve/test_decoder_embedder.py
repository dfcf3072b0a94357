"""A real decoder used as an embedder: the embedded SmolLM2-135M weights (converted from the package's GGUF to
an HF directory by `make vllm-env`), last-token pooling, normalised. Direct (right-padded batches, and a
left-padded batch) and served outputs must equal a hand-computed reference: each text alone through
transformers' AutoModel, the last token's hidden state, unit length."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from serve_helpers import ROOT, bench, cos_rows, embed

SMOL = ROOT / ".cache" / "smollm2_hf"
PROMPT = "Instruct: find the passage that answers the question\nQuery: "
TEXTS = [
    "hi",
    "What is the capital of France?",
    "The quarterly report shows revenue growth of four percent, driven mostly by cloud services in Europe.",
    "def add(a, b):\n    return a + b",
    "Le chat est sur la table, et le chien dort sous la chaise pendant que la pluie tombe dehors sans arrêt. "
    "Personne ne sait quand elle s'arrêtera, mais tout le monde espère que ce sera avant le week-end.",
    "ok",
    "Transformers use attention to mix information across positions in a sequence.",
]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not (SMOL / "config.json").exists(),
                                reason=f"{SMOL} is missing: `make vllm-env` (part of `make test`) converts it")]


@pytest.fixture(scope="module")
def reference():
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(SMOL)
    model = AutoModel.from_pretrained(SMOL, dtype=torch.float32).eval()

    def ref(texts: list[str]) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for t in texts:  # one at a time: no padding anywhere
                ids = torch.tensor([tok(t)["input_ids"]])
                h = model(input_ids=ids).last_hidden_state[0, -1].float().numpy()
                out.append(h / np.linalg.norm(h))
        return np.array(out)

    return ref


def test_direct_right_and_left_padded_equal_the_reference(reference):
    from transformers import AutoTokenizer

    from infertune.engines.embedding_artifact import load_model

    emb = load_model(SMOL, "cpu", task="embed")
    assert (emb.spec.arch, emb.spec.pooling, emb.spec.normalize) == ("decoder", "last", True)
    want = reference(TEXTS)
    right = emb.embed(TEXTS)  # length-sorted batches, right-padded by the embedder's collate
    tok = AutoTokenizer.from_pretrained(SMOL, padding_side="left")
    tok.pad_token = tok.pad_token or tok.eos_token
    enc = tok(TEXTS, padding=True, return_tensors="np")
    assert enc["attention_mask"][:, 0].min() == 0  # really left-padded, mixed lengths
    left = emb.postprocess(emb.forward({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}))
    c_right, c_left = cos_rows(right, want), cos_rows(left, want)
    print(f"SmolLM2 as embedder vs hand-computed: right-padded min cos {c_right.min():.7f}, left-padded "
          f"{c_left.min():.7f} (n={len(TEXTS)})", file=sys.stderr)
    assert c_right.min() >= 0.99999 and c_left.min() >= 0.99999


def test_served_equals_the_reference_and_applies_prompts(reference):
    # --batch-tokens 512 still holds all of TEXTS in one batch (7 x 72 padded tokens), and the start's timed batches
    # stay one warm-up text each instead of up to 15 padded to the longest (4,000 tokens of SmolLM2 on a CPU)
    srv = bench.ours(str(SMOL), "--task", "embed", "--drain-s", "0", "--served-model-name", "smol",
                     "--prompt", f"query={PROMPT}", "--batch-tokens", "512", capture=True)
    try:
        srv.wait_ready(240)
        want = reference(TEXTS)
        one = np.array([d["embedding"] for d in embed(srv.url, TEXTS, model="smol").json()["data"]])
        with ThreadPoolExecutor(len(TEXTS)) as pool:  # concurrent singles: batched together by the server
            singles = np.array(list(pool.map(
                lambda t: embed(srv.url, t, model="smol").json()["data"][0]["embedding"], TEXTS)))
        query = np.array([d["embedding"] for d in
                          embed(srv.url, TEXTS[:3], model="smol", prompt_name="query").json()["data"]])
        c1, c2 = cos_rows(one, want), cos_rows(singles, want)
        c3 = cos_rows(query, reference([PROMPT + t for t in TEXTS[:3]]))
        print(f"served: one request min cos {c1.min():.7f}, concurrent singles {c2.min():.7f}, "
              f"prompt_name=query {c3.min():.7f}", file=sys.stderr)
        assert min(c1.min(), c2.min(), c3.min()) >= 0.99999
        assert cos_rows(query, want[:3]).max() < 0.9999  # the prompt really changed the input
        bad = embed(srv.url, "x", model="smol", prompt_name="nope")
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt_name", bad.text
    finally:
        srv.stop()


def test_the_naive_baseline_pools_the_decoder_as_the_spec_says(reference, tmp_path):
    """A decoder directory has no modules.json, where sentence-transformers would mean-pool: the naive baseline
    (what tune's 'x naive' divides by) must compute the same last-token embedding, or tune reports it as
    failing the accuracy budget (cos 0.925 on the H200 before)."""
    from infertune.engines.st_naive import SentenceTransformerNaive
    from infertune.models.embedding import embedding_spec
    from infertune.tasks.embedding.candidates import BASELINE

    spec = embedding_spec(SMOL, task="embed")
    naive = SentenceTransformerNaive.prepare(spec, BASELINE, "cpu", tmp_path)
    got = naive.embed(TEXTS)
    c = cos_rows(got, reference(TEXTS))
    print(f"st-naive on SmolLM2 vs hand-computed: min cos {c.min():.7f} (n={len(TEXTS)})", file=sys.stderr)
    assert c.min() >= 0.99999
