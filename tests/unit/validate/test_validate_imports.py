"""infertune.validate's modules import the submodules they need, never the package itself: the package
(__init__) forwards `infertune.validate(cfg)` to runner, so a module importing from the package closes a
cycle (package -> runner -> package). The public import paths keep working."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import infertune

PKG = Path(infertune.__file__).parent / "validate"
MODULES = sorted(p.stem for p in PKG.glob("*.py") if p.stem != "__init__")


def test_no_validate_module_imports_the_package_itself():
    offenders = []
    for name in MODULES:
        tree = ast.parse((PKG / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):  # function-level imports count too
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "infertune.validate":
                offenders.append(f"{name}.py:{node.lineno}: from infertune.validate import "
                                 + ", ".join(a.name for a in node.names))
            if isinstance(node, ast.Import) and any(a.name == "infertune.validate" for a in node.names):
                offenders.append(f"{name}.py:{node.lineno}: import infertune.validate")
    assert not offenders, "import the submodule instead (e.g. infertune.validate.analysis):\n" + "\n".join(offenders)


def test_each_module_imports_first_in_a_fresh_interpreter_and_the_public_paths_work():
    # every module as the first import of a fresh process (an import cycle fails depending on the order),
    # then the paths users and tests write today, and the callable package
    code = "; ".join(
        [f"import infertune.validate.{m}" for m in MODULES]
        + ["from infertune.validate import " + ", ".join(MODULES),
           "from infertune.validate.config import ValidateConfig, Drill, ValidateResult",
           "from infertune.validate.runner import validate",
           "import infertune, infertune.validate as v",
           "assert callable(v) and infertune.validate is v",
           "assert infertune.validate.runner.validate is validate"])
    for first in MODULES:
        r = subprocess.run([sys.executable, "-c", f"import infertune.validate.{first}; {code}"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"importing infertune.validate.{first} first:\n{r.stderr[-2000:]}"
