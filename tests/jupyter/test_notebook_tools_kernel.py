"""The notebook tools in real kernels: the Lily kernel and ``%load_ext lily`` in python3.

Each kernel talks over HTTP to a ScriptedServer this process runs; each test
queues what the "model" calls and reads, in the server's recorded requests,
the tool results exactly as the model received them. Both kernels run every
test (``face`` is the parameter): Python cells are ``%%python`` in the Lily
kernel and plain in python3; requests are prose there and ``%%lily`` here.
"""
from __future__ import annotations

import json
import time

import pytest
from agent_support import assert_consistent
from kernel_support import WIDGET_MIME, Kernel, call, scripted_kernel, tool_result

from lily_kernel.testing.server import ScriptedServer


class Face:
    """One kernel and how its cells are written."""

    def __init__(self, kernel: Kernel, name: str) -> None:
        self.kernel, self.name = kernel, name

    def py(self, code: str, **kw):
        cell = f"%%python\n{code}" if self.name == "lily" else code
        return self.kernel.run(cell, **kw)

    def ask(self, text: str, **kw):
        cell = text if self.name == "lily" else f"%%lily\n{text}"
        return self.kernel.run(cell, **kw)

    def cmd(self, line: str, **kw):
        return self.kernel.run(line, **kw)


@pytest.fixture(scope="module", params=["lily", "python3"])
def face(request, tmp_path_factory, ipython_dir, server):
    with scripted_kernel(tmp_path_factory.mktemp(f"nbtools-{request.param}"), ipython_dir,
                         server.url, request.param) as kernel:
        yield Face(kernel, request.param)


def ask_tool(face: Face, server, turns, name: str, args: dict, id: str, answer: str = "done"):
    turns.extend([call(name, args, id), answer])
    run = face.ask(f"use {name}")
    assert run.status == "ok", run.messages
    return tool_result(server, id), run


def offered(server: ScriptedServer) -> set[str]:
    return {t["function"]["name"] for t in server.chat_requests()[-1].get("tools", [])}


def conversation(face: Face) -> list[dict]:
    run = face.py("import json as _j, lily as _l\nprint(_j.dumps(_l.session().conversation))")
    return json.loads(run.stdout)


# -- seeing the notebook -----------------------------------------------------------------

def test_list_variables_names_types_shapes_and_hides_secrets(face, server, turns):
    face.py("import pandas as pd, numpy as np\n"
            "df = pd.DataFrame({'city': ['Oslo', 'Lima', None], 'temp': [3.5, 19.0, None]})\n"
            "arr = np.zeros((3, 224, 224))\nitems = list(range(37))\ntext = 'x' * 1204\n"
            "api_key = 'sk-SECRETVALUE'\nmy_token = 'TOKENVALUE'\ndb_password = 'PW'\n"
            "def helper(): pass\nclass Thing: pass\n_private = 1")
    result, _ = ask_tool(face, server, turns, "list_variables", {}, "lv1")
    assert "df: DataFrame 3×2 [city, temp]" in result  # the column names a question needs
    assert "arr: ndarray float64 (3, 224, 224)" in result
    assert "items: list[37]" in result and "text: str[1,204]" in result
    assert "3 hidden" in result
    for secret in ("api_key", "my_token", "db_password", "SECRETVALUE", "TOKENVALUE"):
        assert secret not in result
    for left_out in ("helper", "Thing", "_private", "pd:", "np:", "In:", "Out:", "get_ipython"):
        assert left_out not in result
    with_callables, _ = ask_tool(face, server, turns, "list_variables",
                                 {"include_callables": True}, "lv2")
    assert "helper: function" in with_callables and "Thing: type" in with_callables


def test_inspect_variable_dataframe_array_and_secret(face, server, turns):
    result, _ = ask_tool(face, server, turns, "inspect_variable", {"name": "df"}, "iv1")
    assert "3 rows × 2 columns" in result and "temp: float64" in result
    assert "nulls per column: city=1, temp=1" in result and "Oslo" in result
    # a numeric column's min, max, mean and sum, NaN left out as pandas does
    assert "numeric columns:\n  temp: min 3.5, max 19, mean 11.25, sum 22.5" in result
    result, _ = ask_tool(face, server, turns, "inspect_variable", {"name": "arr"}, "iv2")
    assert "shape (3, 224, 224), dtype float64" in result and "min 0.0, max 0.0, mean 0.0" in result
    result, _ = ask_tool(face, server, turns, "inspect_variable", {"name": "api_key"}, "iv3")
    assert result.startswith("Error:") and "SECRETVALUE" not in result


def test_inspect_variable_given_a_column_shows_that_column(face, server, turns):
    """The 1.5B model asked "What is the mean of column y in df?" calls
    inspect_variable("y") (issue 30): the column of the one DataFrame that has it."""
    face.py("import pandas as pd\ncolframe = pd.DataFrame({'x': [1, 2, 3], 'yy': [10, 20, 60]})")
    for i, name in enumerate(("yy", "colframe['yy']", "colframe.yy")):
        result, _ = ask_tool(face, server, turns, "inspect_variable", {"name": name}, f"col{i}")
        assert f"'{name}' is not a variable; it is column 'yy' of the DataFrame colframe." \
            in result, result
        assert "Series yy: 3 values, dtype int64" in result and "min 10, max 60, mean 30, sum 90" \
            in result


def test_inspect_variable_on_a_workspace_file_names_the_read_tool(face, server, turns):
    """The face hands the session's file boundary to the notebook tools (issue 30)."""
    run = face.py("import os as _os\nopen('nbtools_notes.txt', 'w').write('hi')\n"
                  "print(_os.getcwd())")
    assert run.status == "ok", run.messages
    result, _ = ask_tool(face, server, turns, "inspect_variable", {"name": "nbtools_notes.txt"},
                         "ivf")
    assert result == ("Error: 'nbtools_notes.txt' is a file in the workspace, not a notebook "
                      'variable: read it with read(path="nbtools_notes.txt")'), result


def test_a_slow_repr_of_the_users_class_is_never_run(face, server, turns):
    face.py("import time as _t\nclass Slow:\n    def __repr__(self):\n        _t.sleep(30)\n"
            "        return 'never'\nslow = Slow()\nslow.size = 3")
    started = time.monotonic()
    result, _ = ask_tool(face, server, turns, "inspect_variable", {"name": "slow"}, "iv5")
    assert "__main__.Slow" in result and "repr is not run" in result and "size: 3" in result
    assert time.monotonic() - started < 8  # the bound is 1 s; the rest is two model round trips
    run = face.py("print(1 + 1)")  # the kernel is fine afterwards
    assert run.stdout.strip() == "2"


def test_ten_thousand_variables_answer_bounded(face, server, turns):
    """How long the listing takes is measured by ``bench/limits.py variables``."""
    face.py("for _i in range(10_000):\n    globals()[f'v{_i}'] = _i")
    run = face.py("import lily as _l\nprint(len(_l.session().tools.get('list_variables')()))")
    assert int(run.stdout) <= 8_100
    result, _ = ask_tool(face, server, turns, "list_variables", {}, "lv3")
    assert "older ones not listed" in result and len(result) <= 8_100
    face.py("for _i in range(10_000):\n    del globals()[f'v{_i}']")


def test_inspect_is_bounded_in_characters(face, server, turns):
    face.py("huge = {f'k{i}': 'y' * 5000 for i in range(1000)}\nlong_text = 'z' * 1_000_000")
    for name, cid in (("huge", "iv6"), ("long_text", "iv7")):
        result, _ = ask_tool(face, server, turns, "inspect_variable", {"name": name}, cid)
        assert len(result) <= 4_100, (name, len(result))


def test_read_cells_and_last_error_after_a_failed_cell(face, server, turns):
    face.py("print('CELL-OUTPUT-MARK')")
    failed = face.py("numbers = [1, 2]\nnumbers[5]")
    assert failed.status == "error"
    result, _ = ask_tool(face, server, turns, "last_error", {}, "le1")
    assert "numbers[5]" in result and "IndexError: list index out of range" in result
    assert "\x1b[" not in result and "Traceback" in result
    cells, _ = ask_tool(face, server, turns, "read_cells", {"last": 5}, "rc1")
    assert "print('CELL-OUTPUT-MARK')" in cells and "CELL-OUTPUT-MARK\n" in cells
    assert "numbers[5]" in cells
    assert "use read_cells" not in cells  # the asking cell itself is not one of them


def test_propose_cell_sends_the_set_next_input_payload(face, server, turns):
    turns.extend([call("propose_cell", {"code": "print(40 + 2)"}, "pc1"), "Proposed below."])
    run = face.ask("propose a cell")
    assert run.status == "ok"
    payloads = run.reply.get("payload", [])
    # In the Lily kernel plain text is a request to the agent: the proposed cell must start
    # with %%python to run as Python; in a Python kernel it stays plain Python.
    text = "%%python\nprint(40 + 2)" if face.name == "lily" else "print(40 + 2)"
    assert {"source": "set_next_input", "text": text, "replace": False} in payloads
    assert "nothing ran" in tool_result(server, "pc1")
    asked = len(server.chat_requests())
    proposed = face.kernel.run(text)  # run as the user would, unchanged: it is Python
    assert proposed.status == "ok" and proposed.stdout.strip() == "42", proposed.messages
    assert len(server.chat_requests()) == asked  # the model was not asked


def test_a_proposed_cell_magic_is_kept_as_written(face, server, turns):
    turns.extend([call("propose_cell", {"code": "%%bash\necho hi"}, "pc2"), "Proposed."])
    run = face.ask("propose a shell cell")
    assert {"source": "set_next_input", "text": "%%bash\necho hi", "replace": False} \
        in run.reply.get("payload", [])


# -- run_python: only after the user confirms ---------------------------------------------

def counter(face: Face) -> int:
    return int(face.py("print(globals().get('run_count', 0))").stdout.strip())


def propose_run(face: Face, turns, id: str, code: str = "run_count = globals().get('run_count', 0) + 1\nprint('RAN', run_count)"):
    turns.append(call("run_python", {"code": code}, id))
    run = face.ask("run it")
    assert run.status == "ok", run.messages
    cards = [d for d in run.displays if "**Approve run_python** (tool call" in d.get("text/markdown", "")]
    assert len(cards) == 1, run.displays
    assert "```python\n" + code in cards[0]["text/markdown"]
    return run, cards[0]


def test_run_python_waits_then_runs_once_on_confirm(face, server, turns):
    before = counter(face)
    requests = len(server.chat_requests())
    propose_run(face, turns, "rp1")
    assert counter(face) == before  # nothing ran before Confirm
    assert len(server.chat_requests()) == requests + 1
    turns.append({"expect": {"contains": "RAN"}, "content": "It printed RAN."})
    done = face.cmd("/confirm")
    assert done.status == "ok", done.messages
    assert "RAN" in done.stdout
    assert any("It printed RAN." in d.get("text/markdown", "") for d in done.displays)
    assert counter(face) == before + 1
    assert "RAN" in tool_result(server, "rp1")
    assert face.cmd("/confirm").error_line() == "Error: nothing is waiting for confirmation."
    assert counter(face) == before + 1
    assert_consistent(conversation(face))


def buttons_of(run) -> dict[str, str]:
    """The card's buttons: description -> comm id."""
    opened = {m["content"]["comm_id"]: m["content"]["data"]["state"]
              for m in run.of_type("comm_open")}
    return {s.get("description"): cid for cid, s in opened.items()
            if s.get("_model_name") == "ButtonModel"}


def click(face: Face, comm_id: str) -> list[dict]:
    """Click a button as a front end does; the messages that follow."""
    kernel = face.kernel
    msg = kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {
        "method": "custom", "content": {"event": "click"}}})
    kernel.kc.shell_channel.send(msg)
    return kernel.iopub_until_idle(msg["header"]["msg_id"], timeout=20)


def states(messages: list[dict]) -> list[dict]:
    return [m["content"]["data"].get("state", {}) for m in messages if m["msg_type"] == "comm_msg"]


def test_the_confirm_button_runs_once_and_continues_in_the_card(face, server, turns):
    before = counter(face)
    run, card = propose_run(face, turns, "rp2", code=(
        "run_count = globals().get('run_count', 0) + 1\nprint('RAN')\nprint('second line')"))
    buttons = buttons_of(run)
    # the card is a display of its own, restorable (no widget in it); the buttons follow it
    assert WIDGET_MIME not in card and set(buttons) == {"Run once", "Deny"}  # never "Always"
    shown = next(m for m in run.of_type("display_data") if m["content"]["data"] is card)
    card_id = shown["content"]["transient"]["display_id"]
    after = run.displays[run.displays.index(card) + 1]
    assert set(after) == {WIDGET_MIME, "text/plain"} and after["text/plain"] == ""
    assert counter(face) == before
    turns.append({"expect": {"contains": "RAN"}, "content": "BUTTON-ANSWER with **bold**"})

    updates = click(face, buttons["Run once"])
    # the outcome goes into the card's own display, by its id: saved with the notebook
    outcome = [m["content"] for m in updates if m["msg_type"] == "update_display_data"]
    assert len(outcome) == 1 and outcome[0]["transient"]["display_id"] == card_id
    data = outcome[0]["data"]
    html = data["text/html"]
    assert "<pre>RAN\nsecond line</pre>" in html  # text as text, one block
    assert "<strong>bold</strong>" in html and "<sub>" in html and "```" not in html
    assert "&lt;sub&gt;" not in html and "BUTTON-ANSWER" in data["text/plain"]
    assert "Approve run" in html  # the card stays above its outcome
    assert counter(face) == before + 1
    assert all(s["disabled"] for s in states(updates) if "disabled" in s)

    again = click(face, buttons["Run once"])
    said = " ".join(str(s.get("value", "")) for s in states(again))
    assert "nothing is waiting for confirmation" in said
    assert not any(m["msg_type"] == "update_display_data" for m in again)
    assert not any(s.get("disabled") is False for s in states(again))  # stays inactive
    assert counter(face) == before + 1
    assert_consistent(conversation(face))


def test_a_dataframe_shown_by_a_confirmed_call_is_a_table_in_the_card(face, server, turns):
    run, _ = propose_run(face, turns, "rp-df", code=(
        "import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Rome'], 'temp': [3, 18]})"))
    turns.append("DF-ANSWER")
    updates = click(face, buttons_of(run)["Run once"])
    html = next(m["content"]["data"]["text/html"] for m in updates
            if m["msg_type"] == "update_display_data")
    assert "<table" in html and "dataframe" in html and "Rome" in html


def test_attack_a_hostile_answer_and_output_after_a_click_stay_inert(face, server, turns):
    """ATTACK: the model's code prints markup and its follow-up answer carries script, an
    unsafe link and an event handler; the card's outcome shows them as text."""
    run, _ = propose_run(face, turns, "rp-evil", code="print('<img src=x onerror=alert(1)>')")
    turns.append({"content": "<script>window.__pwned=1</script> [click me](javascript:alert(1)) "
                             "<img src=y onerror=alert(2)>"})
    updates = click(face, buttons_of(run)["Run once"])
    html = next(m["content"]["data"]["text/html"] for m in updates
            if m["msg_type"] == "update_display_data")
    assert "<script" not in html and "<img" not in html and "href=\"javascript" not in html
    assert "&lt;script&gt;window.__pwned=1" in html and "onerror=alert(1)" in html


def test_buttons_go_inactive_when_the_card_is_decided_by_command(face, server, turns):
    run, _ = propose_run(face, turns, "rp-cmd")
    buttons = buttons_of(run)
    turns.append("CMD-ANSWER")
    done = face.cmd("/confirm")
    assert done.status == "ok", done.messages
    disabled = {m["content"]["comm_id"] for m in done.of_type("comm_msg")
                if m["content"]["data"].get("state", {}).get("disabled") is True}
    assert set(buttons.values()) <= disabled
    said = " ".join(str(m["content"]["data"].get("state", {}).get("value", ""))
                    for m in done.of_type("comm_msg"))
    assert "Decided" not in said  # said once, in the card (issue 43 §3), not under the buttons
    card = [m["content"]["data"]["text/html"] for m in done.of_type("update_display_data")
            if "Decided in another cell" in str(m["content"]["data"])]
    assert len(card) == 1 and card[0].count("Decided in another cell (/confirm).") == 1


def test_cancel_records_declined_by_the_user(face, server, turns):
    before = counter(face)
    propose_run(face, turns, "rp3")
    done = face.cmd("/cancel")
    assert done.status == "ok"
    assert counter(face) == before
    conv = conversation(face)
    assert_consistent(conv)
    assert [m["content"] for m in conv if m.get("tool_call_id") == "rp3"] == ["declined by the user"]


def test_a_new_prose_cell_declines_the_waiting_call(face, server, turns):
    before = counter(face)
    card_run, _ = propose_run(face, turns, "rp4")
    turns.append({"expect": {"contains": "something else"}, "content": "OK, moving on."})
    run = face.ask("something else")
    assert run.status == "ok"
    said = [d["text/markdown"] for d in run.displays if "declined" in d.get("text/markdown", "")]
    assert len(said) == 1 and "you asked something else" in said[0]
    disabled = {m["content"]["comm_id"] for m in run.of_type("comm_msg")
                if m["content"]["data"].get("state", {}).get("disabled") is True}
    assert set(buttons_of(card_run).values()) <= disabled
    assert counter(face) == before
    assert tool_result(server, "rp4") == "declined by the user"
    assert_consistent(server.chat_requests()[-1]["messages"][1:])
    assert face.cmd("/confirm").error_line() == "Error: nothing is waiting for confirmation."


# -- usage ---------------------------------------------------------------------------------

def test_usage_in_the_footer_when_reported_and_nothing_when_not(face, server, turns):
    turns.append({"content": "NO-USAGE-ANSWER"})
    run = face.ask("no usage please")
    md = [d["text/markdown"] for d in run.displays if "NO-USAGE-ANSWER" in d.get("text/markdown", "")]
    assert md and "tokens" not in md[0]
    assert server.chat_requests()[-1]["stream_options"] == {"include_usage": True}
    turns.append({"content": "USAGE-ANSWER", "usage": {"prompt_tokens": 1234, "completion_tokens": 56}})
    run = face.ask("with usage")
    md = [d["text/markdown"] for d in run.displays if "USAGE-ANSWER" in d.get("text/markdown", "")]
    assert "tokens: 1,234 prompt + 56 completion" in md[0]
    model = face.cmd("/model")
    text = model.displays[0]["text/plain"]
    assert "1,234 prompt + 56 completion tokens over 1 model call" in text


# -- what a request offers in a notebook, and a server that drops the tools (issue 30) -------

NOTEBOOK_TOOLS = {"list_variables", "inspect_variable", "read_cells", "last_error",
                  "propose_cell", "run_python"}


def test_a_notebook_request_is_offered_the_notebook_tools_and_no_skill_tools(face, server, turns):
    turns.append("Hello!")
    assert face.ask("Say hello.").status == "ok"
    names = offered(server)
    assert names >= NOTEBOOK_TOOLS and {"load_skill", "read", "write", "list"} <= names
    assert not names & {"propose_action", "read_config", "compile_plan", "scan_todos"}
    assert server.chat_requests()[-1]["temperature"] == 0
    face.cmd("/model profile=small")
    try:
        turns.append("Hello again!")
        assert face.ask("Say hello.").status == "ok"
        # answer: small only; no load_skill, as no skill says "hello"
        assert offered(server) == {"read", "list_variables", "inspect_variable",
                                   "last_error", "propose_cell", "answer"}
        turns.append("fixed")
        assert face.cmd("/fix").status == "ok"  # a forced skill: its own tools, no load_skill
        assert offered(server) == {"last_error", "propose_cell"}
    finally:
        face.cmd("/model profile=auto")


def test_a_server_that_drops_the_tools_is_named_in_the_footer(face, server, turns):
    turns.append({"content": "DROPPED-ANSWER", "usage": {"prompt_tokens": 30,
                                                          "completion_tokens": 3}})
    run = face.ask("Say hello.")
    md = [d["text/markdown"] for d in run.displays if "DROPPED-ANSWER" in d.get("text/markdown", "")]
    assert md and "the server counted 30 prompt tokens" in md[0]
    assert "seems to drop the tools" in md[0]
