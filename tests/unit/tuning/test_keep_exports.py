"""`tune --keep-exports` keeps the workers' exported files in <out>/exports (named in results.json's
search section); without it the work folder is deleted as before."""

from __future__ import annotations

from types import SimpleNamespace

import typer

from infertune.cli.main import app
from infertune.tuning.driver import _keep_or_drop_work


def _work(out):
    (out / "work" / "onnx").mkdir(parents=True)
    (out / "work" / "onnx" / "model.onnx").write_bytes(b"onnx")
    (out / "work" / "onnx" / "onnxruntime_int8.onnx").write_bytes(b"int8")


def test_keep_exports_moves_the_work_folder_and_records_it(tmp_path):
    _work(tmp_path)
    result = SimpleNamespace(search={})
    _keep_or_drop_work(tmp_path, True, result)
    assert not (tmp_path / "work").exists()
    assert sorted(p.name for p in (tmp_path / "exports" / "onnx").iterdir()) == ["model.onnx", "onnxruntime_int8.onnx"]
    assert result.search["exports"] == str(tmp_path / "exports")


def test_without_it_the_work_folder_goes(tmp_path):
    _work(tmp_path)
    result = SimpleNamespace(search={})
    _keep_or_drop_work(tmp_path, False, result)
    assert not (tmp_path / "work").exists() and not (tmp_path / "exports").exists() and "exports" not in result.search


def test_the_flag_reaches_the_config(monkeypatch):
    import infertune.tune

    seen = {}

    def fake(cfg):
        seen["keep"] = cfg.keep_exports
        raise typer.Exit(0)

    monkeypatch.setattr(infertune.tune, "tune", fake)
    from typer.testing import CliRunner

    CliRunner().invoke(app, ["tune", "minilm", "--keep-exports"])
    assert seen == {"keep": True}
