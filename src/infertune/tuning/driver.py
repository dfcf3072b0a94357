"""`infertune tune`: resolve the model, pick its task, run the search within the time budget, decide,
write results.json, report.html and the artifact."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from pathlib import Path

from infertune.config import TuneConfig
from infertune.errors import InfertuneError
from infertune.results import TuneResult
from infertune.tuning import rounds, search
from infertune.tuning.budget import Budget
from infertune.tuning.decide import decide

NO_WINNER_EXIT = 3  # `infertune tune` exit code when nothing met the constraints (2 = user error)


def out_dir(cfg: TuneConfig) -> Path:
    out = Path(cfg.out) if cfg.out is not None else Path("runs") / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    return out


def point_latest(out: Path) -> Path | None:
    """`runs/latest` -> this run, when the run lives in a directory named `runs` (the default
    `runs/<timestamp>`, or `--out runs/quick`), so `infertune serve runs/latest/artifact` serves the last
    tune. A relative symlink, replaced atomically; where symlinks are not allowed, nothing (None)."""
    import os

    if out.resolve().parent.name != "runs":
        return None
    link = out.parent / "latest"
    if out.name == "latest":
        return None
    tmp = out.parent / f".latest.{os.getpid()}"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(out.name, target_is_directory=True)
        os.replace(tmp, link)
    except OSError:
        return None
    return link


def write(result: TuneResult, out: Path) -> None:
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(result.model_dump(mode="json"), indent=2))
    tmp.replace(out / "results.json")


def _keep_or_drop_work(out: Path, keep: bool, result) -> None:
    """The workers' shared folder (ONNX exports, quantized models) goes, unless --keep-exports moves it to
    <out>/exports (results.json's `search.exports` then names it)."""
    work = out / "work"
    if keep and work.exists() and any(work.iterdir()):
        dest = out / "exports"
        shutil.rmtree(dest, ignore_errors=True)
        work.rename(dest)
        result.search["exports"] = str(dest)
        return
    shutil.rmtree(work, ignore_errors=True)


def run(cfg: TuneConfig, make_task, quiet: bool = False, candidates: list | None = None) -> TuneResult:
    """The loop: `make_task(cfg, console, candidates)` gives the family's task (infertune.tune picks it), then
    stages, budget, workers, decision, artifact and report. Returns the TuneResult also written to results.json."""
    from infertune.console import console as make_console
    from infertune.hardware import detect
    from infertune.tuning.worker import warm_up_workers

    console = make_console(stderr=True, quiet=quiet)
    t0 = time.perf_counter()
    budget = Budget(1.0)  # replaced once the task knows its default
    # the model resolved and the workload read first: a user's mistake there is reported in about a second,
    # not after the fork server (which holds stderr) and this process have imported torch
    task = make_task(cfg, console, candidates)
    out = out_dir(cfg)
    library_log = _library_log(out)
    warm_up_workers()  # the fork server imports torch while the parent loads the tokenizer
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InfertuneError("--device cuda asked for, but torch sees no CUDA GPU; run `infertune doctor`")
    result = task.load(out)
    budget = Budget(cfg.time_budget_s or task.default_budget_s(), start=budget.start, shares=task.stage_shares)
    caps = detect(cfg.device)
    console.print(f"  host: {caps.summary()}; time budget {budget.total_s:.0f} s", highlight=False)
    run = search.Run(task, cfg, out, console, budget)
    tried = screen(run, task.options(caps), caps)
    steps = search.order(tried)
    for o in tried:  # steps that run whatever the budget: the ratio to the naive baseline, the CPU's fallback
        if o.role == "baseline" or (o.role == "reference" and (cfg.device == "cpu" or not _has_baseline(tried))):
            run.owed[o.candidate.id] = "baseline" if o.role == "baseline" else "reference-probe"
    result.search = {"time_budget_s": budget.total_s, "drop_below": cfg.drop_below,
                     "library_log": library_log,
                     "capabilities": caps.summary(), "cpu_flags": sorted(caps.cpu.flags),
                     "cpu_flags_source": caps.cpu.flags_source}
    # where the wall time went: a run past its budget says which part overran (a step started in time and
    # slowed by other work on the host, or the artifact's speed passes)
    phases = {"setup": time.perf_counter() - t0}
    try:
        _search(run, task, steps, result, out)
        phases["search"] = time.perf_counter() - t0 - sum(phases.values())
        decide(task, result, cfg.tie_margin, task.drift)
        task.compare_with_plan(result)
        _finish_log(run, result)
        write(result, out)
        if cfg.write_artifact and result.winner is not None:
            task.save_artifact(run, result, out)
        phases["artifact"] = time.perf_counter() - t0 - sum(phases.values())
    finally:
        run.stop()
        _keep_or_drop_work(out, cfg.keep_exports, result)
    result.wall_s = round(time.perf_counter() - t0, 1)
    result.search["wall_s"] = result.wall_s
    result.search["phases_s"] = {k: round(v, 1) for k, v in phases.items()}
    if result.artifact:
        result.next_command = f"infertune serve {result.artifact}"
    if cfg.peers:
        _peers(task, cfg, result, out, console)
    write(result, out)
    try:
        task.write_report(result, out / "report.html")
    except Exception as e:  # noqa: BLE001 - a plotting problem must not lose the results
        console.print(f"[yellow]report.html not written: {e}[/]")
    link = point_latest(out)
    if link is not None:
        serve = f" (infertune serve {link}/artifact serves this run's pick)" if result.artifact else ""
        console.print(f"{link} -> {out.name}{serve}", markup=False)
    return result


def screen(run: search.Run, opts: list, caps) -> list:
    """The options to try: the others are recorded as skipped with why (a capability this host lacks, or the task's
    own `skip`: a measurement said it cannot pay here) or left out by --candidates (listed in not_tried only)."""
    from infertune.hardware import needs

    cfg, tried = run.cfg, []
    for o in opts:
        why = needs(caps, o.needs) or o.skip
        if why is None and o.role == "candidate" and not run.task.matches(o.candidate, cfg.candidates):
            why = f"not selected by --candidates {','.join(cfg.candidates or [])}"
        if why:
            run.log["not_tried"].append({"candidate": o.candidate.id, "why": why})
            if "--candidates" not in why:
                run.record(o.candidate, status="skipped", reason=why, why_tried=o.why)
                run.console.print(f"  [yellow]skip[/] {o.candidate.id}: {why}", highlight=False)
            continue
        tried.append(o)
    return tried


_OWN_LOG: str | None = None  # the INFERTUNE_LOG value this module set (a user's own value is kept)


def _library_log(out: Path) -> str:
    """Libraries' warnings of this run (its fork server's and workers' too: Worker passes the file on) go to
    <out>/libraries.log, or to INFERTUNE_LOG where the user set it, instead of the terminal."""
    global _OWN_LOG
    import os

    from infertune.logs import ENV, route_library_logs

    if os.environ.get(ENV) in (None, _OWN_LOG):
        _OWN_LOG = os.environ[ENV] = str((out / "libraries.log").resolve())
    route_library_logs()
    return os.environ[ENV]


def _has_baseline(tried: list) -> bool:
    """Whether a naive baseline other than the reference is measured (causal LMs: the reference is the baseline)."""
    return any(o.role == "baseline" for o in tried)


def _peers(task, cfg: TuneConfig, result: TuneResult, out: Path, console) -> None:
    """--peers: the artifact under `infertune serve` vs engines users know, over HTTP (tasks/embedding/peers.py)."""
    if not hasattr(task, "run_peers"):
        result.peers = [{"error": "--peers measures embedding models; a causal LM's artifact is served by vLLM"}]
        return
    if not result.artifact:
        result.peers = [{"error": "no artifact (no winner): nothing of ours to compare"}]
        return
    t0 = time.perf_counter()
    try:
        got = task.run_peers(result, out)
    except InfertuneError as e:
        result.peers = [{"error": str(e)}]
        console.print(f"[yellow]peers not measured: {e}[/]")
        return
    result.peers = [r.model_dump() for r in got]
    result.search["peers_wall_s"] = round(time.perf_counter() - t0, 1)  # outside the tune's own wall_s
    console.print(f"peers ({time.perf_counter() - t0:.0f} s, same texts, rounds interleaved):\n{task.peers_table(got)}",
                  markup=False, highlight=False)


def _baseline_id(run: search.Run) -> str | None:
    return run.task.baseline_id() or next((o.candidate.id for o in run.options.values() if o.role == "baseline"), None)


def _sync(run: search.Run, result: TuneResult) -> None:
    result.candidates = list(run.results.values())
    ref = _baseline_id(run)
    result.baseline = run.results.get(ref) if ref else None


def _search(run: search.Run, task, steps: list, result: TuneResult, out: Path) -> None:
    """The stages (the reference, probes, refinement, full rounds, confirmation), then the late pass."""
    _probe_stage(run, task, steps, result, out)
    leaders = _measure_stages(run, task, result, _verified(run), [])
    _late_pass(run, task, result, out, leaders)


def _late_pass(run: search.Run, task, result: TuneResult, out: Path, leaders: list) -> None:
    """Options skipped for time get their turn when the stages left time unused: the shares are re-cut from what is
    left, they are probed, and the survivors measured in rounds interleaved with the leaders so far. In it an option
    is skipped for time only once the run has used 80% of its budget (docs/architecture.md, "Time budget"); should
    one still be skipped for time with less used, they are tried again (each option at most once more)."""
    b, tried = run.budget, set()
    while todo := [(step, o) for step, o in search.skipped_for_time(run) if o.candidate.id not in tried]:
        if tried and b.may_skip():  # after the first late pass: only while the run would end with time unused
            break
        tried |= {o.candidate.id for _, o in todo}
        run.console.print(f"  late pass: {len(todo)} skipped for time, {b.left():.0f} s of the budget left",
                          highlight=False)
        b.recut()
        run.late = True
        _probe_stage(run, task, todo, result, out, late=True)
        late = _verified(run, {o.candidate.id for _, o in todo})
        if late:
            bid = _baseline_id(run)
            measured = [c for c in leaders if c.id != bid and c.id in run.probes and run.results[c.id].status == "ok"]
            leaders = _measure_stages(run, task, result, late, measured, late=True)


def _probe_stage(run: search.Run, task, steps: list, result: TuneResult, out: Path, late: bool = False) -> None:
    b = run.budget
    t = b.elapsed()
    for step, o in steps:
        if step == "reference-probe":
            search.probe_reference(run, o)
        else:
            search.try_option(run, o)
        _sync(run, result)
        write(result, out)
        if step == "reference":
            rounds.stage(run, "reference", t, 1)  # its preparation and verification, on the accuracy subset
            t = b.elapsed()
    if not late:
        for o in task.extra_options(run):
            search.try_option(run, o)
    rounds.stage(run, "late probe" if late else "probe", t, len({o.candidate.id for _, o in steps}))
    _sync(run, result)
    write(result, out)


def _verified(run: search.Run, ids: set[str] | None = None) -> list:
    """The verified, probed candidates that may go on (not the baseline), fastest probe first; of `ids` if given."""
    bid = _baseline_id(run)
    ok = [run.cands[k] for k, r in run.results.items() if r.status == "ok" and k in run.probes
          and run.options.get(k) is not None and k != bid and r.meets_accuracy is not False
          and (ids is None or k in ids)]
    return sorted(ok, key=lambda c: -run.probes[c.id].speed)


def _refine(run: search.Run, task, ok: list, measured: list) -> list:
    """Refine the fastest verified engines of `ok` (the reference among them only if it is one of the fastest);
    `measured` (the leaders, in a late pass) count in the ranking but are not refined again."""
    done = {c.id for c in measured}
    ranked = sorted(ok + measured, key=lambda c: -run.probes[c.id].speed)
    top = run.probes[ranked[0].id].speed if ranked else 0.0
    todo = []
    for i, c in enumerate(ranked):
        if c.id in done:
            continue
        # on a GPU an engine under --drop-below of the fastest verified probe is not refined: probed before the
        # fastest existed, it escaped the drop and took most of the refine share (an fp32 reference at 0.09x).
        # On a shared CPU one probe can be halved by a neighbour, and fp32 is often the fallback.
        slow = run.cfg.device != "cpu" and run.probes[c.id].speed < run.cfg.drop_below * top
        if i >= search.REFINE_TOP or slow:
            why = (f"probed {run.probes[c.id].speed:.1f} {task.unit}: "
                   + (f"{run.probes[c.id].speed / top:.2f}x the fastest, below --drop-below {run.cfg.drop_below:g}"
                      if slow else f"behind the {search.REFINE_TOP} fastest"))
            run.record(c, status="rejected", reason=why, dropped=why)
            run.release(c)
            continue
        todo.append(c)
    live = []
    for j, c in enumerate(todo):
        share = max(0.0, run.budget.stage_left("refine")) / (len(todo) - j)
        live += task.refine(run, c, run.probes[c.id], share)
    return live


def _measure_stages(run: search.Run, task, result: TuneResult, ok: list, measured: list, late: bool = False) -> list:
    """Refine `ok`, measure them in full rounds interleaved with the baseline and `measured`, then the leaders'
    confirmation passes. Returns the leaders."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    b, pre = run.budget, "late " if late else ""
    t = b.elapsed()
    live = _refine(run, task, ok, measured)
    rounds.stage(run, pre + "refine", t, len(live))
    bid = _baseline_id(run)
    base = [run.cands[bid]] if bid in run.probes and run.results[bid].status == "ok" else []
    live = base + [c for c in measured + live if run.results[c.id].status == "ok" and c.id != bid]
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=run.console, transient=True, disable=run.console.quiet) as bar:
        n = max(1, run.cfg.rounds if not run.cfg.quick else min(run.cfg.rounds, 2))
        t = b.elapsed()
        bar_id = bar.add_task("measuring", total=len(live) * n)
        done = rounds.rounds(run, live, n, "round", bar, bar_id)
        _summarize(run, live)
        rounds.stage(run, pre + "full", t, len(live))
        _sync(run, result)
        leaders = _leaders(run, task, result, live)
        t = b.elapsed()
        if leaders and run.cfg.confirm_rounds and (task.quick_confirm or not run.cfg.quick):
            bar.update(bar_id, total=len(live) * done + len(leaders) * run.cfg.confirm_rounds)
            rounds.rounds(run, leaders, run.cfg.confirm_rounds, "confirm", bar, bar_id)
            _summarize(run, leaders)
        rounds.stage(run, pre + "confirm", t, len(leaders))
    _sync(run, result)
    return leaders


def _summarize(run: search.Run, live: list) -> None:
    for c in live:
        if run.results[c.id].status == "ok" and run.samples.get(c.id):
            run.record(c, **run.task.summarize(run, c, run.samples[c.id]))


def _leaders(run: search.Run, task, result: TuneResult, live: list) -> list:
    """The baseline and the (up to) three fastest candidates that currently meet every constraint, plus
    faster ones narrowly over the SLO: the final pick and its ratio rest on their extra passes."""
    trial = result.model_copy(deep=True)
    decide(task, trial, run.cfg.tie_margin, task.drift)
    base = trial.baseline.name if trial.baseline else None
    ok = [r for r in trial.candidates if r.status == "ok" and r.name != base and r.stage != "probe"]
    top = {r.name for r in sorted(ok, key=task.speed, reverse=True)[:3]}
    best = max((task.speed(r) for r in ok), default=0.0)
    for r in trial.candidates:
        fig, limit = task.slo(r)
        if (r.meets_accuracy is not False and r.stage != "probe" and task.speed(r) > best and fig is not None
                and limit is not None and fig <= 1.3 * limit):
            top.add(r.name)
    return [c for c in live if c.id in top or c.id == base] if top else []


def _finish_log(run: search.Run, result: TuneResult) -> None:
    from infertune.tuning.worker import start_method

    result.search["worker_start"] = start_method()  # forkserver, or spawn and why
    cands = {}
    for k, r in run.results.items():
        cands[k] = {"stage": r.stage, "status": r.status, "time_s": r.time_s, "why_tried": r.why_tried,
                    "probe": r.probe or None, "dropped": r.dropped,
                    "passes": len(run.samples.get(k, [])),
                    "cost_s": {st: round(v, 2) for st, v in run.costs.get(k, {}).items()}}
    by_stage: dict[str, float] = {}
    for per in run.costs.values():
        for st, v in per.items():
            by_stage[st] = by_stage.get(st, 0.0) + v
    # seconds of worker time per stage, all candidates together
    result.search["cost_s"] = {st: round(v, 2) for st, v in by_stage.items()}
    result.search.update({"stages": run.log["stages"], "candidates": cands, "not_tried": run.log["not_tried"],
                          "refine": run.log["refine"], "dropped": run.log["dropped"]})
