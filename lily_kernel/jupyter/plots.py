"""The shell side of figure descriptions (docs/notebook-tools.md#figures): a matplotlib
figure's ``text/plain`` is what it shows (:func:`lily_kernel.tools.figures.describe`), so
the notebook tools read that instead of ``<Figure size 640x480 with 1 Axes>``.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell


def figure_text(fig: Any, printer: Any, cycle: bool) -> None:
    """A matplotlib figure's ``text/plain``: what it shows (tools/figures.py), imported on the
    first figure, so ``%load_ext lily`` loads nothing for it."""
    printer.text(description(fig))


def description(fig: Any) -> str:
    """What ``fig`` shows (tools/figures.py); its repr when it is not a figure describe knows."""
    from lily_kernel.tools.figures import describe
    try:
        return describe(fig)
    except Exception:  # a figure-like object of another shape: never break its display
        return repr(fig)


def is_figure(obj: Any) -> bool:
    """Is ``obj`` a matplotlib ``Figure`` (matplotlib is never imported here)?"""
    figure = sys.modules.get("matplotlib.figure")
    return figure is not None and isinstance(obj, figure.Figure)


def describe_figures(shell: InteractiveShell) -> None:
    """(Again) make :func:`figure_text` the ``text/plain`` form of a matplotlib figure."""
    if shell.display_formatter is None:
        return
    formatter = shell.display_formatter.formatters["text/plain"]
    try:
        if formatter.lookup_by_type("matplotlib.figure.Figure") is figure_text:
            return
    except KeyError:
        pass
    figure = sys.modules.get("matplotlib.figure")
    if figure is not None:
        formatter.for_type(figure.Figure, figure_text)
    else:
        formatter.for_type_by_name("matplotlib.figure", "Figure", figure_text)
