"""A figure described as text, deterministically, from the live figure object
(docs/notebook-tools.md#figures).

A model that cannot see images still learns what a plot shows: its title, each axes'
labels, limits and legend, and per artist its kind and a summary of its data (points and
ranges of a line or a scatter, the heights of bars, the shape of an image). The Jupyter
face registers :func:`describe` as the ``text/plain`` form of a matplotlib ``Figure``, so a
plot's text is this description wherever the notebook tools read text: ``run_python``'s
output, ``read_cells``, a figure named with ``@``. Only what matplotlib already holds is
read: nothing is drawn, and matplotlib is never imported here.
"""
from __future__ import annotations

import math
from typing import Any

MAX_AXES = 6  # axes described per figure
MAX_ARTISTS = 8  # lines, collections, bar groups and images described per axes
FIRST_VALUES = 5  # values listed at the head of a series
MAX_CHARS = 2_000  # the whole description


def describe(fig: Any) -> str:
    """What ``fig`` (a matplotlib ``Figure``) shows, in a few bounded lines."""
    width, height = (float(v) for v in fig.get_size_inches())
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    head = f"Figure ({width:g}x{height:g} in, {len(axes)} axes)"
    title = _text(getattr(fig, "_suptitle", None))
    lines = [head + (f": {title!r}" if title else "")]
    for n, ax in enumerate(axes[:MAX_AXES], 1):
        lines += _axes(n, ax)
    if len(axes) > MAX_AXES:
        lines.append(f"... and {len(axes) - MAX_AXES} more axes")
    text = "\n".join(lines)
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


def _axes(n: int, ax: Any) -> list[str]:
    parts = [f"axes {n}"]
    title = ax.get_title()
    if title:
        parts.append(f"title {title!r}")
    for axis, label, lims, scale in (("x", ax.get_xlabel(), ax.get_xlim(), ax.get_xscale()),
                                     ("y", ax.get_ylabel(), ax.get_ylim(), ax.get_yscale())):
        named = f" {label!r}" if label else ""
        log = f", {scale}" if scale != "linear" else ""
        parts.append(f"{axis}{named} from {_num(lims[0])} to {_num(lims[1])}{log}")
    out = ["- " + "; ".join(parts)]
    legend = ax.get_legend()
    if legend is not None:
        names = [t.get_text() for t in legend.get_texts()]
        out.append(f"  legend: {', '.join(repr(x) for x in names)}")
    artists = _artists(ax)
    out += [f"  {a}" for a in artists[:MAX_ARTISTS]]
    if len(artists) > MAX_ARTISTS:
        out.append(f"  ... and {len(artists) - MAX_ARTISTS} more")
    if not artists:
        out.append("  (nothing plotted)")
    return out


def _artists(ax: Any) -> list[str]:
    found: list[str] = []
    in_bars: set[int] = set()
    for container in getattr(ax, "containers", []):
        patches = list(getattr(container, "patches", []))
        if not patches:
            continue
        in_bars.update(id(p) for p in patches)
        label = _label(container)
        heights = [p.get_height() for p in patches]
        horizontal = bool(getattr(container, "orientation", "") == "horizontal")
        values = [p.get_width() for p in patches] if horizontal else heights
        found.append(f"bars{label}: {len(patches)} bars, "
                     f"{'widths' if horizontal else 'heights'} {_series(values)}")
    loose = [p for p in ax.patches if id(p) not in in_bars and type(p).__name__ == "Rectangle"]
    if loose:  # a histogram drawn without a container, or rectangles drawn by hand
        found.append(f"rectangles: {len(loose)}, heights {_series([p.get_height() for p in loose])}")
    for line in ax.get_lines():
        if not line.get_visible():
            continue
        xs, ys = (list(map(float, line.get_xdata())), list(map(float, line.get_ydata())))
        found.append(f"line{_label(line)}: {len(ys)} points, x {_range(xs)}, y {_range(ys)}, "
                     f"first y {_series(ys)}")
    for coll in ax.collections:
        offsets = coll.get_offsets()
        count = len(offsets)
        if not count:
            continue
        xs = [float(p[0]) for p in offsets]
        ys = [float(p[1]) for p in offsets]
        found.append(f"points{_label(coll)}: {count}, x {_range(xs)}, y {_range(ys)}")
    for image in ax.get_images():
        shape = getattr(image.get_array(), "shape", None)
        found.append(f"image{_label(image)}: {'x'.join(map(str, shape)) if shape else 'empty'}")
    for text in ax.texts:
        if text.get_text().strip():
            found.append(f"text {text.get_text()!r}")
    return found


def _label(artist: Any) -> str:
    label = artist.get_label() if hasattr(artist, "get_label") else ""
    return f" {label!r}" if label and not str(label).startswith("_") else ""


def _text(artist: Any) -> str:
    return str(artist.get_text()) if artist is not None and hasattr(artist, "get_text") else ""


def _num(value: float) -> str:
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.4g}"


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if not (math.isnan(v) or math.isinf(v))]


def _range(values: list[float]) -> str:
    finite = _finite(values)
    if not finite:
        return "(no finite values)"
    return f"{_num(min(finite))}..{_num(max(finite))}"


def _series(values: list[float]) -> str:
    head = ", ".join(_num(v) for v in values[:FIRST_VALUES])
    return f"[{head}{', …' if len(values) > FIRST_VALUES else ''}]"
