"""lily.toml settings around the notebook tools, in real kernels (Lily and %load_ext lily).

The workspace's lily.toml sets ``[notebook] share_values = false``, puts ``write``
behind confirmation with ``[tools] confirm`` and denies ``read_cells``; the
ScriptedServer's recorded requests show what the model was offered and sent.
"""
from __future__ import annotations

import pytest
from kernel_support import call, scripted_kernel, tool_result

LILY_TOML = """
[notebook]
share_values = false

[tools]
confirm = ["write"]
deny = ["read_cells"]
"""


@pytest.fixture(scope="module", params=["lily", "python3"])
def kernel(request, tmp_path_factory, ipython_dir, server):
    with scripted_kernel(tmp_path_factory.mktemp(f"nbprivacy-{request.param}"), ipython_dir,
                         server.url, request.param, files={"lily.toml": LILY_TOML}) as k:
        yield k


def py(kernel, code):
    return kernel.run(f"%%python\n{code}" if kernel.name == "lily" else code)


def ask(kernel, text):
    return kernel.run(text if kernel.name == "lily" else f"%%lily\n{text}")


def test_share_values_false_gives_names_types_shapes_only(kernel, server, turns):
    py(kernel, "import pandas as pd\n"
               "df = pd.DataFrame({'city': ['VALUE-OSLO'], 'temp': [3.5]})\n"
               "words = ['VALUE-WORD']\nprint('OUTPUT-MARK')")
    py(kernel, "bad = ['VALUE-IN-ERROR']\nbad[7]")
    turns.extend([{"tool_calls": [
        {"name": "list_variables", "arguments": {}, "id": "s1"},
        {"name": "inspect_variable", "arguments": {"name": "df"}, "id": "s2"},
        {"name": "inspect_variable", "arguments": {"name": "words"}, "id": "s3"},
        {"name": "last_error", "arguments": {}, "id": "s4"}]}, "ok"])
    assert ask(kernel, "look at my data").status == "ok"
    listed, df, words, error = (tool_result(server, i) for i in ("s1", "s2", "s3", "s4"))
    assert "df: DataFrame 1×2" in listed and "words: list[1]" in listed
    assert "[city" not in listed  # column names listed only when values are shared
    assert "DataFrame 1 rows × 2 columns" in df and "float64 ×1" in df
    assert "temp" not in df  # a column label is a key of the value: not shared
    assert "list of length 1" in words
    assert "IndexError" in error and "bad[7]" in error
    everything = "\n".join(m.get("content") or "" for m in server.chat_requests()[-1]["messages"])
    for value in ("VALUE-OSLO", "VALUE-WORD", "OUTPUT-MARK", "list index out of range", "3.5"):
        assert value not in everything, value


def test_share_values_false_run_python_reports_no_output(kernel, server, turns):
    turns.append(call("run_python", {"code": "print('SECRET-OUTPUT')"}, "s5"))
    assert ask(kernel, "run it").status == "ok"
    turns.append("done")
    done = kernel.run("/confirm")
    assert "SECRET-OUTPUT" in done.stdout  # the user sees it; the model does not
    assert "SECRET-OUTPUT" not in tool_result(server, "s5")
    assert "without an error" in tool_result(server, "s5")


def test_a_denied_tool_is_never_offered_and_refused_if_called(kernel, server, turns):
    turns.extend([call("read_cells", {}, "d1"), "ok"])
    assert ask(kernel, "read my cells").status == "ok"
    offered = {t["function"]["name"] for t in server.chat_requests()[-1]["tools"]}
    assert "read_cells" not in offered
    assert {"list_variables", "inspect_variable", "last_error", "propose_cell",
            "run_python"} <= offered
    assert tool_result(server, "d1") == "Error: tool 'read_cells' is denied by the tool policy"


def test_confirm_list_puts_write_behind_the_card(kernel, server, turns):
    target = kernel.world.workspace / "notes.txt"
    turns.append(call("write", {"path": "notes.txt", "content": "line one\nline two"}, "w1"))
    run = ask(kernel, "write my notes")
    cards = [d for d in run.displays if "**Approve write** (tool call" in d.get("text/markdown", "")]
    assert len(cards) == 1 and '"content": "line one\\nline two"' in cards[0]["text/markdown"]
    assert not target.exists()  # nothing written before Confirm
    turns.append({"expect": {"contains": "wrote"}, "content": "Written."})
    done = kernel.run("/confirm")
    assert done.status == "ok", done.messages
    assert target.read_text(encoding="utf-8") == "line one\nline two"
    assert tool_result(server, "w1").startswith("wrote 17 characters")
