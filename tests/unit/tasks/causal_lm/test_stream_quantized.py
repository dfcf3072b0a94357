"""Loading a quantized candidate layer by layer (a 16-bit model that would not fit the GPU): each decoder layer is
quantized where it lands, lm_head stays 16-bit, and the model computes what the whole-model quantization with lm_head
left out computes. Run on the
CPU with torchao's int8 weight-only (the same calls the GPU path makes), on a tiny random Llama."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")
transformers = pytest.importorskip("transformers")


def tiny(tied: bool):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                   tie_word_embeddings=tied)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("tied", [False, True])  # Qwen3-0.6B ties lm_head to the input embeddings
def test_layer_by_layer_quantizes_every_decoder_linear_and_keeps_lm_head_16bit(tied):
    from infertune.quantize.torchao import apply
    from infertune.tasks.causal_lm.worker import stream_quantized

    whole = apply(tiny(tied), "torchao-int8-wo", skip={"lm_head"})
    streamed = stream_quantized(tiny(tied), "torchao-int8-wo", "cpu")
    kinds = {n: type(m.weight).__name__ for n, m in streamed.named_modules() if isinstance(m, torch.nn.Linear)}
    assert kinds.pop("lm_head") == "Parameter"  # quantizing it would take an fp32 copy the card may not hold
    assert len(kinds) == 14 and all(k not in ("Parameter", "Tensor") for k in kinds.values()), kinds
    ids = torch.tensor([[1, 5, 9, 33, 70, 2]])
    with torch.inference_mode():
        a, b = whole(ids).logits, streamed(ids).logits
    assert torch.equal(a, b)
