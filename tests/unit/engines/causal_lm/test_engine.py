"""The fast decode paths must produce the reference's tokens: a static cache loop is lossless vs
generate() in fp32, and int8 weight-only stays close. Tiny random Llama (2 layers), CPU."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=256, eos_token_id=255)
    m = LlamaForCausalLM(cfg).eval()
    m.generation_config.pad_token_id = 0
    return m


def test_static_loop_equals_generate_greedy(tiny):
    from infertune.engines.causal_lm.engine import GenerateEngine, StaticEngine

    prompt = [5, 17, 42, 99, 3, 7]
    ref = GenerateEngine(tiny, "cpu", 64).greedy(prompt, 12)
    got = StaticEngine(tiny, "cpu", 64).greedy(prompt, 12)
    assert len(ref) == 12 and got == ref
    assert 255 not in got  # EOS suppressed as generate(min_new_tokens=n) does


def test_score_reference_against_itself(tiny):
    from infertune.engines.causal_lm.engine import StaticEngine

    e = StaticEngine(tiny, "cpu", 64)
    seqs = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12]]
    ref = e.score(seqs)
    assert ref["n"] == 7 + 3
    same = e.score(seqs, ref)
    assert same["top1_agreement"] == 1.0
    assert abs(same["nll"] - ref["nll"]) < 1e-6 * abs(ref["nll"])
    assert same["kl_mean"] < 1e-7  # identical distributions: KL is 0 up to float rounding


def test_decode_times_per_step(tiny):
    from infertune.engines.causal_lm.engine import GenerateEngine, StaticEngine

    assert len(StaticEngine(tiny, "cpu", 64).decode_times(4, [1, 2, 3], 5)) == 5
    assert len(GenerateEngine(tiny, "cpu", 64).decode_times(2, [1, 2, 3], 5)) == 5
    with pytest.raises(ValueError, match="static cache"):
        StaticEngine(tiny, "cpu", 8).decode_times(1, [1, 2, 3, 4, 5, 6], 5)


def test_int8_weight_only_close_and_smaller(tiny):
    import copy

    from infertune.quantize.int8_weight_only import int8_weight_only
    from infertune.tasks.causal_lm.worker import decode_bytes

    x = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    base = copy.deepcopy(tiny).to(torch.bfloat16)
    q = int8_weight_only(copy.deepcopy(base))
    with torch.inference_mode():
        a, b = base(x).logits.float(), q(x).logits.float()
    # per-channel int8 rounding: relative error ~ 1/127 per weight, far below 5% on the logits
    assert (a - b).norm() / a.norm() < 0.05
    assert decode_bytes(q) < 0.6 * decode_bytes(base)


def test_eager_attention_switch_keeps_greedy_tokens(tiny):
    import copy

    from infertune.engines.causal_lm.engine import GenerateEngine, StaticEngine
    from infertune.tasks.causal_lm.worker import _eager_attention

    prompt = [5, 17, 42, 99, 3, 7]
    ref = GenerateEngine(tiny, "cpu", 64).greedy(prompt, 12)
    m = copy.deepcopy(tiny)
    _eager_attention(m)
    assert m.config._attn_implementation == "eager"
    assert StaticEngine(m, "cpu", 64).greedy(prompt, 12) == ref


def test_graph_backends_are_skipped_with_a_reason_on_cpu():
    from infertune.hardware import GPU, Capabilities
    from infertune.tasks.causal_lm.candidates import LMCandidate, available, options

    h200 = Capabilities(device="cuda", gpus=(GPU(name="H200", capability=(9, 0)),))
    assert any(o.candidate.backend == "cuda-graph-compile" for o in options(h200, quick=True))
    for b in ("cuda-graph", "cuda-graph-compile"):
        assert available(LMCandidate(backend=b, precision="bf16"), "cpu") == "CUDA graphs need a CUDA GPU"
