"""docs/architecture.md's map names every folder under src/infertune, and names no folder that is not there."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_map_and_tree_agree():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("## Map:", 1)[1].split("\n## ", 1)[0]
    named = {m.group(1) for m in re.finditer(r"^\| `([a-z_/]+)/` \|", section, re.M)}
    src = ROOT / "src" / "infertune"
    tree = {str(p.relative_to(src)) for p in src.rglob("*") if p.is_dir() and "__pycache__" not in p.parts}
    assert named, "the map has no rows"
    assert named == tree, (f"in the tree, not the map: {sorted(tree - named)}; "
                           f"in the map, not the tree: {sorted(named - tree)}")
