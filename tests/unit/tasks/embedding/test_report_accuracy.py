"""report.html and the console summary show accuracy per length bucket (a plot and a table per candidate, the
gated misses in red) and the user's task metrics beside the reference's."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fixtures"))
import report_inputs as inputs  # noqa: E402

from infertune.results import BucketAccuracy, TaskMetric  # noqa: E402

OUTSIDE = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|<script|<link|@import|url\(\s*["']?https?:""", re.I)


def _with_accuracy():
    res = inputs.tune()
    for i, r in enumerate(res.candidates):
        long = 0.99999 if r.name == res.winner.name else 0.989 - 0.001 * i  # every other candidate drifts on long texts
        r.accuracy.by_bucket = [BucketAccuracy(bucket="1-16", n=40, cosine_mean=0.99999, cosine_min=0.9999),
                                BucketAccuracy(bucket="257-512", n=25, cosine_mean=long, cosine_min=long - 0.002),
                                BucketAccuracy(bucket=">512", n=3, cosine_mean=0.9, cosine_min=0.89)]
        r.accuracy.task = [TaskMetric(name="recall@10", source="eval-pairs",
                                      value=0.95 if r.name == res.winner.name else 0.93, reference=0.95,
                                      max_drop=0.01, n=80),
                           TaskMetric(name="mrr", source="eval-pairs", value=0.8, reference=0.81, n=80)]
    return res


def test_buckets_and_task_metrics_are_in_the_report(tmp_path):
    from infertune.tasks.embedding.report import write_report

    res = _with_accuracy()
    page = write_report(res, tmp_path / "report.html").read_text()
    assert "<h2>Accuracy per length bucket</h2><svg" in page and "<h2>Task metrics</h2>" in page
    assert page.count("<h3>#") == len(res.candidates)  # a table per candidate
    # 257-512 is gated (n=25 >= 20) and under the budget for the drifting candidates: red; >512 (n=3) is not gated
    drifting = len(res.candidates) - 1
    assert len(re.findall(r'<td class="miss">0\.98\d+</td>', page)) == drifting
    assert page.count("3 (not gated)") == len(res.candidates)
    assert "recall@10 (eval-pairs)" in page and "0.9500 (ref 0.9500)" in page
    assert page.count('class="miss">0.9300 (ref 0.9500)') == drifting  # a drop of 0.02 > 0.01
    assert page.count(">0.9500 (ref 0.9500)") == 1  # the winner's, not marked
    assert not OUTSIDE.search(page)


def test_console_names_the_winners_buckets_and_task_figures():
    from infertune.tasks.embedding.accuracy_report import console_lines

    lines = console_lines(_with_accuracy())
    assert lines[0].startswith("accuracy by length (openvino/bf16/tokens-2048): 1-16 tokens n=40 cos 0.99999")
    assert lines[1:] == ["recall@10 (eval-pairs): 0.9500 vs reference 0.9500, n=80 queries",
                         "mrr (eval-pairs): 0.8000 vs reference 0.8100, n=80 queries"]


def test_a_run_without_them_has_no_empty_sections(tmp_path):
    from infertune.tasks.embedding.report import write_report

    page = write_report(inputs.tune(), tmp_path / "report.html").read_text()
    assert "Accuracy per length bucket" not in page and "Task metrics" not in page
