"""On the device machine: the carried MiniLM (.gpu/minilm, weights rounded to fp16 by scripts/gpu/carry.sh) as an fp32
model directory at argv[1], the layout `infertune tune` reads."""

import shutil
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

src, dst = Path(".gpu/minilm"), Path(sys.argv[1])
shutil.copytree(src, dst, dirs_exist_ok=True)
save_file({k: v.float() if v.is_floating_point() else v for k, v in load_file(src / "model.safetensors").items()},
          dst / "model.safetensors")
print(dst)
