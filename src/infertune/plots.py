"""Small helpers every HTML/console report shares: number formatting and inline SVG figures."""

from __future__ import annotations

import io


def fmt(x, spec="{:.1f}") -> str:
    return "-" if x is None else spec.format(x)


def figure_svg(fig) -> str:
    """A matplotlib figure as inline SVG markup (closes the figure)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    s = buf.getvalue()
    return s[s.find("<svg"):]


def log_axis(ax, axis: str = "x") -> None:
    """A log scale whose ticks read as plain numbers at 1, 2 and 5 per decade (10, 20, 50, 100 ms), so a
    short range still has labels."""
    import math

    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    a = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    wide = lo > 0 and hi > 0 and math.log10(hi / lo) > 3  # beyond 3 decades, 1-2-5 ticks crowd
    a.set_major_locator(LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0)))
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(NullFormatter())
