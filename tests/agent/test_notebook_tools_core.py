"""The notebook tools' core (no Jupyter), the time bound, the settings, and usage over HTTP."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from agent_support import World, run_shown

from lily_kernel.agent import loop
from lily_kernel.errors import ActionError
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.tools import bounded, notebook_tools
from lily_kernel.tools.tool_registry import ToolPolicy


class Book:
    def __init__(self, ns: dict) -> None:
        self.ns = ns

    def namespace(self):
        return self.ns

    def hidden(self):
        return {}


def test_the_core_never_imports_pandas_or_numpy():
    code = ("import sys\nfrom lily_kernel.tools import notebook_tools\n"
            "class B:\n    ns = {'x': [1, 2], 'y': 'abc', 'z': object()}\n"
            "    def namespace(self): return self.ns\n    def hidden(self): return {}\n"
            "notebook_tools.list_variables(B()); [notebook_tools.inspect_variable(B(), n) for n in 'xyz']\n"
            "print('pandas' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_secret_names_are_counted_never_named():
    book = Book({"openai_api_key": "sk-1", "GITHUB_TOKEN": "t", "Credentials": {}, "x": 1})
    text = notebook_tools.list_variables(book)
    assert "3 hidden" in text and "x: int" in text
    assert "openai" not in text and "GITHUB" not in text and "Credentials" not in text
    with pytest.raises(notebook_tools.ToolError):
        notebook_tools.inspect_variable(book, "GITHUB_TOKEN")


def test_bounded_thread_fallback_stops_waiting_at_the_bound():
    box = {}

    def off_main():
        box["result"] = bounded.call(lambda: time.sleep(5), 0.3)

    started = time.monotonic()
    worker = threading.Thread(target=off_main)
    worker.start()
    worker.join()
    assert box["result"] == (False, None)
    assert time.monotonic() - started < 4  # the sleep would take 5 s


def test_bounded_alarm_interrupts_and_restores_the_signal_handler():
    import signal
    before = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()
    assert bounded.call(lambda: time.sleep(5), 0.2) == (False, None)
    assert time.monotonic() - started < 3  # the sleep would take 5 s
    assert signal.getsignal(signal.SIGALRM) == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert bounded.call(lambda: 42, 1) == (True, 42)
    done, exc = bounded.call(lambda: 1 / 0, 1)
    assert done and isinstance(exc, ZeroDivisionError)


def test_swallowing_the_alarm_does_not_escape_the_bound():
    def stubborn():
        for _ in range(3):
            try:
                time.sleep(5)
            except BaseException:
                pass
        time.sleep(5)  # the alarm fires again (every 50 ms) and ends it here
        return "finished"

    started = time.monotonic()
    assert bounded.call(stubborn, 0.2) == (False, None)
    assert time.monotonic() - started < 3  # it would take 20 s


def test_confirm_list_and_share_values_settings(tmp_path):
    assert ToolPolicy.from_env({}, {}).confirm == {"run_python"}
    assert ToolPolicy.from_env({}, {"confirm": ["write"]}).confirm == {"run_python", "write"}
    with pytest.raises(ValueError):
        ToolPolicy.from_env({}, {"confirm": "write"})
    world = World(tmp_path)
    assert world.session(None).share_values is True
    (world.workspace / "lily.toml").write_text("[notebook]\nshare_values = false\n")
    assert world.session(None).share_values is False
    (world.workspace / "lily.toml").write_text("[notebook]\nshare_values = 'no'\n")
    session = world.session(None)
    assert session.share_values is False  # fails closed
    assert "share_values must be true or false" in session.config_error


def test_the_cli_session_has_no_notebook_tools(tmp_path):
    session = World(tmp_path).session(None)
    assert not set(notebook_tools.NAMES) & set(session.tools.names())


def test_a_server_that_rejects_stream_options_is_asked_again_without(tmp_path):
    with ScriptedServer(["PLAIN-ANSWER"], reject_params=["stream_options"]) as server:
        session = World(tmp_path).session(server)
        reply = run_shown(session, "hello")
        assert reply.text == "PLAIN-ANSWER" and reply.usage is None
        first, second = server.chat_requests()[0], server.chat_requests()[1]
        assert "stream_options" in first and "stream_options" not in second
        server.add("AGAIN")
        run_shown(session, "once more")
        assert "stream_options" not in server.chat_requests()[-1]  # remembered for the endpoint


def test_usage_sums_over_the_steps_of_a_request(tmp_path):
    with ScriptedServer([
        {"tool_calls": [{"name": "list", "arguments": {}}],
         "usage": {"prompt_tokens": 10, "completion_tokens": 2}},
        {"content": "done", "usage": {"prompt_tokens": 30, "completion_tokens": 5}},
    ]) as server:
        session = World(tmp_path).session(server)
        reply = run_shown(session, "list files")
        assert reply.usage == {"prompt_tokens": 40, "completion_tokens": 7}
        assert session.usage == {"prompt_tokens": 40, "completion_tokens": 7, "calls": 2}


def test_the_tools_cost_nothing_until_called(tmp_path):
    calls = []

    class Counting:
        def namespace(self):
            calls.append("namespace")
            return {}

        def hidden(self):
            calls.append("hidden")
            return {}

        def cells(self, last):
            calls.append("cells")
            return []

        def last_error(self):
            calls.append("last_error")

    world = World(tmp_path)
    with ScriptedServer(["A", {"tool_calls": [{"name": "list_variables", "arguments": {}}]},
                         "B"]) as server:
        from lily_kernel.session.session import Session
        session = Session(workspace=world.workspace, env=world.env(server), journal=False,
                          add_tools=lambda s: notebook_tools.register(s.tools, Counting(), lambda: True))
        assert set(notebook_tools.NAMES) <= set(session.tools.names())
        run_shown(session, "no tools needed")
        assert calls == []  # offered, never walked
        run_shown(session, "now list them")
        assert calls == ["namespace", "hidden"]


class Runner(Book):
    """A notebook whose run() counts the code it ran."""

    def __init__(self) -> None:
        super().__init__({})
        self.ran: list[str] = []

    def run(self, code):
        self.ran.append(code)
        return notebook_tools.RunResult(f"RESULT-OF {code}")


def test_a_held_call_pauses_the_step_in_order_and_runs_once(tmp_path):
    from agent_support import assert_consistent

    from lily_kernel.agent import pending
    from lily_kernel.session.session import Session
    book = Runner()
    with ScriptedServer([
        {"tool_calls": [{"name": "list", "arguments": {}, "id": "a"},
                        {"name": "run_python", "arguments": {"code": "x = 1"}, "id": "b"},
                        {"name": "list", "arguments": {}, "id": "c"}]},
        "FINAL",
    ]) as server:
        world = World(tmp_path)
        session = Session(workspace=world.workspace, env=world.env(server), journal=False,
                          add_tools=lambda s: notebook_tools.register(s.tools, book, lambda: True))
        reply = run_shown(session, "do three things")
        assert reply.proposal is session.pending and reply.proposal.kind == "tool"
        assert book.ran == [] and session.conversation == []  # nothing ran, nothing committed
        outcome = pending.decide(session, None, ok=True)
        assert book.ran == ["x = 1"] and session.pending is None
        with pytest.raises(ActionError):
            pending.decide(session, None, ok=True)  # a second Confirm finds nothing
        final = loop.resume(session, outcome.item, outcome.result)
        assert final.text == "FINAL" and book.ran == ["x = 1"]
        sent = server.chat_requests()[-1]["messages"]
        assert any("RESULT-OF x = 1" in (m.get("content") or "") for m in sent)
        assert_consistent(session.conversation)
        results = {m["tool_call_id"]: m["content"] for m in session.conversation
                   if m["role"] == "tool"}
        assert results["b"].startswith("The code ran without an error")
        assert results["c"].startswith("Error: not run")
        assert not results["a"].startswith("Error")


# -- what a small model asks wrongly, answered (issue 30) -----------------------------------

class Cells(Book):
    def __init__(self, ns: dict, cells: list, error=None) -> None:
        super().__init__(ns)
        self._cells, self._error = cells, error

    def cells(self, last):
        return self._cells[-last:]

    def last_error(self):
        return self._error


def test_a_column_name_is_answered_with_that_column_of_the_one_frame_that_has_it():
    pd = pytest.importorskip("pandas")
    book = Book({"df": pd.DataFrame({"x": [1, 2, 3], "y": [10.0, 20.0, 60.0]}), "n": 3})
    for name in ("y", "df['y']", 'df["y"]', "df.y", " df[ 'y' ] "):
        text = notebook_tools.inspect_variable(book, name)
        assert text.startswith(f"'{name}' is not a variable; it is column 'y' of the DataFrame "
                               "df.\ndf['y']: Series y: 3 values, dtype float64"), text
        assert "min 10, max 60, mean 30, sum 90" in text
    assert "mean" not in notebook_tools.inspect_variable(book, "y", share=False)  # not shared
    # the expression form of a column that is not there still points to the variable
    with pytest.raises(notebook_tools.ToolError, match=r"call inspect_variable\(name=\"df\"\)"):
        notebook_tools.inspect_variable(book, "df['z']")


def test_a_column_name_in_two_frames_or_in_none_is_still_an_error():
    pd = pytest.importorskip("pandas")
    book = Book({"a": pd.DataFrame({"y": [1]}), "b": pd.DataFrame({"y": [2]})})
    with pytest.raises(notebook_tools.ToolError, match="no variable named 'y'"):
        notebook_tools.inspect_variable(book, "y")
    assert "column 'y' of the DataFrame b" in notebook_tools.inspect_variable(book, "b.y")
    with pytest.raises(notebook_tools.ToolError, match="no variable named 'q'"):
        notebook_tools.inspect_variable(book, "q")


def test_a_frame_whose_column_labels_are_the_users_objects_is_not_looked_in():
    pd = pytest.importorskip("pandas")
    calls = []

    class Label:
        def __hash__(self):
            calls.append("hash")
            return 1

        def __eq__(self, other):
            calls.append("eq")
            return False

    book = Book({"df": pd.DataFrame({Label(): [1], "ok": [2]}), "other": pd.DataFrame({"y": [1]})})
    calls.clear()
    assert "column 'y' of the DataFrame other" in notebook_tools.inspect_variable(book, "y")
    with pytest.raises(notebook_tools.ToolError):
        notebook_tools.inspect_variable(book, "df.ok")
    assert calls == []  # no code of the notebook's own ran


def test_a_secret_frame_or_column_expression_is_refused():
    pd = pytest.importorskip("pandas")
    book = Book({"api_token": pd.DataFrame({"y": [1]})})
    with pytest.raises(notebook_tools.ToolError):
        notebook_tools.inspect_variable(book, "api_token['y']")
    with pytest.raises(notebook_tools.ToolError, match="no variable named 'y'"):
        notebook_tools.inspect_variable(book, "y")  # a secret-looking frame is not listed


def test_last_error_with_no_failure_shows_the_last_cell_that_ran():
    cells = [notebook_tools.Cell(1, "a = 1", ""),
             notebook_tools.Cell(2, "result = sum(range(10))\nprint(result)", "45\n")]
    text = notebook_tools.last_error(Cells({}, cells))
    assert text == ("No cell has failed in this notebook session. The last cell that ran:\n"
                    "--- cell [2] ---\nresult = sum(range(10))\nprint(result)\n"
                    "--- output ---\n45")
    hidden = notebook_tools.last_error(Cells({}, cells), share=False)
    assert "45" not in hidden and notebook_tools.NOT_SHARED in hidden
    assert notebook_tools.last_error(Cells({}, [])) == \
        "No cell has failed in this notebook session. No cell has run yet."
    err = notebook_tools.ErrorInfo(2, "print(x)", "NameError", "name 'x' is not defined", "tb")
    assert notebook_tools.last_error(Cells({}, cells, err)).startswith("The last failed cell")
