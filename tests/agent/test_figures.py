"""A figure described as text from the live matplotlib object (docs/notebook-tools.md#figures):
what a model that cannot see the image learns of a plot, deterministic and bounded."""
from __future__ import annotations

import math

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from lily_kernel.tools.figures import MAX_CHARS, describe  # noqa: E402


def test_a_line_plot_names_its_title_axes_legend_and_data():
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    ax.plot([1, 2, 3, 4], [10, 20, 15, 30], label="sales")
    ax.set_title("Sales by month")
    ax.set_xlabel("month")
    ax.set_ylabel("units")
    ax.legend()
    text = describe(fig)
    assert text.splitlines()[0] == "Figure (6x4 in, 1 axes)"
    assert "title 'Sales by month'" in text and "x 'month' from" in text and "y 'units'" in text
    assert "legend: 'sales'" in text
    assert "line 'sales': 4 points, x 1..4, y 10..30, first y [10, 20, 15, 30]" in text
    assert "<Figure size" not in text
    assert describe(fig) == text  # deterministic


def test_bars_scatter_histogram_and_image_each_say_what_they_hold():
    fig = Figure()
    bars, points, hist, image = fig.subplots(2, 2).ravel()
    bars.bar(["a", "b", "c"], [3, 1, 2], label="counts")
    points.scatter([0, 1, 2], [5, 6, 7])
    hist.hist([1, 1, 2, 3, 3, 3], bins=3)
    image.imshow([[0, 1], [1, 0], [2, 2]])
    text = describe(fig)
    assert "bars 'counts': 3 bars, heights [3, 1, 2]" in text
    assert "points: 3, x 0..2, y 5..7" in text
    assert "3 bars, heights [2, 1, 3]" in text  # the histogram's container
    assert "image: 3x2" in text


def test_an_empty_figure_and_odd_values_stay_readable():
    fig = Figure()
    assert describe(fig) == "Figure (6.4x4.8 in, 0 axes)"
    ax = fig.add_subplot()
    assert "(nothing plotted)" in describe(fig)
    ax.plot([0, 1, 2], [math.nan, math.inf, 1.0])
    assert "y 1..1" in describe(fig)


def test_a_crowded_figure_is_bounded():
    fig = Figure()
    for _ in range(9):
        ax = fig.add_subplot()
        for n in range(20):
            ax.plot(range(1000), [n] * 1000, label="x" * 50)
    text = describe(fig)
    assert len(text) <= MAX_CHARS
    assert "more axes" in text or text.endswith("…")
