"""The viewer's charts, drawn on the server as inline SVG.

Server-rendered SVG needs no script (the pages run none), no vendored library and no licence
file, and the Content-Security-Policy needs no exception for it. Every label is escaped here
and its hidden characters are made visible (labels can be paths and ids from the repository,
which is untrusted input; see :mod:`cogd.ui.visible`); colours come from classes in
``static/style.css``, never from inline styles (the policy forbids them). Returns
:class:`markupsafe.Markup`, safe to put in a template as is.
"""

from __future__ import annotations

import math

from markupsafe import Markup
from markupsafe import escape as _escape

from cogd.ui.visible import visible

WIDTH, HEIGHT = 640, 200  # the viewBox; the stylesheet scales it to the page's width
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 18, 34  # margins, in viewBox units, for the axes' labels
MAX_BAR = 48  # a bar's widest, so that one day is not one wide block
MAX_VALUE_LABELS = 16  # up to this many points each carry their value as a label


def escape(text: str) -> str:
    """``text`` escaped for SVG, its hidden characters made visible (:func:`cogd.ui.visible.visible`)."""
    return _escape(visible(str(text)))


def _frame(body: list[str], title: str) -> Markup:
    """``body`` (SVG elements, already escaped) inside an ``<svg>`` with an accessible title."""
    head = (f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>')
    return Markup(head + "".join(body) + "</svg>")


def _axes(top_label: str, labels: list[str]) -> list[str]:
    """The y axis (0 and ``top_label``) and up to 8 evenly spaced x labels of ``labels``."""
    plot_w, bottom = WIDTH - LEFT - RIGHT, HEIGHT - BOTTOM
    out = [f'<line class="axis" x1="{LEFT}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}"/>',
           f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}"/>',
           f'<text class="tick" x="{LEFT - 6}" y="{bottom}" text-anchor="end">0</text>',
           f'<text class="tick" x="{LEFT - 6}" y="{TOP + 8}" text-anchor="end">{escape(top_label)}</text>',
           f'<line class="grid" x1="{LEFT + 1}" y1="{TOP}" x2="{WIDTH - RIGHT}" y2="{TOP}"/>',
           f'<line class="grid" x1="{LEFT + 1}" y1="{(TOP + bottom) / 2}" x2="{WIDTH - RIGHT}" y2="{(TOP + bottom) / 2}"/>']
    step = max(1, -(-len(labels) // 8))
    for i in range(0, len(labels), step):
        x = LEFT + plot_w * (i + 0.5) / len(labels)
        out.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - 12}" text-anchor="middle">{escape(labels[i])}</text>')
    return out


def _empty(title: str) -> Markup:
    return _frame([f'<text class="tick" x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">'
                   'nothing recorded yet</text>'], title)


def line_chart(points: list[tuple[str, float | None]], title: str) -> Markup:
    """A line over ``points`` (label, a rate in 0..1; None leaves a gap), one dot each, titled
    ``label: rate`` as a percentage. The y axis ends at the next 10% above the highest rate (at
    least 10%), so that low rates, the usual case, are not a flat line along the bottom."""
    if not points:
        return _empty(title)
    rates = [value for _, value in points if value is not None]
    top = max(0.1, math.ceil(max(rates, default=0.0) * 10 - 1e-9) / 10)
    plot_w, plot_h, bottom = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM, HEIGHT - BOTTOM
    body = _axes(f"{top:.0%}", [label for label, _ in points])
    run: list[str] = []
    dots = []
    for i, (label, value) in enumerate(points):
        if value is None:
            if len(run) > 1:
                body.append(f'<polyline class="line" points="{" ".join(run)}"/>')
            run = []
            continue
        x = LEFT + plot_w * (i + 0.5) / len(points)
        y = bottom - plot_h * min(max(value / top, 0.0), 1.0)
        run.append(f"{x:.1f},{y:.1f}")
        dots.append(f'<circle class="dot" cx="{x:.1f}" cy="{y:.1f}" r="3.5">'
                    f'<title>{escape(label)}: {value:.1%}</title></circle>')
        if len(points) <= MAX_VALUE_LABELS:
            dots.append(f'<text class="value" x="{x:.1f}" y="{y - 8:.1f}" text-anchor="middle">{value:.0%}</text>')
    if len(run) > 1:
        body.append(f'<polyline class="line" points="{" ".join(run)}"/>')
    return _frame(body + dots, title)


def bar_chart(points: list[tuple[str, float]], title: str, unit: str = "") -> Markup:
    """Vertical bars of ``points`` (label, value ≥ 0), the highest reaching the top; each bar
    titled ``label: value unit``."""
    if not points:
        return _empty(title)
    plot_w, plot_h, bottom = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM, HEIGHT - BOTTOM
    high = max(value for _, value in points) or 1
    body = _axes(f"{high:,.0f}", [label for label, _ in points])
    slot = plot_w / len(points)
    width = min(slot * 0.7, MAX_BAR)
    for i, (label, value) in enumerate(points):
        h = plot_h * value / high
        x = LEFT + slot * (i + 0.5) - width / 2
        body.append(f'<rect class="bar" x="{x:.1f}" y="{bottom - h:.1f}" width="{width:.1f}" height="{h:.1f}">'
                    f'<title>{escape(label)}: {value:,.0f}{escape(" " + unit if unit else "")}</title></rect>')
        if len(points) <= MAX_VALUE_LABELS:
            body.append(f'<text class="value" x="{x + width / 2:.1f}" y="{bottom - h - 4:.1f}" '
                        f'text-anchor="middle">{value:,.0f}</text>')
    return _frame(body, title)


def hbar_chart(rows: list[tuple[str, float]], title: str) -> Markup:
    """Horizontal bars, one per row (label, value ≥ 0), the longest for the highest value,
    labelled on the left with the label's tail (paths are long; the bar's title holds it whole)
    and on the right with the value."""
    if not rows:
        return _empty(title)
    top = max(value for _, value in rows) or 1.0
    row_h, label_w = 22, 260
    height = TOP + row_h * len(rows) + 6
    plot_w = WIDTH - label_w - 70
    body = []
    for i, (label, value) in enumerate(rows):
        y = TOP + row_h * i
        w = plot_w * min(max(value / top, 0.0), 1.0)
        shown = label if len(label) <= 40 else "…" + label[-39:]
        body.append(f'<text class="tick" x="{label_w - 8}" y="{y + 14}" text-anchor="end">{escape(shown)}</text>'
                    f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}">'
                    f'<title>{escape(label)}: {value:.4f}</title></rect>'
                    f'<text class="tick" x="{label_w + w + 6:.1f}" y="{y + 14}">{value:.4f}</text>')
    head = (f'<svg class="chart hchart" viewBox="0 0 {WIDTH} {height}" role="img" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>')
    return Markup(head + "".join(body) + "</svg>")
