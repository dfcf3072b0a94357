"""scripts/structure.py counts the right things: checked on a tiny made-up tree, not on infertune's own numbers."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "structure.py"


def load_structure():
    """scripts/ is not a package: load the script as a module (test_import.py reuses its graph and circles too)."""
    spec = importlib.util.spec_from_file_location("infertune_structure_script", _SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def st():
    return load_structure()


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / "pkg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root / "pkg"


def _long_function(name: str, body_lines: int) -> str:
    return f"def {name}():\n" + "    x = 1\n" * (body_lines - 1)


def test_layers_long_modules_and_functions_on_a_tiny_tree(st, tmp_path):
    root = _write(tmp_path, {
        "__init__.py": "",
        "top.py": "from pkg.a import thing\n",                    # root -> a
        "a/__init__.py": "",
        "a/thing.py": "def f():\n    from ..b import low\n",    # a -> b, a lazy relative import still counts
        "b/__init__.py": "",
        "b/low.py": "import os\n" + "\n" * 400,                   # 401 lines
        "b/fine.py": "\n" * 400,                                  # 400 lines: at the limit, not over
        "c/__init__.py": "",
        "c/funcs.py": _long_function("big", 81) + _long_function("edge", 80),
    })
    s = st.structure(root)
    assert s["packages"] == {"root": ["a"], "a": ["b"], "b": [], "c": []}
    assert s["layers"] == 3                                       # root -> a -> b
    assert s["package_cycles"] == [] and s["module_circles"] == []
    assert [r["lines"] for r in s["modules_over_limit"]] == [401]
    assert s["modules_over_limit"][0]["file"].endswith("low.py")
    assert [(r["name"], r["lines"]) for r in s["functions_over_limit"]] == [("big", 81)]
    assert s["functions_over_limit"][0]["file"].endswith("funcs.py:1")


def test_circles_and_package_cycles_are_named(st, tmp_path):
    root = _write(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "",
        "a/x.py": "from pkg.b import y\n",
        "b/__init__.py": "",
        "b/y.py": "import pkg.a.z\n",
        "a/z.py": "from pkg.a import x\n",                        # x -> y -> z -> x: one circle of three modules
    })
    s = st.structure(root)
    assert s["module_circles"] == [["pkg.a.x", "pkg.a.z", "pkg.b.y"]]
    assert s["layers"] is None and s["package_cycles"] == [["a", "b"]]
    (pair,) = s["two_way_packages"]
    assert pair["packages"] == ["a", "b"] and pair["back"] == ["pkg.b.y -> pkg.a.z"]
    assert pair["forward"] == ["pkg.a.x -> pkg.b", "pkg.a.x -> pkg.b.y"]  # `from pkg.b import y`: both modules
    assert "cycle: a <-> b" in st.render(s)


def test_cli_prints_json(st, tmp_path, capsys):
    root = _write(tmp_path, {"__init__.py": "", "m.py": "import pkg\n"})
    assert st.main(["--json", "--root", str(root)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["modules"] == 2 and out["layers"] == 1 and out["packages"] == {"root": []}


def test_a_tree_with_an_api_module_splits_its_root_into_api_and_root(st, tmp_path):
    root = _write(tmp_path, {
        "__init__.py": "from pkg._api import X\n",
        "_api.py": "X = 1\n",
        "tune.py": "from pkg.a import thing\n",                   # a verb at the root: api -> a
        "errors.py": "",                                           # a foundation: root
        "a/__init__.py": "",
        "a/m.py": "from pkg.errors import E\nthing = 1\n",        # a -> root, no cycle with the verb
    })
    s = st.structure(root)
    assert s["api_modules"] == ["pkg", "pkg._api", "pkg.tune"]
    assert s["packages"] == {"api": ["a"], "a": ["root"], "root": []}
    assert s["layers"] == 3
