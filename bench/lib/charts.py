"""Small SVG charts for the benchmark reports: horizontal bar panels and log-x line charts.

Python 3 standard library only, so that a report can be drawn on any machine the benchmarks run on and
viewed anywhere without fetching a chart library. Every chart is a string of SVG that can stand alone
(bench/curve's .svg file) or sit inline in an HTML page (bench/lib/report.py); values are written next
to the bars and points, so the figures can be read, searched and tested, not only seen.
"""

import math
from html import escape

FONT = 'font-family="sans-serif" font-size="12"'


def _svg(width, height, body, css_class=None, attrs=None):
    extra = f' class="{escape(css_class)}"' if css_class else ""
    for k, v in (attrs or {}).items():
        extra += f' {k}="{escape(str(v))}"'
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" {FONT}{extra}>\n'
            f'<rect width="{width}" height="{height}" fill="white"/>\n' + "\n".join(body) + "\n</svg>")


def _text(x, y, s, anchor="start", extra=""):
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{escape(str(s))}</text>'


def nice_top(vmax, ticks=5):
    """(top, step): a round axis end at or above vmax, divided into about `ticks` round steps."""
    if not vmax or vmax <= 0:
        return 1.0, 0.2
    step = 10 ** math.floor(math.log10(vmax / ticks))
    for mult in (1, 2, 2.5, 5, 10):
        if vmax / (step * mult) <= ticks:
            step *= mult
            break
    return step * math.ceil(vmax / step - 1e-9), step


def _ticks(top, step):
    # by index, not by adding up steps: 0.1 + 0.1 + 0.1 overshoots 0.3 and loses the last tick
    return [round(k * step, 12) for k in range(round(top / step) + 1)]


class Panel:
    """One panel of a bar chart: a title and, per row, one or more (value, text) bars drawn in the row's
    colour at the given opacities (e.g. p50 solid, p99 light)."""

    def __init__(self, title, bars, shades=(1.0,), legend=None):
        self.title, self.bars, self.shades, self.legend = title, bars, shades, legend


def bar_panels(title, labels, colors, panels, css_class="chart", attrs=None):
    """Side-by-side horizontal bar panels sharing one row per label (e.g. one per server).

    panels: [Panel]; panel.bars[i] is a list of (value or None, text) for labels[i], one per shade.
    Each panel has its own linear scale from zero; a missing value is drawn as its text alone."""
    label_w, panel_w, gap, row_gap, top, bottom = 110, 250, 30, 10, 46, 26
    # a row of several bars (p50 and p99) gets 13 px per bar, so that each bar's 10 px text fits beside it
    most = max((len(row) for panel in panels for row in panel.bars), default=1)
    bar_h = 16 if most == 1 else 13 * most
    width = label_w + len(panels) * (panel_w + gap)
    height = top + len(labels) * (bar_h + row_gap) + bottom
    body = [_text(8, 18, title, extra=' font-size="14" font-weight="bold"')]
    for i, label in enumerate(labels):
        y = top + i * (bar_h + row_gap)
        body.append(_text(label_w - 8, y + bar_h / 2 + 4, label, "end"))
    for p, panel in enumerate(panels):
        x0 = label_w + p * (panel_w + gap)
        plot_w = panel_w - 60  # room for the value written after the longest bar
        values = [v for row in panel.bars for v, _ in row if v is not None]
        vtop, step = nice_top(max(values, default=0))
        body.append(_text(x0, top - 12, panel.title, extra=' font-weight="bold"'))
        axis_y = top + len(labels) * (bar_h + row_gap) - row_gap / 2
        for v in _ticks(vtop, step):
            x = x0 + v / vtop * plot_w
            body.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{axis_y:.1f}" stroke="#e4e4e4"/>')
            body.append(_text(x, axis_y + 14, f"{v:g}", "middle", ' fill="#666" font-size="10"'))
        for i, row in enumerate(panel.bars):
            y = top + i * (bar_h + row_gap)
            h = bar_h / len(row)
            for k, (value, text) in enumerate(row):
                yk = y + k * h
                shade = panel.shades[k] if k < len(panel.shades) else 1.0
                w = 0.0 if value is None else max(value / vtop * plot_w, 0.5)
                if value is not None:
                    body.append(f'<rect x="{x0:.1f}" y="{yk:.1f}" width="{w:.1f}" height="{h - 1:.1f}" '
                                f'fill="{colors[i]}" fill-opacity="{shade}"><title>{escape(labels[i])}: '
                                f'{escape(text)}</title></rect>')
                size = ' font-size="10"' if len(row) > 1 else ""
                body.append(_text(x0 + w + 4, yk + h / 2 + 4, text, extra=size))
        if panel.legend:
            body.append(_text(x0, height - 6, panel.legend, extra=' fill="#666" font-size="10"'))
    return _svg(width, height, body, css_class, attrs)


def size_label(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def line_chart(title, series, x_label, y_label, css_class="chart", attrs=None):
    """A chart of lines over a log-2 x axis (request sizes) and a linear y axis from zero.

    series: list of dicts with label, color, dash ("" for solid, else an SVG dasharray) and points,
    a list of (x, y). The legend sits right of the plot; each point carries its value as a tooltip."""
    W, H, L, R, T, B = 900, 540, 80, 200, 50, 60
    pw, ph = W - L - R, H - T - B
    xs = sorted({x for s in series for x, _ in s["points"]})
    if not xs:
        return _svg(W, 80, [_text(L, 40, f"{title}: no points")], css_class, attrs)
    ytop, step = nice_top(max(y for s in series for _, y in s["points"]), ticks=8)
    x0, x1 = math.log2(xs[0]), math.log2(xs[-1])

    def X(x):
        return L + (math.log2(x) - x0) / ((x1 - x0) or 1) * pw

    def Y(y):
        return T + ph - y / ytop * ph

    body = [_text(L + pw / 2, 25, title, "middle", ' font-size="15"')]
    for v in _ticks(ytop, step):
        body.append(f'<line x1="{L}" y1="{Y(v):.1f}" x2="{L + pw}" y2="{Y(v):.1f}" stroke="#e0e0e0"/>')
        body.append(_text(L - 8, Y(v) + 4, f"{v:g}", "end"))
    for e in range(math.floor(x0), math.ceil(x1) + 1):
        x = X(2 ** e)
        body.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{T + ph}" stroke="#f0f0f0"/>')
        if 2 ** e in xs or e % 2 == 0:
            body.append(_text(x, T + ph + 18, size_label(2 ** e), "middle"))
    body.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
    body.append(_text(L + pw / 2, H - 15, x_label, "middle"))
    body.append(f'<text transform="translate(22,{T + ph / 2}) rotate(-90)" text-anchor="middle">'
                f'{escape(y_label)}</text>')
    ly = T + 10
    for s in series:
        pts = sorted(s["points"])
        if not pts:
            continue
        da = f' stroke-dasharray="{s["dash"]}"' if s.get("dash") else ""
        d = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in pts)
        body.append(f'<polyline points="{d}" fill="none" stroke="{s["color"]}" stroke-width="2"{da}/>')
        for x, y in pts:
            body.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3" fill="{s["color"]}">'
                        f'<title>{escape(s["label"])}, {size_label(x)}: {y:.0f}</title></circle>')
        lx = L + pw + 15
        body.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 30}" y2="{ly}" stroke="{s["color"]}" stroke-width="2"{da}/>')
        body.append(_text(lx + 36, ly + 4, s["label"]))
        ly += 20
    return _svg(W, H, body, css_class, attrs)
