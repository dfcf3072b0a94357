"""Loading a quantized candidate layer by layer (a 16-bit model that would not fit the GPU): each decoder layer is
quantized where it lands, lm_head too, and the model computes what the whole-model quantization computes. Run on the
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
def test_layer_by_layer_quantizes_every_linear_as_the_whole_model_path_does(tied):
    from infertune.tasks.causal_lm.worker import apply_quant, stream_quantized

    whole = apply_quant(tiny(tied), "torchao-int8-wo", "cpu")
    streamed = stream_quantized(tiny(tied), "torchao-int8-wo", "cpu")
    kinds = {n: type(m.weight).__name__ for n, m in streamed.named_modules() if isinstance(m, torch.nn.Linear)}
    assert kinds and all(k != "Parameter" and k != "Tensor" for k in kinds.values()), kinds
    assert "lm_head" in kinds
    ids = torch.tensor([[1, 5, 9, 33, 70, 2]])
    with torch.inference_mode():
        a, b = whole(ids).logits, streamed(ids).logits
    assert torch.equal(a, b)
