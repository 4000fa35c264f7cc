"""What the agent sees of the notebook, in JupyterLab and in Notebook 7 (issue 34 §§1, 3).

``@d`` then Tab in a prose cell opens the completer on ``df``; the request the cell sends
carries df's bounded summary (docs/notebook-tools.md#mentions). A matplotlib plot drawn in
a ``%%python`` cell reaches the scripted model as its text description, through
``read_cells`` and ``@figure`` (docs/notebook-tools.md#figures); with ``[model] vision =
true`` in the workspace's ``lily.toml`` its PNG reaches it too, as a bounded image part
(docs/agent.md#images). Every assertion on what the model got reads the requests the
scripted server received.
"""
from __future__ import annotations

import base64

import pytest
from lab_support import Notebook, code_notebook
from playwright.sync_api import expect
from test_lab_browser import LONG, run_setup, setup_cell

from lily_kernel.tools import images

pytestmark = pytest.mark.usefixtures("browser_ready")

FRAME = ("%%python\nimport pandas as pd\n"
         "df = pd.DataFrame({'city': ['Oslo', 'Rome'], 'temp_c': [3, 18]})\nprint('df ready')")
PLOT = ("%%python\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3, 4], [10, 30, 20, 40], label='visits')\n"
        "plt.title('Visits by week')\nplt.xlabel('week')\nplt.ylabel('visits')\n"
        "plt.legend()\nplt.show()")
DESCRIBED = ("title 'Visits by week'", "x 'week' from", "y 'visits' from", "legend: 'visits'",
             "line 'visits': 4 points, x 1..4, y 10..40, first y [10, 30, 20, 40]")


def text_of(content) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def image_urls(request: dict) -> list[str]:
    return [p["image_url"]["url"] for m in request["messages"]
            if isinstance(m.get("content"), list)
            for p in m["content"] if p.get("type") == "image_url"]


def request_text(request: dict) -> str:
    """The last user request of a chat request, as text."""
    users = [m for m in request["messages"] if m["role"] == "user"]
    return text_of(users[-1]["content"])


def tool_result(request: dict, call_id: str) -> str:
    return next(m["content"] for m in request["messages"] if m.get("tool_call_id") == call_id)


def plot_notebook(front, page, server, folder: str, ask: str) -> Notebook:
    """A notebook in ``folder`` (the kernel's workspace) whose cell 1 drew a plot and whose
    cell 2 is the request ``ask``, not yet run."""
    (front.root / folder).mkdir(exist_ok=True)
    code_notebook(front.root / folder / "plot.ipynb", setup_cell(server), PLOT, ask)
    nb = Notebook(page, front, f"{folder}/plot.ipynb")
    run_setup(nb)
    nb.run(1)
    expect(nb.output(1).locator("img")).to_be_visible(timeout=LONG)  # the user sees the plot
    nb.wait_idle()
    return nb


def test_at_d_tab_completes_df_and_the_request_carries_its_summary(front, page, model, turns):
    server, _ = model
    code_notebook(front.root / "mention.ipynb", setup_cell(server), FRAME, "")
    nb = Notebook(page, front, "mention.ipynb")
    run_setup(nb)
    nb.run(1)
    expect(nb.output(1)).to_contain_text("df ready")
    nb.wait_idle()

    nb.complete(2, "Which city is warmer in @d", "df")
    editor = nb.cell(2).locator(".cm-content")
    expect(editor).to_have_text("Which city is warmer in @df")

    before = len(server.chat_requests())
    turns.append({"content": "Rome is warmer."})
    page.keyboard.press("Shift+Enter")
    out = nb.output(2)
    expect(out).to_contain_text("Rome is warmer.", timeout=LONG)
    expect(out).to_contain_text("attached: @df")
    sent = server.chat_requests()[before:]
    assert len(sent) == 1, sent
    request = request_text(sent[0])
    assert request.startswith("Which city is warmer in @df"), request
    summary = request.split("@df (variable):", 1)[1]
    for part in ("DataFrame 2 rows × 2 columns", "city: str", "temp_c: int64", "Oslo", "18"):
        assert part in summary, (part, summary)


def test_a_plot_reaches_the_model_as_its_description(front, page, model, turns):
    server, _ = model
    nb = plot_notebook(front, page, server, "described", "What does my plot show?")
    before = len(server.chat_requests())
    turns += [{"tool_calls": [{"name": "read_cells", "arguments": {"last": 2}, "id": "rc"}]},
              {"content": "Visits climb to 40."}]
    nb.run(2)
    expect(nb.output(2)).to_contain_text("Visits climb to 40.", timeout=LONG)
    sent = server.chat_requests()[before:]
    cells = tool_result(sent[-1], "rc")
    for part in DESCRIBED:
        assert part in cells, (part, cells)
    assert "<Figure size" not in cells
    assert not any(image_urls(r) for r in sent)  # scripted-e2e is not known to see images


def test_with_vision_the_plot_and_its_description_reach_the_model(front, page, model, turns):
    server, _ = model
    (front.root / "seeing").mkdir(exist_ok=True)
    (front.root / "seeing" / "lily.toml").write_text("[model]\nvision = true\n")
    nb = plot_notebook(front, page, server, "seeing", "What does @figure show?")
    before = len(server.chat_requests())
    turns += [{"tool_calls": [{"name": "read_cells", "arguments": {"last": 2}, "id": "rv"}]},
              {"content": "A line rising to 40."}]
    nb.run(2)
    out = nb.output(2)
    expect(out).to_contain_text("A line rising to 40.", timeout=LONG)
    expect(out).to_contain_text("attached: @figure")
    first, last = server.chat_requests()[before:]

    request = request_text(first)  # the @figure mention: the description and the image
    for part in DESCRIBED:
        assert part in request, (part, request)
    asked = [m for m in first["messages"] if m["role"] == "user"][-1]["content"]
    assert [p["type"] for p in asked] == ["text", "image_url"], asked
    # read_cells: the description in the tool result, the image right after it
    for part in DESCRIBED:
        assert part in tool_result(last, "rv")
    urls = image_urls(last)
    assert len(urls) == 2, [u[:40] for u in urls]
    for url in urls:
        assert url.startswith("data:image/png;base64,"), url[:40]
        png = base64.b64decode(url.split(",", 1)[1])
        assert png.startswith(b"\x89PNG") and len(png) <= images.MAX_BYTES
