#!/bin/sh
# A stand-in for the Dockerfiles' base image (python:3.11-slim) made from Debian's packages alone, for builders
# that cannot pull from a container registry:
#   base.sh TAR [MIRROR]
# writes TAR, a root filesystem of Debian bookworm (minbase: the release whose python3 is 3.11, as in
# python:3.11-slim) with python3, python3-venv and ca-certificates. python:3.11-slim has its own Python under
# /usr/local with `python` and `pip` on PATH; here a venv at /usr/local gives the same commands, so the Dockerfiles'
# `pip install` works unchanged (Debian's own python3 refuses pip installs: PEP 668). Import it with
#   podman import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' TAR localhost/infertune-base:python3.11-bookworm
# and build with --build-arg BASE=localhost/infertune-base:python3.11-bookworm.
set -eu
TAR=$1
MIRROR=${2:-http://deb.debian.org/debian}
mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  --customize-hook='chroot "$1" python3 -m venv /usr/local' \
  --customize-hook='chroot "$1" /usr/local/bin/pip --version' \
  --customize-hook='rm -rf "$1"/root/.cache' \
  --format=tar bookworm "$TAR" "$MIRROR"
