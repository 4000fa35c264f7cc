"""``@`` mentions in a real Lily kernel (docs/notebook-tools.md#mentions): what the user
names is attached to the request through the notebook and file tools' own rules, listed in
the footer and journaled; Tab after ``@`` completes variables, files and cells."""
from __future__ import annotations

import json

import pytest
from kernel_support import scripted_kernel

SECRET = "sk-proj-mention-0123456789abcdef"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    files = {"notes.txt": "Quarterly notes: revenue up 12%.\n"}
    with scripted_kernel(tmp_path_factory.mktemp("mentions"), ipython_dir, server.url,
                         files=files) as k:
        assert k.run("%%python\nimport pandas as pd\n"
                     "df = pd.DataFrame({'price': [1.5, 2.5], 'qty': [3, 4]})\n"
                     f"api_key = '{SECRET}'\nprint('READY')").status == "ok"
        yield k


def last_user(server) -> str:
    return [m for m in server.chat_requests()[-1]["messages"] if m["role"] == "user"][-1]["content"]


def footer(run) -> str:
    return [d["text/markdown"] for d in run.displays if "text/markdown" in d][-1]


def test_a_variable_a_file_and_a_cell_are_attached_and_listed(kernel, server, turns):
    turns.append("Summary done.")
    run = kernel.run("Compare @df with @notes.txt and what @In[1] printed.")
    assert run.status == "ok", run.messages
    sent = last_user(server)
    assert sent.startswith("Compare @df with @notes.txt")
    assert "@df (variable):" in sent and "price" in sent and "qty" in sent
    assert "@notes.txt (file):" in sent and "revenue up 12%" in sent
    assert "@In[1] (cell):" in sent and "READY" in sent
    assert "attached: @df, @notes.txt, @In\\[1\\]" in footer(run)  # Markdown-escaped
    records = [json.loads(line) for path in (kernel.workspace / ".lily" / "journal").glob("*")
               for line in path.read_text().splitlines()]
    assert [r["items"] for r in records if r.get("event") == "attached"][-1] == \
        ["@df", "@notes.txt", "@In[1]"]


def test_secrets_and_lilys_own_files_are_never_attached(kernel, server, turns):
    (kernel.workspace / "lily.toml").write_text(f'[model]\n# {SECRET}\n')
    turns.append("ok")
    run = kernel.run("Check @api_key and @lily.toml please, or mail bob@example.com")
    assert run.status == "ok", run.messages
    sent = last_user(server)
    assert SECRET not in sent
    assert "@lily.toml (file):\n```\n(not attached:" in sent
    assert "bob@example.com" in sent and "@example.com (" not in sent


def test_tab_after_at_completes_variables_files_and_cells(kernel):
    found = kernel.complete("Plot @d", 7)
    assert "df" in found["matches"] and found["cursor_start"] == 6
    assert kernel.complete("Read @no", 8)["matches"] == ["notes.txt"]
    assert "cell[-1]" in kernel.complete("see @c", 6)["matches"]


def test_at_figure_attaches_the_last_plot_or_says_there_is_none(kernel, server, turns):
    turns.append("No plot yet.")
    assert kernel.run("What does @figure show?").status == "ok"
    assert "@figure (figure):\n```\n(not attached: no figure among the last" in last_user(server)
    assert "figure" in kernel.complete("Explain @fig", 12)["matches"]
    assert kernel.run("%%python\nimport matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [2, 7])\n"
                      "plt.title('Stock')\nplt.show()\nprint('drawn')").status == "ok"
    assert kernel.run("%%python\nprint('a later cell')").status == "ok"
    turns.append("b is higher.")
    run = kernel.run("Which bar is higher in @figure?")
    assert run.status == "ok", run.messages
    sent = last_user(server)
    assert "@figure (figure):" in sent and "title 'Stock'" in sent
    assert "bars: 2 bars, heights [2, 7]" in sent and "a later cell" not in sent
    assert "attached: @figure" in footer(run)
