"""Each HTML report, rendered from recorded results, opened in a real headless browser (Debian's chromium
driven by playwright): no console or page errors, nothing requested from outside the file, the headline
card present and saying the answer, no page wider than the window.

Screenshots go to $INFERTUNE_SCREENSHOTS when set (`make screenshots` sets docs/screenshots), else to the
test's temporary directory. Skipped, with the reason, when playwright or a chromium binary is missing
(`make test` installs both where it can: see the Makefile's browser step)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import report_inputs as inputs  # noqa: E402

WIDTH = 1280
MAX_SHOT_HEIGHT = 2600  # px: the card, the table and the first plots; keeps the PNGs small


def chromium_path() -> str | None:
    env = os.environ.get("INFERTUNE_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser():
    pw = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: pip install playwright "
                             "(part of infertune[dev])")
    exe = chromium_path()
    if exe is None:
        pytest.skip("no chromium binary found (apt-get install chromium, or set INFERTUNE_CHROMIUM); playwright's own "
                    "browser download is not used")
    with pw.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _shot_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("INFERTUNE_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _small_png(raw: bytes, path: Path) -> None:
    """A palette PNG (128 colours) for $INFERTUNE_SCREENSHOTS: text and flat plots stay sharp at a fraction of the
    size. In the test's temporary directory the browser's PNG is kept as it is (the palette costs ~0.7 s a page)."""
    if not os.environ.get("INFERTUNE_SCREENSHOTS"):
        path.write_bytes(raw)
        return
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(raw)).convert("RGB")
    img.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def _render(kind: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{kind}.html"
    if kind == "tune-lm":
        from infertune.tasks.causal_lm.report import write_lm_report

        write_lm_report(inputs.tune(inputs.TUNE_LM), out)
    elif kind.startswith("tune"):
        from infertune.tasks.embedding.report import write_report

        write_report({"tune-winner": inputs.tune, "tune-ladder": inputs.tune_with_ladder}.get(
            kind, inputs.tune_no_winner)(), out)
    elif kind.startswith("bench"):
        from infertune.bench.report import write_html

        write_html(inputs.bench() if kind == "bench" else inputs.bench_sweep(), out)
    else:
        from infertune.validate.report import write_html

        write_html(inputs.validate(inputs.VALIDATE_UNCONFIRMED if kind == "validate"
                                   else inputs.VALIDATE_PASSED), out)
    return out


CASES = {
    "tune-winner": r"^Serve openvino/bf16/tokens-2048: 315\.9 items/s, 4\.18x the naive baseline",
    "tune-ladder": r"^Serve openvino/bf16/tokens-2048: 315\.9 items/s, 4\.18x the naive baseline",
    "tune-no-winner": r"^No winner: no candidate met every constraint",
    "tune-lm": r"^Serve cuda-graph-compile/bf16: 776\.8 tokens/s batch-1 decode, 31\.88x the naive baseline",
    "bench": r"^Max throughput 303\.1 req/s",
    "bench-sweep-synthetic": r"^Max throughput 64\.0 req/s",
    "validate": r"^SLO NOT MET: every drill passed its own rule, but the soak's P99 505\.6 ms",
    "validate-passed": r"^PASSED: all 6 drills passed",
}


@pytest.mark.parametrize("kind", list(CASES))
def test_report_renders_in_a_browser_with_its_headline(browser, kind, tmp_path):
    html_path = _render(kind, tmp_path)
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))

    def only_the_file(route):
        url = route.request.url
        if url.startswith(("file:", "data:", "about:")):
            return route.continue_()
        problems.append(f"requested from outside the file: {url}")
        return route.abort()

    page.route("**/*", only_the_file)
    page.goto(html_path.as_uri(), wait_until="load")
    headline = page.locator("#headline")
    assert headline.count() == 1 and headline.is_visible(), f"{kind}: no headline card"
    text = " ".join(headline.inner_text().split())
    assert re.search(CASES[kind], text), f"{kind}: headline reads {text!r}"
    assert page.locator("svg").count() >= 1, f"{kind}: no plot"
    ladder = page.locator("#ladder")
    if kind == "tune-ladder":  # the precision ladder's heading and its table, on screen
        assert ladder.is_visible() and "Precision ladder" in ladder.inner_text()
        rows = page.locator("#ladder + p + table tr")
        assert rows.count() == 3 and rows.nth(0).is_visible(), "the ladder's table is missing"
        assert "1009.00 (1.41x)" in rows.nth(1).inner_text()
    elif kind.startswith("tune"):
        assert ladder.count() == 0, f"{kind}: a ladder section without a ladder"
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDTH, f"{kind}: the page is {width} px wide in a {WIDTH} px window"
    height = min(page.evaluate("document.documentElement.scrollHeight"), MAX_SHOT_HEIGHT)
    raw = page.screenshot(clip={"x": 0, "y": 0, "width": WIDTH, "height": height}, full_page=True)
    _small_png(raw, _shot_dir(tmp_path) / f"{kind}.png")
    page.close()
    assert not problems, f"{kind}: {problems}"


def test_gpu_tune_report_shows_each_candidates_share_of_the_peak(browser, tmp_path):
    """A GPU tune's report (the recorded H200 run, peaks computed as tune computes them) shows the share-of-peak
    table: visible, one row per measured candidate, the winner's achieved TFLOP/s and % as results.json has them,
    and the page no wider than the window."""
    from infertune.tasks.embedding.report import write_report

    res = inputs.tune_gpu_with_peaks()
    html_path = write_report(res, tmp_path / "tune-gpu.html")
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    page.goto(html_path.as_uri(), wait_until="load")
    heading = page.locator("h2#peak")
    assert heading.count() == 1 and heading.is_visible()
    tbl = page.locator("h2#peak + table")
    tbl.scroll_into_view_if_needed()
    assert tbl.is_visible() and "% of peak" in tbl.locator("tr").first.inner_text()
    measured = [r for r in res.candidates if r.peak is not None]
    assert tbl.locator("tr:has(td)").count() == len(measured) >= 2
    win = tbl.locator("tr.winner")
    assert win.count() == 1 and win.is_visible()
    text = " ".join(win.inner_text().split())
    assert f"{res.winner.peak.linear_tflops:,.1f} TFLOP/s" in text and f"{res.winner.peak.fraction * 100:.1f}%" in text
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    raw = page.screenshot()
    _small_png(raw, _shot_dir(tmp_path) / "tune-gpu-peak.png")
    page.close()


def test_recorded_h100_tune_report_shows_its_ladder_and_peak(browser, tmp_path):
    """The product's own H100 tune (Qwen3-Embedding-0.6B shape), as recorded: results.json holds the precision ladder,
    each measured candidate's share of the peak and plan's prediction beside the measurement, and the report shows
    them on screen: the ladder's table with one row per timed shape and token count, the peak table with the winner's
    TFLOP/s and share as recorded, the predicted-vs-measured rows with their errors."""
    from infertune.tasks.embedding.report import write_report

    res = inputs.tune(inputs.TUNE_H100)
    assert res.ladder and res.ladder["status"] == "measured" and res.winner.peak is not None
    html_path = write_report(res, tmp_path / "tune-h100.html")
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    page.goto(html_path.as_uri(), wait_until="load")
    ladder = page.locator("#ladder")
    ladder.scroll_into_view_if_needed()
    assert ladder.is_visible() and "Precision ladder" in ladder.inner_text()
    rows = page.locator("#ladder + p + table tr:has(td)")
    assert rows.count() == len(res.ladder["cells"]) >= 2 and rows.nth(0).is_visible()
    assert "fp8" in page.locator("#ladder + p + table").inner_text()
    tbl = page.locator("h2#peak + table")
    tbl.scroll_into_view_if_needed()
    assert tbl.is_visible() and tbl.locator("tr:has(td)").count() == len([r for r in res.candidates if r.peak])
    text = " ".join(tbl.locator("tr.winner").inner_text().split())
    assert f"{res.winner.peak.linear_tflops:,.1f} TFLOP/s" in text and f"{res.winner.peak.fraction * 100:.1f}%" in text
    pvm = page.locator("h2#predicted + p + table tr:has(td)")  # plan's GPU bound beside what the H100 ran
    assert res.predicted_vs_measured and pvm.count() == len(res.predicted_vs_measured)
    first, want = " ".join(pvm.nth(0).inner_text().split()), res.predicted_vs_measured[0]
    assert first.startswith(want.quantity) and f"{want.error_pct:+,.0f}%" in first, first
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    _small_png(page.screenshot(), _shot_dir(tmp_path) / "tune-h100-ladder-peak.png")
    page.close()


def test_tune_report_shows_predicted_vs_measured(browser, tmp_path):
    """The recorded AMX tune with plan's prediction beside its winner's measurement (computed as tune computes it):
    the "Predicted vs measured" table is on screen with one row per quantity, each with its figures and error."""
    from infertune.tasks.embedding.report import write_report

    res = inputs.tune_with_predicted()
    html_path = write_report(res, tmp_path / "tune-predicted.html")
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    page.goto(html_path.as_uri(), wait_until="load")
    heading = page.locator("h2#predicted")
    assert heading.count() == 1 and heading.is_visible() and heading.inner_text() == "Predicted vs measured"
    tbl = page.locator("h2#predicted + p + table")
    tbl.scroll_into_view_if_needed()
    assert tbl.is_visible()
    rows = tbl.locator("tr:has(td)")
    assert rows.count() == len(res.predicted_vs_measured) == 4
    for i, want in enumerate(res.predicted_vs_measured):
        text = " ".join(rows.nth(i).inner_text().split())
        assert rows.nth(i).is_visible() and text.startswith(want.quantity), text
        assert f"{want.error_pct:+,.0f}%" in text or f"{want.error_pct:+,.1f}%" in text, text
    assert "316 items/s" in " ".join(rows.nth(1).inner_text().split())  # the winner's measured 315.9 items/s, rounded
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    _small_png(page.screenshot(), _shot_dir(tmp_path) / "tune-predicted.png")


def test_tune_report_shows_the_kernels_that_ran(browser, tmp_path):
    """The kernels section (one profiled batch per engine: weight GEMMs by data type) is on screen, one row per
    engine, and the page stays within the window."""
    from infertune.tasks.embedding.report import write_report

    res = inputs.tune_with_kernels()
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    page.goto(write_report(res, tmp_path / "tune-kernels.html").as_uri(), wait_until="load")
    heading = page.locator("h2#kernels")
    assert heading.count() == 1 and heading.is_visible() and "Kernels that ran" in heading.inner_text()
    tbl = page.locator("h2#kernels + p + table")
    tbl.scroll_into_view_if_needed()
    assert tbl.is_visible() and "GEMMs (weights)" in tbl.locator("tr").first.inner_text()
    assert tbl.locator("tr:has(td)").count() >= 2 and "36 fp32" in tbl.inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    page.close()
