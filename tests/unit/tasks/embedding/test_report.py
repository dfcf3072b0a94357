"""report.html of an embedding tune, from recorded runs: the answer on top, the winner marked, the decision's
own P99, SLO misses marked, memory shown, readable Pareto labels, nothing fetched from outside the file."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fixtures"))
import report_inputs as inputs  # noqa: E402

OUTSIDE = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|<script|<link|@import|url\(\s*["']?https?:""", re.I)


def _card(page: str) -> str:
    return page[page.index('<section class="card'):page.index("</section>")]


def test_winner_report_answers_on_top_with_speedup_n_spread_and_next_command(tmp_path):
    from infertune.tasks.embedding.report import write_report

    page = write_report(inputs.tune(), tmp_path / "report.html").read_text()
    card = _card(page)
    assert "Serve <b>openvino/bf16/tokens-2048</b>" in card and "4.18x" in card
    assert "n=10 passes" in card and "269.8-315.9 items/s" in card  # the winner's n and range
    assert "n=10, 64.9-75.6 items/s" in card  # the baseline's
    assert 'id="next-command">infertune serve /tmp/demo1/artifact<' in card
    assert page.count('<tr class="winner">') == 1 and "winner green" not in page
    assert not OUTSIDE.search(page)


def test_the_p99_shown_is_the_p99_the_decision_checks():
    from infertune.config import SLO, TuneConfig
    from infertune.tasks.embedding.plots import decision_p99
    from infertune.tasks.embedding.task import EmbeddingTask

    res = inputs.tune()
    task = EmbeddingTask(TuneConfig(slo=SLO(p99_ms=100)), None, None)
    for r in res.candidates:
        assert decision_p99(r) == task.slo(r)[0], r.name
    win = next(r for r in res.candidates if r.name == res.winner.name)
    assert round(decision_p99(win), 1) == 81.3 and round(win.latency_ms.p99, 1) == 96.7  # not the pooled one


def test_winner_row_shows_decision_p99_and_memory(tmp_path):
    from infertune.tasks.embedding.report import write_report

    page = write_report(inputs.tune(), tmp_path / "report.html").read_text()
    row = re.search(r'<tr class="winner">(.*?)</tr>', page).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[6] == "81.3" and cells[8] == "731"  # P99 (SLO), peak MB
    base = re.search(r"<tr[^>]*><td[^>]*>5</td>(.*?)</tr>", page).group(1)  # the naive baseline misses the SLO
    assert 'class="miss">&#10007; 1096.3' in base


def test_no_winner_report_says_so_and_what_would_admit_the_fastest(tmp_path):
    from infertune.tasks.embedding.report import write_report

    page = write_report(inputs.tune_no_winner(), tmp_path / "report.html").read_text()
    card = _card(page)
    assert "<b>No winner</b>" in card and "tone-warn" in card
    assert 'id="next-command">infertune tune minilm --slo-p99-ms ' in card
    assert '<tr class="winner">' not in page and "winner green" not in page
    assert "no winner: no candidate met every constraint" in page  # the Pareto title
    assert page.count('class="miss">&#10007;') == 5  # every measured candidate misses 25 ms


def test_pareto_labels_do_not_overlap_even_when_points_crowd():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from infertune.tasks.embedding.plots import place_labels

    fig, ax = plt.subplots(figsize=(6, 4))
    pts = [(100 + i * 0.5, 1e-5 * (1 + 0.02 * i), str(i + 1)) for i in range(8)]  # eight points in one spot
    ax.scatter([p[0] for p in pts], [p[1] for p in pts])
    ax.set_yscale("log")
    boxes = place_labels(ax, pts)
    plt.close(fig)
    overlaps = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                if not (a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1])]
    assert len(boxes) == 8 and not overlaps


def test_causal_lm_report_has_the_card_and_the_winner_row(tmp_path):
    from infertune.tasks.causal_lm.report import write_lm_report

    page = write_lm_report(inputs.tune(inputs.TUNE_LM), tmp_path / "report.html").read_text()
    card = _card(page)
    assert "Serve <b>cuda-graph-compile/bf16</b>: 776.8 tokens/s batch-1 decode, <b>31.88x</b>" in card
    assert "n=80 steps" in card and "speedup 31.88x by medians" in card
    assert 'id="next-command">infertune serve /tmp/tq/artifact<' in card
    assert page.count("<tr class='winner'>") == 1 and not OUTSIDE.search(page)


def test_the_precision_ladder_shows_as_a_table_when_the_result_has_one(tmp_path):
    from infertune.tasks.embedding.report import write_report

    page = write_report(inputs.tune_with_ladder(), tmp_path / "report.html").read_text()
    sec = page[page.index('<h2 id="ladder">'):]
    sec = sec[:sec.index("</ul>")]
    assert "NVIDIA H100 80GB HBM3" in sec and "<b>fp8 1.46x, int8 0.85x</b>" in sec
    assert "16,384 x 1024 x 3072" in sec and "1009.00 (1.41x)" in sec and "606.00 (0.85x)" in sec
    assert "RuntimeError: not measured in this fixture" in sec  # a precision that failed at a shape says why
    assert "torch-compile/int8/torchao-int8-dyn/tokens-16384: skipped: int8 GEMMs measured 0.85x" in sec
    plain = write_report(inputs.tune(), tmp_path / "plain.html").read_text()
    assert 'id="ladder"' not in plain  # a result without a ladder (recorded before it existed) has no section
