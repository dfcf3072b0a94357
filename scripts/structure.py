"""The shape of the source tree, counted: `python scripts/structure.py [--json] [--root src/infertune]`.

- the import graph by package (a folder under the root), its edges and the number of layers (the longest chain of
  packages, each importing the next), or the package-level cycles. Modules at the root are two nodes: "api" (the
  package's `__init__`, `_api.py` and the verbs kept at the root, API_MODULES) and "root" (the foundations:
  errors, config, results, registry, ...), which import no package; a tree without `_api.py` has "root" only;
- module-level import circles (a module that imports one that imports it back, directly or through others);
- every module over 400 lines and every function over 80 lines.

An import counts wherever it sits (function bodies too): a lazy import still ties two modules together.
Standard library only, so it runs before anything is installed. tests/unit/test_import.py reuses its graph and
circle search; tests/unit/test_structure.py checks its counting on a tiny tree.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
ROOT_PACKAGE = "root"
API_PACKAGE = "api"
# modules at the root that make the public API (with the package's __init__ and _api.py): the verbs that live there
API_MODULES = ("_api", "tune", "inspect", "inspect_meta")


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under `root` (a package directory such as src/infertune)."""
    mods = {}
    for p in sorted(root.rglob("*.py")):
        parts = p.relative_to(root.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return mods


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same tree that it imports anywhere in its text (function bodies too).

    `from a import b` counts as importing `a.b` when that is a module, else `a`. The top package itself
    (`import infertune`) is left out: its __init__ only re-exports lazily."""
    mods = modules(root)
    top = root.name
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text(), filename=str(p))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            graph[m] |= {n for n in names if n in mods and n != m and n != top}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def package_of(module: str, packages: set[str], api: set[str] = frozenset()) -> str:
    """infertune.serve.http -> serve; infertune.errors -> root; infertune.tune or infertune itself -> api when
    `api` names it (api_modules), else root."""
    parts = module.split(".")
    if len(parts) > 1 and ".".join(parts[:2]) in packages:
        return parts[1]
    return API_PACKAGE if module in api else ROOT_PACKAGE


def api_modules(graph: dict[str, set[str]], root: Path) -> set[str]:
    """The root modules of the public API: the package itself, _api and API_MODULES, where the tree has _api.py."""
    top = root.name
    if f"{top}._api" not in graph:
        return set()
    return {top} | {f"{top}.{m}" for m in API_MODULES if f"{top}.{m}" in graph}


def package_graph(graph: dict[str, set[str]], root: Path) -> dict[str, set[str]]:
    """Package -> the packages it imports (self-imports left out)."""
    top = root.name
    packages = {f"{top}.{d.name}" for d in root.iterdir() if d.is_dir() and (d / "__init__.py").exists()}
    api = api_modules(graph, root)
    pg: dict[str, set[str]] = {}
    for m, targets in graph.items():
        a = package_of(m, packages, api)
        pg.setdefault(a, set())
        for t in targets:
            b = package_of(t, packages, api)
            pg.setdefault(b, set())
            if a != b:
                pg[a].add(b)
    return pg


def two_way(graph: dict[str, set[str]], root: Path) -> list[dict]:
    """Package pairs that import each other, with the module imports that make each direction."""
    top = root.name
    packages = {f"{top}.{d.name}" for d in root.iterdir() if d.is_dir() and (d / "__init__.py").exists()}
    api = api_modules(graph, root)
    by_pair: dict[tuple[str, str], list[str]] = {}
    for m, targets in graph.items():
        for t in targets:
            a, b = package_of(m, packages, api), package_of(t, packages, api)
            if a != b:
                by_pair.setdefault((a, b), []).append(f"{m} -> {t}")
    return [{"packages": [a, b], "forward": sorted(by_pair[(a, b)]), "back": sorted(by_pair[(b, a)])}
            for a, b in sorted(by_pair) if a < b and (b, a) in by_pair]


def layers(pg: dict[str, set[str]]) -> int | None:
    """The number of packages on the longest import chain (1 for packages that import none); None with a cycle."""
    if circles(pg):
        return None
    depth: dict[str, int] = {}

    def d(v: str) -> int:
        if v not in depth:
            depth[v] = 1 + max((d(w) for w in pg[v]), default=0)
        return depth[v]

    return max((d(v) for v in pg), default=0)


def _show(p: Path) -> str:
    """The path relative to the working directory when it lies under it (src/infertune/x.py), else as given."""
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def long_modules(root: Path, limit: int = MAX_MODULE_LINES) -> list[dict]:
    out = []
    for p in sorted(root.rglob("*.py")):
        n = len(p.read_text().splitlines())
        if n > limit:
            out.append({"file": _show(p), "lines": n})
    return sorted(out, key=lambda r: -r["lines"])


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[dict]:
    """Every function or method (nested ones too) whose def..last line spans more than `limit` lines."""
    out = []
    for p in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), filename=str(p))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append({"file": f"{_show(p)}:{node.lineno}", "name": node.name, "lines": n})
    return sorted(out, key=lambda r: -r["lines"])


def structure(root: Path) -> dict:
    graph = import_graph(root)
    pg = package_graph(graph, root)
    return {
        "modules": len(graph),
        "api_modules": sorted(api_modules(graph, root)),
        "packages": {k: sorted(v) for k, v in sorted(pg.items())},
        "package_edges": sum(len(v) for v in pg.values()),
        "layers": layers(pg),
        "package_cycles": circles(pg),
        "two_way_packages": two_way(graph, root),
        "module_circles": circles(graph),
        "modules_over_limit": long_modules(root),
        "functions_over_limit": long_functions(root),
    }


def render(s: dict) -> str:
    lines = [f"{s['modules']} modules in {len(s['packages'])} packages, {s['package_edges']} package edges"]
    lines += [f"  {p:<10} -> {', '.join(t) or '-'}" for p, t in s["packages"].items()]
    if s["api_modules"]:
        lines.append(f"  (api: {', '.join(s['api_modules'])}; root: the other modules at the package root)")
    if s["layers"] is None:
        lines.append("layers: none (package-level cycles)")
        lines += [f"  cycle: {' <-> '.join(c)}" for c in s["package_cycles"]]
        lines.append(f"package pairs importing each other: {len(s['two_way_packages'])}")
        for r in s["two_way_packages"]:
            a, b = r["packages"]
            lines.append(f"  {a} <-> {b}: {len(r['forward'])} imports one way, e.g. {r['forward'][0]}; "
                         f"{len(r['back'])} back, e.g. {r['back'][0]}")
    else:
        lines.append(f"layers: {s['layers']} (longest package import chain)")
    lines.append(f"module import circles: {len(s['module_circles'])}")
    lines += [f"  circle: {' <-> '.join(c)}" for c in s["module_circles"]]
    lines.append(f"modules over {MAX_MODULE_LINES} lines: {len(s['modules_over_limit'])}")
    lines += [f"  {r['file']}  {r['lines']}" for r in s["modules_over_limit"]]
    lines.append(f"functions over {MAX_FUNCTION_LINES} lines: {len(s['functions_over_limit'])}")
    lines += [f"  {r['file']}  {r['name']}  {r['lines']}" for r in s["functions_over_limit"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1] / "src" / "infertune",
                    help="the package directory to count (default: src/infertune)")
    a = ap.parse_args(argv)
    s = structure(a.root)
    print(json.dumps(s, indent=2) if a.json else render(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
