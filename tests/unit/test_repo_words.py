"""README.md, docs/, src/, tests/, benchmarks/, scripts/, docker/, the Makefile and pyproject.toml speak of the
product: what it does, how to run it, what each test proves, what was measured and on what hardware. They never
tell how the repository was built: no work-period numbers, no issue or pull-request numbers of this repository, no
remote tooling, and measurement folders are named `<date>-<hardware>-<topic>`. This file is not read: it lists
the patterns."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MEASUREMENTS = ROOT / "docs" / "measurements"
TEXT = {".md", ".py", ".toml", ".json", ".jsonl", ".txt", ".log", ".html", ".csv", ".sh", ".yaml", ".yml", ".cfg"}

# Each pattern (case-insensitive) says one way workshop talk shows. The first is the repository's own check
# (`grep -rniE "session [0-9]|lent |build box|issue [0-9]|run\(command" README.md docs src`) with one fix: its
# `lent ` must not follow a letter, or it matches "equivalent " and "silent " in ordinary English (the sample
# workloads are CPython's documentation).
PATTERNS = {
    "work periods, lent machines, issue numbers, remote calls":
        r"session [0-9]|(?<![a-z])lent |build box|issue [0-9]|run\(command",
    "a work period named otherwise": r"\b(this|next|last|previous) session\b|\bsessions [0-9]|\bsession-[0-9]",
    "a measurement folder with a session suffix": r"docs/measurements/[\w.-]*-s[0-9]+\b",
    "a measurement folder in the old <hardware>-<date> style":
        r"\b(cpu|h200|h100|llmc|validate)-20[0-9]{2}-[0-9]{2}-[0-9]{2}",
    "an issue or pull request of this repository":
        r"\bissues? #[0-9]|\b(PR|pull request) #?[0-9]|(?<![\w&/:])#[0-9]{1,3}\b",
    "remote-execution call syntax": r"\bcarry=\[|\brun\(command=",
    "a machine lent for the work": r"\bthe lent\b|\bwas lent\b|\bnot lent\b",
}
COMPILED = {why: re.compile(p, re.IGNORECASE) for why, p in PATTERNS.items()}
# date, hardware (one word: h200, h100, xeon, epyc...), topic (words joined by hyphens)
FOLDER = re.compile(r"^20[0-9]{2}-[0-9]{2}-[0-9]{2}-[a-z0-9]+-[a-z0-9]+(-[a-z0-9]+)*$")


SELF = Path(__file__).resolve()
TOPS = ("docs", "src", "tests", "benchmarks", "scripts", "docker")
# Files with no suffix that are read all the same (the Dockerfiles' suffix is their flavour: .cpu, .cuda).
NAMED = {"Makefile", "Dockerfile.cpu", "Dockerfile.cuda"}


def files() -> list[Path]:
    out = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    for top in TOPS:
        out += sorted(p for p in (ROOT / top).rglob("*") if p.is_file() and (p.suffix in TEXT or p.name in NAMED)
                      and "__pycache__" not in p.parts and p.resolve() != SELF)
    return out


def offences(text: str) -> list[tuple[int, str, str]]:
    """(line number, why, the line) for every line of `text` that matches a pattern."""
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        for why, rx in COMPILED.items():
            if rx.search(line):
                found.append((no, why, line.strip()[:160]))
    return found


@pytest.mark.parametrize("line", [
    "## Session 14 (latest): what was done",
    "vLLM cannot run on the lent H200.",
    "Every carry before issue 25 lacked torchao",
    'run(command="python scripts/gpu/llm_h200.py all", carry=[".gpu-carry/x.npz"])',
    "figures in docs/measurements/h200-2026-11-30-s9",
    "figures in docs/measurements/2026-11-30-h200-cuda-graphs-s9/",
    "the next session starts with the Qwen point",
    "measured on the build box",
    "closes #12",
])
def test_each_kind_of_workshop_talk_is_caught(line):
    assert offences(line), line


@pytest.mark.parametrize("line", [
    "Is semantically equivalent to: See also",  # CPython's docs in the sample workload
    "onnxruntime CUDA provider failed to load (silent CPU fallback)",
    "Checked against vLLM's own log in vllm#10517 (Llama-3.1-8B, RTX 3090)",
    "docs/measurements/2026-12-06-h100-compiled-embeddings",
    "the aiohttp session (closed with `stack`); ort.InferenceSession(...)",
    "color:#1b1f24; color:#999; &#10007; over it",
    "A batch's latency is its device time",
])
def test_product_words_pass(line):
    assert not offences(line), offences(line)


def test_the_repository_speaks_of_the_product():
    bad = []
    for p in files():
        for no, why, line in offences(p.read_text(errors="replace")):
            bad.append(f"{p.relative_to(ROOT)}:{no}: {why}: {line}")
    assert not bad, "workshop talk in the repository's files:\n" + "\n".join(bad[:40])


def test_measurement_folders_are_named_date_hardware_topic():
    names = sorted(p.name for p in MEASUREMENTS.iterdir() if p.is_dir())
    assert names, "no measurement folders"
    bad = [n for n in names if not FOLDER.match(n) or re.search(r"-s[0-9]+$", n)]
    assert not bad, f"not <date>-<hardware>-<topic>: {bad}"


def test_every_measurement_folder_says_what_made_it():
    for d in sorted(p for p in MEASUREMENTS.iterdir() if p.is_dir()):
        readme = d / "README.md"
        assert readme.is_file(), f"{d.relative_to(ROOT)} has no README.md"
        text = readme.read_text()
        assert re.search(r"infertune|benchmarks/|scripts/|make |pytest|standalone", text), \
            f"{readme.relative_to(ROOT)} names no command"
        assert re.search(r"H100|H200|Xeon|EPYC|cores?\b", text), f"{readme.relative_to(ROOT)} names no hardware"
