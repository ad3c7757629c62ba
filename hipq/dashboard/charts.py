"""Small inline SVG charts, drawn on the server: no chart library, no script.

A chart is a row of bars over equal time slices, with its axes: the scale's top and
zero on the left, the first and last slice's times below. The page embeds the SVG
as is (Jinja's ``Markup``), so it works without JavaScript and prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

WIDTH, HEIGHT = 280, 66
LEFT = 34  # room for the value axis' labels
PLOT_HEIGHT = 48  # the bars; the time axis' labels below
FONT = 9


@dataclass(frozen=True, slots=True)
class Series:
    """Values per time slice, oldest first, and how each reads in a tooltip."""

    values: Sequence[float]
    labels: Sequence[str]  # one per slice, e.g. "12:05-12:10: 40 attempts"
    color: str
    maximum: float | None = None  # the top of the scale; default: the largest value
    unit: str = ""  # after the value axis' top, e.g. "%"


@dataclass(frozen=True, slots=True)
class TimeAxis:
    """What the time axis says under its first and last slice."""

    start: str
    end: str


def _number(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1_000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}" if value == int(value) or value >= 10 else f"{value:.1f}"


def _text(x: float, y: float, anchor: str, text: str) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{FONT}" '
        f'class="tick">{escape(text)}</text>'
    )


def bars(series: Series, title: str, axis: TimeAxis | None = None) -> Markup:
    """A bar chart of ``series`` with ``title`` for screen readers and tooltips."""
    n = max(len(series.values), 1)
    top = series.maximum if series.maximum is not None else max(series.values, default=0)
    gap = 2 if n <= 60 else 0
    plot = WIDTH - LEFT
    width = (plot - gap * (n - 1)) / n
    base = PLOT_HEIGHT - 0.5
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        # The value axis: its top and zero.
        f'<line x1="{LEFT - 2}" y1="1" x2="{LEFT - 2}" y2="{base}" class="axis"/>',
        _text(LEFT - 5, FONT, "end", _number(max(top, 0)) + series.unit),
        _text(LEFT - 5, base, "end", "0"),
        f'<line x1="{LEFT - 2}" y1="{base}" x2="{WIDTH}" y2="{base}" class="axis"/>',
    ]
    if axis is not None:
        parts.append(_text(LEFT, HEIGHT - 3, "start", axis.start))
        parts.append(_text(WIDTH - 1, HEIGHT - 3, "end", axis.end))
    for i, (value, label) in enumerate(zip(series.values, series.labels, strict=True)):
        h = 0.0 if top <= 0 else (PLOT_HEIGHT - 2) * min(value, top) / top
        x = LEFT + i * (width + gap)
        parts.append(
            f'<rect x="{x:.1f}" y="{PLOT_HEIGHT - 1 - h:.1f}" width="{width:.1f}" '
            f'height="{max(h, 0):.1f}" fill="{series.color}">'
            f"<title>{escape(label)}</title></rect>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
