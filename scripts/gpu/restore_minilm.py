"""On the GPU host: the copied MiniLM (.gpu/minilm, weights rounded to fp16 and xz-compressed by
scripts/gpu/carry.sh) as an fp32 model directory at argv[1], the layout `infertune tune` reads."""

import lzma
import shutil
import sys
from pathlib import Path

from safetensors.torch import load, save_file

src, dst = Path(".gpu/minilm"), Path(sys.argv[1])
shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.xz"))
packed = src / "model.safetensors.xz"
raw = lzma.decompress(packed.read_bytes()) if packed.exists() else (src / "model.safetensors").read_bytes()
save_file({k: v.float() if v.is_floating_point() else v for k, v in load(raw).items()}, dst / "model.safetensors")
print(dst)
