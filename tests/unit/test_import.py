import subprocess
import sys


def test_import_infertune_does_not_import_torch():
    code = ("import sys, infertune, infertune.cli.main; "
            "bad = [m for m in ('torch','transformers','onnxruntime') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_lazy_attribute_error():
    import infertune

    try:
        infertune.no_such_thing  # noqa: B018
    except AttributeError as e:
        assert "no_such_thing" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def test_no_module_imports_one_that_imports_it_back():
    """Directly or through others: strongly connected components of the import graph (scripts/structure.py)."""
    import importlib.util
    from pathlib import Path

    import infertune

    spec = importlib.util.spec_from_file_location("structure", Path(__file__).parents[2] / "scripts" / "structure.py")
    st = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(st)
    graph = st.import_graph(Path(infertune.__file__).parent)
    assert len(graph) > 100 and any(graph.values())  # the scan found the package and its imports
    cycles = st.circles(graph)
    assert not cycles, cycles
