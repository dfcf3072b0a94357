#!/bin/sh
# The install steps of docker/Dockerfile.cpu and docker/Dockerfile.cuda, in one script so the image build and
# tests/integration/test_image_install.py (a fresh venv, when no image builder runs) execute the same lines.
#   install.sh SRC EXTRAS TORCH_INDEX [PIP]
# SRC: the infertune checkout; EXTRAS: what the artifact's engine needs, e.g. serve,onnx,openvino (deploy writes
# them); TORCH_INDEX: the PyTorch wheel index (.../whl/cpu, .../whl/cu129) or "pypi"; PIP: the pip to use.
set -eu
SRC=$1
EXTRAS=$2
TORCH_INDEX=$3
PIP=${4:-pip}
TORCH=$(sed -n 's/^torch==\([^ ]*\).*/\1/p' "$SRC/constraints.txt")
# torch first, from its own index: from PyPI alone pip resolves the CUDA build (GBs of nvidia-* wheels)
if [ "$TORCH_INDEX" = pypi ]; then
  $PIP install --no-cache-dir "torch==$TORCH"
else
  $PIP install --no-cache-dir "torch==$TORCH" --index-url "$TORCH_INDEX"
fi
# pinned to the versions verified together (constraints.txt); a non-editable install: the image needs no checkout
$PIP install --no-cache-dir -c "$SRC/constraints.txt" "$SRC[$EXTRAS]"
