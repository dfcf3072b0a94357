"""The HTML page every report shares (tune, bench, validate): one stylesheet, the summary card at the top
(the answer in one line, its figures with n and spread, the next command) and a table whose extra columns
fold into <details>. No scripts, fonts or links to anything outside the file: reports work offline."""

from __future__ import annotations

import html
from collections.abc import Sequence

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1200px;
     padding:0 1em;color:#1b1f24}
h1{font-size:1.5em;margin:.2em 0 .6em}h2{font-size:1.15em;margin:1.6em 0 .4em}
table{border-collapse:collapse;font-size:12.5px;margin:.4em 0}
td,th{border:1px solid #d0d7de;padding:3px 7px;vertical-align:top;text-align:right}
th{background:#f6f8fa}td.l,th.l{text-align:left}
tr.winner td{background:#dafbe1;font-weight:600}tr.failed td,tr.skipped td{color:#8c959f}
tr.rejected td{color:#6e5b00}tr.bad td{color:#b00}
td.miss{color:#b00;font-weight:600}.pass{color:#1a7f37}.fail{color:#cf222e}.warn{color:#9a6700}.skip{color:#6e7781}
.card{border:2px solid #d0d7de;border-radius:8px;padding:.8em 1.1em;margin:0 0 1.2em;background:#f6f8fa}
.card.tone-pass{border-color:#1a7f37;background:#f0fff4}.card.tone-fail{border-color:#cf222e;background:#fff5f5}
.card.tone-warn{border-color:#bf8700;background:#fffbea}
.card .answer{font-size:1.25em;font-weight:650;margin:0 0 .35em;color:#1b1f24}
.card ul{margin:.2em 0 .5em 1.1em;padding:0}.card li{margin:.1em 0}
.card .next{margin:.4em 0 0}.card code{background:#fff;border:1px solid #d0d7de;border-radius:4px;padding:1px 6px}
.badge{display:inline-block;border-radius:10px;padding:0 7px;font-size:11px;font-weight:600;color:#fff;
       background:#1a7f37}
details{margin:.5em 0}summary{cursor:pointer;color:#0550ae}
pre{font-size:11px;white-space:pre-wrap}.names{overflow-wrap:anywhere;font-size:11px}svg,img{max-width:100%;height:auto}
.note{color:#57606a;font-size:12.5px}
"""


def e(x) -> str:
    return html.escape("" if x is None else str(x))


def document(title: str, body: str) -> str:
    """A complete HTML page: doctype, charset, the shared stylesheet, `body` (already HTML)."""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f"<style>{CSS}</style></head><body>\n{body}\n</body></html>\n")


def card(answer: str, facts: Sequence[str] = (), next_command: str | None = None, tone: str = "",
         next_label: str = "Next") -> str:
    """The summary card: `answer` (HTML) in one line, `facts` (HTML) below it, then the command to run."""
    items = "".join(f"<li>{f}</li>" for f in facts if f)
    nxt = (f'<p class="next">{e(next_label)}: <code id="next-command">{e(next_command)}</code></p>'
           if next_command else "")
    return (f'<section class="card tone-{e(tone)}" id="summary"><p class="answer" id="headline">{answer}</p>'
            f"{f'<ul>{items}</ul>' if items else ''}{nxt}</section>")


def table(head: Sequence[str], rows: Sequence[Sequence[str]], row_classes: Sequence[str] | None = None,
          left: int = 1, cell_classes: Sequence[Sequence[str]] | None = None) -> str:
    """A table of already-escaped cells; the first `left` columns are left-aligned."""
    def cls(i: int, extra: str = "") -> str:
        c = " ".join(x for x in ("l" if i < left else "", extra) if x)
        return f' class="{c}"' if c else ""

    first = cell_classes[0] if cell_classes else []
    th = "".join(f"<th{cls(i, 'l' if i < len(first) and 'l' in first[i].split() else '')}>{h}</th>"
                 for i, h in enumerate(head))
    body = []
    for r, row in enumerate(rows):
        rc = row_classes[r] if row_classes else ""
        extra = cell_classes[r] if cell_classes else [""] * len(row)
        tds = "".join(f"<td{cls(i, extra[i] if i < len(extra) else '')}>{v}</td>" for i, v in enumerate(row))
        body.append(f'<tr{f" class={chr(34)}{rc}{chr(34)}" if rc else ""}>{tds}</tr>')
    return f"<table><tr>{th}</tr>{''.join(body)}</table>"


def folded(summary: str, inner: str) -> str:
    return f"<details><summary>{e(summary)}</summary>{inner}</details>"


def no_winner_card(result) -> str:
    """A tune without a winner (a TuneResult, either family): the decision's sentences, and the tune command
    whose flags (from `achievable`) admit the fastest candidate."""
    ach = result.achievable.get("fastest_within_accuracy") or result.achievable.get("fastest_within_slo") or {}
    nxt = None
    if ach.get("flags"):
        dev = result.config.get("device")
        nxt = (f"infertune tune {result.config.get('model') or result.model}"
               f"{' --device ' + dev if dev and dev != 'cpu' else ''} {ach['flags']}")
    answer = e(result.decision[0] if result.decision else "No winner.").replace(
        "No candidate", "<b>No winner</b>: no candidate", 1)
    return card(answer, [e(x) for x in result.decision[1:]], nxt, tone="warn",
                next_label=f"Next (admits {ach.get('name')})" if nxt else "Next")
