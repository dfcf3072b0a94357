"""The Dockerfiles build unchanged for users with a registry (BASE defaults to python:3.11-slim), and `make image`'s
stand-in base is the release and Python that base implies. The full build (minutes) is `make image`, not run here."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_base_is_a_build_arg_defaulting_to_the_registry_image(name):
    text = (ROOT / "docker" / name).read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert froms == ["${BASE}"]
    head = text[: text.index("FROM ")]
    assert re.search(r"^ARG BASE=python:3\.11-slim$", head, re.M)


def test_stand_in_base_is_bookworm_with_python_and_a_pip_on_path():
    script = (ROOT / "docker" / "base.sh").read_text()
    cmd = script[script.index("mmdebstrap "):]
    # bookworm's python3 is 3.11, like python:3.11-slim (trixie's is 3.13: the cp311 pins would not install)
    assert re.search(r"\sbookworm\s", cmd)
    assert "--variant=minbase" in cmd
    assert "--include=python3,python3-venv,ca-certificates" in cmd
    # `pip install` as the Dockerfiles run it: a venv at /usr/local, as python:3.11-slim's own prefix
    assert "python3 -m venv /usr/local" in cmd


def test_make_image_builds_the_dockerfile_with_the_stand_in_base_and_runs_it():
    sh = (ROOT / "docker" / "image.sh").read_text()
    assert 'BASE=${BASE:-python:3.11-slim}' in sh
    assert "LOCAL_BASE=localhost/infertune-base:python3.11-bookworm" in sh
    assert "docker/Dockerfile.cpu" in sh and '--build-arg BASE="$BASE"' in sh
    assert "--network host" in sh
    assert re.search(r'-v "\$ABS:/models/\$NAME:ro"', sh)  # the artifact is mounted read-only
    assert "/v1/embeddings" in sh
    dockerfile = (ROOT / "docker" / "base.sh").read_text()
    assert "localhost/infertune-base:python3.11-bookworm" in dockerfile
    make = (ROOT / "Makefile").read_text()
    target = make[make.index("\nimage:"):]
    assert "bash docker/image.sh $(ARTIFACT)" in target.split("\n\n")[0]
