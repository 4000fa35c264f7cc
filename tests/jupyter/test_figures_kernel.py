"""Plots as context (docs/notebook-tools.md#figures), in real kernels: a figure's text is
its description wherever the notebook tools read text — a cell's output (read_cells) and
run_python's output after the user confirmed — never ``<Figure size …>`` alone."""
from __future__ import annotations

import pytest
from kernel_support import call, scripted_kernel, tool_result

pytest.importorskip("matplotlib")

PLOT = ("import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [4, 9, 2], label='revenue')\n"
        "plt.title('Revenue Q3')\nplt.xlabel('week')\nplt.legend()\n")


@pytest.fixture(scope="module", params=["lily", "python3"])
def kernel(request, tmp_path_factory, ipython_dir, server):
    with scripted_kernel(tmp_path_factory.mktemp(f"figures-{request.param}"), ipython_dir,
                         server.url, request.param) as k:
        k.py = (lambda code: k.run(f"%%python\n{code}")) if request.param == "lily" else k.run
        k.ask = (lambda text: k.run(text)) if request.param == "lily" else (
            lambda text: k.run(f"%%lily\n{text}"))
        yield k


def test_read_cells_sees_what_a_plot_shows(kernel, server, turns):
    drawn = kernel.py(PLOT)
    assert drawn.status == "ok", drawn.messages
    assert any("image/png" in d for d in drawn.displays)  # the user still sees the plot
    turns.extend([call("read_cells", {"last": 2}, "f1"), "A line peaking at 9."])
    assert kernel.ask("what does my plot show?").status == "ok"
    cells = tool_result(server, "f1")
    assert "title 'Revenue Q3'" in cells and "x 'week'" in cells and "legend: 'revenue'" in cells
    assert "line 'revenue': 3 points, x 1..3, y 2..9, first y [4, 9, 2]" in cells
    assert "<Figure size" not in cells


def test_run_python_output_carries_the_figure_it_drew(kernel, server, turns):
    turns.append(call("run_python", {"code": PLOT}, "f2"))
    assert kernel.ask("plot revenue").status == "ok"
    turns.append({"expect": {"contains": "Revenue Q3"}, "content": "Plotted."})
    done = kernel.run("/confirm")
    assert done.status == "ok", (done.error_line(), done.stdout)
    assert any("image/png" in d for d in done.displays)  # shown where the user decided
    result = tool_result(server, "f2")
    assert "title 'Revenue Q3'" in result and "<Figure size" not in result
    # shown once: the inline backend does not show the closed figure again after the cell
    assert sum("image/png" in d for d in done.displays) == 1


@pytest.mark.parametrize("name", ["lily", "python3"])
def test_plt_show_in_the_cell_that_imports_pyplot_is_described(name, tmp_path_factory,
                                                                ipython_dir, server, turns):
    """Choosing the backend (the first ``import matplotlib.pyplot``) removes the figure's
    text form before ``plt.show()`` in the same cell shows it; the face describes it anyway."""
    with scripted_kernel(tmp_path_factory.mktemp(f"show-{name}"), ipython_dir, server.url,
                         name) as k:
        head = "%%python\n" if name == "lily" else ""
        shown = k.run(f"{head}{PLOT}plt.show()\n")
        assert shown.status == "ok", shown.messages
        plain = [d["text/plain"] for d in shown.displays if "image/png" in d]
        assert len(plain) == 1 and plain[0].startswith("Figure (6.4x4.8 in, 1 axes)"), plain
        turns.extend([call("read_cells", {"last": 1}, "s1"), "Seen."])
        asked = k.run("what did I plot?" if name == "lily" else "%%lily\nwhat did I plot?")
        assert asked.status == "ok", asked.messages
        cells = tool_result(server, "s1")
        assert "title 'Revenue Q3'" in cells and "<Figure size" not in cells
