"""Every CLI flag whose default a config model holds takes it from that field: the CLI and the library cannot drift."""

import importlib
import inspect

import pytest
from typer.testing import CliRunner

COMMANDS = {"tune": "tune_cmd", "serve": "serve_cmd", "bench": "bench_cmd", "validate": "validate_cmd",
            "verify": "verify_cmd"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_flag_default_is_its_config_fields(name):
    mod = importlib.import_module(f"infertune.cli.{name}")
    params = inspect.signature(getattr(mod, COMMANDS[name])).parameters
    models = {spec[0] for spec in mod.CONFIG_FIELDS.values()}
    for flag, (model, field, *to_flag) in mod.CONFIG_FIELDS.items():
        want = model.model_fields[field].get_default(call_default_factory=True)
        got = params[flag].default
        assert got == (to_flag[0](want) if to_flag else want), (flag, got, model.__name__, field, want)
    # a flag named like a field of those models but left out of the table would retype its default
    for flag, p in params.items():
        if flag not in mod.CONFIG_FIELDS and p.default is not inspect.Parameter.empty:
            for model in models:
                f = model.model_fields.get(flag)
                want = None if f is None else f.get_default(call_default_factory=True)
                # None on the flag means "the config's default" (an empty list is what no comma list gives)
                assert want in (None, [], p.default) or p.default is None, (flag, model, want, p.default)


def test_flag_texts_parse_back_to_the_fields_values():
    """The defaults shown as text (durations, comma lists) mean the field's value once the flag is parsed."""
    from infertune.cli import tune, validate
    from infertune.cli.options import duration, duration_text
    from infertune.config import TuneConfig
    from infertune.validate.config import ValidateConfig

    assert [duration(duration_text(s)) for s in (3600.0, 300.0, 5.0, 0.5, 90.0)] == [3600.0, 300.0, 5.0, 0.5, 90.0]
    assert tune._batches(tune.D["lm_batches"]) == TuneConfig().lm_batches
    assert validate._faults(validate.D["faults"]) == ValidateConfig(target="x").faults
    assert duration(validate.D["soak"]) == ValidateConfig(target="x").soak_s


def test_help_still_shows_the_defaults():
    from infertune.cli.main import app

    out = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200", "TERM": "dumb"}).output
    assert "8000" in out and "127.0.0.1" in out and "512" in out
    out = CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "200", "TERM": "dumb"}).output
    assert "0.995" in out and "1,8,32" in out
