"""Small inline SVG charts, drawn on the server: no chart library, no script.

A chart is a row of bars over equal time slices; the page embeds the SVG as is
(Jinja's ``Markup``), so it works without JavaScript and prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

WIDTH, HEIGHT = 240, 48


@dataclass(frozen=True, slots=True)
class Series:
    """Values per time slice, oldest first, and how each reads in a tooltip."""

    values: Sequence[float]
    labels: Sequence[str]  # one per slice, e.g. "12:05-12:10: 40 attempts"
    color: str
    maximum: float | None = None  # the top of the scale; default: the largest value


def bars(series: Series, title: str) -> Markup:
    """A bar chart of ``series`` with ``title`` for screen readers and tooltips."""
    n = max(len(series.values), 1)
    top = series.maximum if series.maximum is not None else max(series.values, default=0)
    gap = 2
    width = (WIDTH - gap * (n - 1)) / n
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<line x1="0" y1="{HEIGHT - 0.5}" x2="{WIDTH}" y2="{HEIGHT - 0.5}" class="axis"/>',
    ]
    for i, (value, label) in enumerate(zip(series.values, series.labels, strict=True)):
        h = 0.0 if top <= 0 else (HEIGHT - 2) * min(value, top) / top
        x = i * (width + gap)
        parts.append(
            f'<rect x="{x:.1f}" y="{HEIGHT - 1 - h:.1f}" width="{width:.1f}" '
            f'height="{max(h, 0):.1f}" fill="{series.color}">'
            f"<title>{escape(label)}</title></rect>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
