"""The rich Console every command prints through.

Lines are never hard-wrapped (`soft_wrap=True`): a terminal wraps long lines by itself and a copy keeps
them whole, and piped or redirected output (`infertune plan ... > plan.txt`, CI logs) never splits a
command or a path at 80 columns. Tables still lay out to the terminal's width; when the stream is not a
terminal they get 200 columns instead of rich's fallback of 80.
"""

from __future__ import annotations

from typing import Any

PIPE_WIDTH = 200


def console(stderr: bool = True, **kw: Any):
    """stderr=True: progress, logs, errors (for people); stderr=False: the results (stdout)."""
    from rich.console import Console

    kw.setdefault("soft_wrap", True)
    kw.setdefault("highlight", False)
    c = Console(stderr=stderr, **kw)
    if not c.is_terminal and "width" not in kw:
        c.width = PIPE_WIDTH
    return c
