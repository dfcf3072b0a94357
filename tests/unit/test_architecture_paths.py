"""docs/architecture.md names no file that is not there: every `src/...`, `infertune/...` (and tests/, scripts/,
benchmarks/, docs/, docker/) path it names, and every `xxx.py` module path, exists in the checkout."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "src" / "infertune"
TOP = ("src/", "infertune/", "tests/", "scripts/", "benchmarks/", "docs/", "docker/")
# a module path (`engines/base.py`, `logs.py`, `tasks/embedding/task.py:slo`) or a path under a top-level folder
PATH = re.compile(r"(?<![\w/.~$-])((?:[A-Za-z_][\w-]*/)*[A-Za-z_][\w-]*\.py"
                  r"|(?:src|infertune|tests|scripts|benchmarks|docs|docker)/[\w./-]*[\w/])")


def named_paths(text: str) -> set[str]:
    return {m.group(1) for m in PATH.finditer(text)}


def exists(name: str) -> bool:
    name = name.rstrip("/")
    if name.startswith("infertune/"):
        return (ROOT / "src" / name).exists()
    if name.startswith(TOP):
        return (ROOT / name).exists()
    if "/" in name:  # relative to the package: engines/base.py, tasks/embedding/task.py
        return (PKG / name).exists()
    return any(PKG.rglob(name)) or (ROOT / name).exists()  # a bare module: logs.py, driver.py


def test_named_paths_are_found_in_these_examples():
    text = ("`engines/base.py:Embedder` and src/infertune/logs.py, `infertune/tuning/` (driver.py), "
            "docs/measurements/x, `tests/unit/test_readme.py`, python scripts/structure.py, v0.1.py")
    assert named_paths(text) == {"engines/base.py", "src/infertune/logs.py", "infertune/tuning/", "driver.py",
                                 "docs/measurements/x", "tests/unit/test_readme.py", "scripts/structure.py"}
    assert exists("engines/base.py") and exists("infertune/tuning/") and exists("driver.py")
    assert not exists("engines/nothing_here.py") and not exists("docs/measurements/x")


def test_architecture_names_no_missing_file():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    names = named_paths(doc)
    assert len(names) > 50, "the pattern finds too little: is it still matching the document's paths?"
    missing = sorted(n for n in names if not exists(n))
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"
