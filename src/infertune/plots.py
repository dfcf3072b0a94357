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
