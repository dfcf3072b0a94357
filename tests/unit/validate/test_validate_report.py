"""validate.html from recorded runs says PASSED only when it is: a soak whose P99 broke the SLO and an
unconfirmed peak are said on top, with the next command."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
import report_inputs as inputs  # noqa: E402


def _page(res, tmp_path):
    from infertune.validate.report import write_html

    write_html(res, tmp_path / "validate.html")
    return (tmp_path / "validate.html").read_text()


def test_soak_p99_over_the_slo_and_an_unconfirmed_peak_are_not_passed(tmp_path, capsys):
    from infertune.validate.report import print_summary

    res = inputs.validate(inputs.VALIDATE_UNCONFIRMED)
    assert res.passed is True  # what the recorded run said
    page = _page(res, tmp_path)
    h1 = page[page.index("<h1>"):page.index("</h1>")]
    assert "SLO NOT MET" in h1 and "PASSED" not in h1
    assert "the soak&#x27;s P99 505.6 ms breaks the SLO p99_e2e_ms&lt;=200" in page
    assert "Peak 72.8 req/s: <b class=fail>not confirmed</b>" in page and "bracket 57.04 - 59.89 req/s" in page
    assert "infertune validate /tmp/ci13/runs/20261130-072810/artifact --peak 57.04" in page
    assert "but its P99 breaks the SLO" in page  # the soak's row in the drills table
    print_summary(res)
    err = capsys.readouterr().err
    assert "SLO NOT MET" in err and "all drills passed" not in err


def test_failed_and_passed_runs(tmp_path):
    failed = _page(inputs.validate(inputs.VALIDATE_FAILED), tmp_path)
    assert "<b>FAILED</b>: 1 of 6 drills failed (soak: memory climbs" in failed and "tone-fail" in failed
    passed = _page(inputs.validate(inputs.VALIDATE_PASSED), tmp_path)
    h1 = passed[passed.index("<h1>"):passed.index("</h1>")]
    assert "PASSED" in h1 and "tone-pass" in passed
    assert "<b>confirmed</b> by the SLO search" in passed and "P99 193.356 ms" in passed
