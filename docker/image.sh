#!/bin/bash
# `make image`: build docker/Dockerfile.cpu with podman and serve an artifact from the image.
#   bash docker/image.sh ARTIFACT [EXTRAS]
# 1. base: BASE (default python:3.11-slim from the registry). When it cannot be pulled, a stand-in is made from
#    Debian's packages (docker/base.sh: bookworm, python3 3.11 in a venv at /usr/local) and imported as
#    localhost/infertune-base:python3.11-bookworm.
# 2. build: the Dockerfile as it is, with --build-arg BASE, EXTRAS (from the artifact's engine) and TORCH_INDEX.
#    pip inside the build uses the host's network and the host's pip configuration (merged into the build's
#    /etc/pip.conf, with the CA bundle, constraints and local wheel folders it names mounted read-only: nothing of
#    it stays in the image), so a box whose torch CPU wheel comes from a local folder (TORCH_INDEX=pypi) builds the
#    same image as one that reaches download.pytorch.org.
# 3. run: the image serves ARTIFACT mounted read-only at /models/NAME on 127.0.0.1:PORT; one /v1/embeddings
#    request; prints the image size and the cold start (podman run to the first answered request).
# Sandboxes: podman's rootful defaults raise RLIMIT_NOFILE/NPROC (needs CAP_SYS_RESOURCE) and crun refuses hybrid
# cgroups; the run and the build pass the host's own limits and use runc when it is installed.
set -eu
ARTIFACT=$1
EXTRAS=${2:-serve}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -1)
TAG=${IMAGE_TAG:-infertune:$VERSION-cpu}
BASE=${BASE:-python:3.11-slim}
LOCAL_BASE=localhost/infertune-base:python3.11-bookworm
TORCH_INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
PORT=${PORT:-18471}
WORK=${IMAGE_WORK:-.cache/image}
say() { echo "image: $*" >&2; }

command -v podman >/dev/null || { say "podman is not installed (apt-get install podman runc mmdebstrap); nothing built"; exit 1; }
mkdir -p "$WORK"
NOFILE=$(ulimit -n); NPROC=$(ulimit -u)
[ "$NPROC" = unlimited ] || [ "$NPROC" -gt 8192 ] && NPROC=8192
[ "$NOFILE" = unlimited ] && NOFILE=1048576
LIMITS="--ulimit nofile=$NOFILE:$NOFILE --ulimit nproc=$NPROC:$NPROC"
RUNTIME=
command -v runc >/dev/null && RUNTIME="--runtime runc"

# 1. base
if podman image exists "$BASE" || { say "pulling $BASE"; timeout 60 podman pull -q "$BASE" >"$WORK/pull.log" 2>&1; }; then
  say "base $BASE"
else
  say "cannot pull $BASE ($(tail -1 "$WORK/pull.log")); using $LOCAL_BASE, made from Debian bookworm packages"
  if ! podman image exists "$LOCAL_BASE"; then
    say "making $LOCAL_BASE (docker/base.sh, about 2 min)"
    command -v mmdebstrap >/dev/null || { say "mmdebstrap is missing (apt-get install mmdebstrap)"; exit 1; }
    t0=$(date +%s)
    sh "$ROOT/docker/base.sh" "$WORK/base.tar" >"$WORK/base.log" 2>&1 || { tail -20 "$WORK/base.log"; exit 1; }
    podman import -q --change 'ENV LANG=C.UTF-8' \
      --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin' \
      --change 'CMD ["python3"]' "$WORK/base.tar" "$LOCAL_BASE" >/dev/null
    rm -f "$WORK/base.tar"
    say "base made in $(( $(date +%s) - t0 )) s (log: $WORK/base.log)"
  fi
  BASE=$LOCAL_BASE
fi

# 2. build
# pip's configuration here (all its files and PIP_* variables, merged) becomes the build's /etc/pip.conf; the
# files and local folders it names (CA bundle, constraints, find-links, file:// indexes) are mounted read-only.
pip config list 2>/dev/null | python3 -c '
import sys
conf = {}
for line in sys.stdin:
    key, _, value = line.strip().partition("=")
    conf[key.split(".", 1)[-1]] = value.strip("\x27\x22")
print("[global]")
print("".join(f"{k} = {v}\n" for k, v in conf.items()), end="")' >"$WORK/pip.conf"
MOUNTS="-v $(cd "$WORK" && pwd)/pip.conf:/etc/pip.conf:ro"
for p in $(grep -oE "(file://)?/[^ ]+" "$WORK/pip.conf" | sed 's|^file://||; s|/simple/*$||' | sort -u); do
  [ -e "$p" ] && MOUNTS="$MOUNTS -v $p:$p:ro"
done
say "building $TAG (EXTRAS=$EXTRAS, TORCH_INDEX=$TORCH_INDEX; log: $WORK/build.log)"
t0=$(date +%s)
# shellcheck disable=SC2086
podman build $RUNTIME $LIMITS --network host $MOUNTS -f "$ROOT/docker/Dockerfile.cpu" \
  --build-arg BASE="$BASE" --build-arg EXTRAS="$EXTRAS" --build-arg TORCH_INDEX="$TORCH_INDEX" \
  -t "$TAG" "$ROOT" >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 1; }
SIZE=$(podman image inspect --format '{{.Size}}' "$TAG")
say "built $TAG in $(( $(date +%s) - t0 )) s: $(( SIZE / 1000000 )) MB ($SIZE bytes)"

# 3. run
NAME=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['model'])" "$ARTIFACT/manifest.json")
ABS=$(cd "$ARTIFACT" && pwd)
podman rm -f infertune-image-check >/dev/null 2>&1 || true
say "serving $ABS at /models/$NAME (read-only) on 127.0.0.1:$PORT"
t0=$(python3 -c 'import time; print(time.time())')
# shellcheck disable=SC2086
if ! podman run -d $RUNTIME $LIMITS --name infertune-image-check --network host -v "$ABS:/models/$NAME:ro" "$TAG" \
    serve "/models/$NAME" --host 127.0.0.1 --port "$PORT" >"$WORK/run.log" 2>&1; then
  say "the image was built but cannot run here: $(tail -1 "$WORK/run.log")"
  exit 1
fi
trap 'podman logs infertune-image-check >"$WORK/serve.log" 2>&1; podman rm -f infertune-image-check >/dev/null 2>&1' EXIT
python3 - "$PORT" "$NAME" "$t0" <<'EOF'
import json, sys, time, urllib.request
port, name, t0 = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
body = json.dumps({"model": name, "input": ["served from the container image", "hello"]}).encode()
while True:
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            out = json.loads(r.read())
            break
    except OSError:
        if time.time() - t0 > 300:
            sys.exit("image: no answer in 300 s (podman logs infertune-image-check)")
        time.sleep(0.2)
dt = time.time() - t0
d = out["data"]
print(f"image: cold start {dt:.1f} s (podman run to the first answered /v1/embeddings); "
      f"{len(d)} embeddings of {len(d[0]['embedding'])} dims, model {out['model']!r}", file=sys.stderr)
EOF
