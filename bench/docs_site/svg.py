"""The few SVG pieces the two diagrams share: a document, a box with centred lines, an arrow.

Decision: SVG written as text by hand, not through a plotting library or an external renderer
(Graphviz, a diagram service): the output is byte-stable for the same input, small, diffable in
review, and needs nothing beyond the standard library. Sizes are in pixels; text is measured
roughly (`CHAR_WIDTH` per character), which is enough for labels of known, short length.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""
CHAR_WIDTH = 7.0  # px per character at 12 px: enough to size boxes for short labels
FP16_FILL, FP16_STROKE = "#dbe9fb", "#1f6fd1"
FP32_FILL, FP32_STROKE = "#fde5cc", "#d9730d"
CAST_FILL, CAST_STROKE = "#eeeeee", "#666666"
TEXT = "#222222"


def document(width: float, height: float, body: list[str], title: str) -> str:
    markers = "".join(
        f'<marker id="arrow-{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
        for name, colour in (("grey", CAST_STROKE), ("fp16", FP16_STROKE), ("fp32", FP32_STROKE)))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" {FONT} font-size="12">\n'
            f"<title>{escape(title)}</title>\n<defs>{markers}</defs>\n"
            f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")


def box(x: float, y: float, w: float, h: float, lines: list[tuple[str, str]], *, fill: str, stroke: str,
        dashed: bool = False, radius: float = 6, tooltip: str = "") -> str:
    """A rounded box with `lines` centred in it: (text, style) with style "bold", "small" or ""."""
    dash = ' stroke-dasharray="5,4"' if dashed else ""
    tip = f"<title>{escape(tooltip)}</title>" if tooltip else ""
    out = [f'<g>{tip}<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{radius}" '
           f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"{dash}/>']
    step = 15
    top = y + h / 2 - step * (len(lines) - 1) / 2 + 4
    for i, (line, style) in enumerate(lines):
        attrs = {"bold": ' font-weight="bold" font-size="13"', "small": ' font-size="11"'}.get(style, "")
        colour = "#555555" if style == "small" else TEXT
        out.append(f'<text x="{x + w / 2:.1f}" y="{top + i * step:.1f}" text-anchor="middle" fill="{colour}"{attrs}>'
                   f"{escape(line)}</text>")
    return "".join(out) + "</g>"


def arrow(points: list[tuple[float, float]], *, colour: str = CAST_STROKE, marker: str = "grey",
          dashed: bool = False) -> str:
    path = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(points))
    dash = ' stroke-dasharray="5,4"' if dashed else ""
    return (f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.5"{dash} '
            f'marker-end="url(#arrow-{marker})"/>')


def label(x: float, y: float, text: str, *, anchor: str = "start", size: int = 12, colour: str = TEXT,
          bold: bool = False) -> str:
    weight = ' font-weight="bold"' if bold else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{colour}"{weight}>'
            f"{escape(text)}</text>")


def wrap(text: str, width: int) -> list[str]:
    """Greedy word wrap at `width` characters."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def bend(start: tuple[float, float], end: tuple[float, float], reach: float, *, colour: str, marker: str) -> str:
    """A curved arrow from `start` to `end` bulging `reach` px to the right: an edge that skips rows,
    drawn beside the straight ones instead of over them."""
    (sx, sy), (ex, ey) = start, end
    return (f'<path d="M{sx:.1f},{sy:.1f} C{sx + reach:.1f},{sy:.1f} {ex + reach:.1f},{ey:.1f} {ex + 2:.1f},{ey:.1f}" '
            f'fill="none" stroke="{colour}" stroke-width="1.5" marker-end="url(#arrow-{marker})"/>')
