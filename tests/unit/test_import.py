import subprocess
import sys


def test_import_infertune_does_not_import_torch():
    code = "import sys, infertune, infertune.cli.main; bad = [m for m in ('torch','transformers','onnxruntime') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
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
