"""The small profile may answer, and may try again (issue 40 §1; docs/agent.md#small-model-profile).

Against the ScriptedServer on 127.0.0.1, with the shapes Qwen2.5-Coder-1.5B writes under the
required step's grammar (a JSON object ``{"name": …, "arguments": …}``):

- the required first step admits the ``answer`` tool: a greeting is answered in one step,
  with no tool; ``answer`` called in a later step ends the request too; cut at the length
  limit, its text is still the answer; beside another call it is not run;
- run_python's code that raised is told with the exception's last line and the line that
  raised; the next step is required and admits run_python again (not ``answer``); identical
  code is refused as a repeat, and spends an attempt; after ``RUN_ATTEMPTS``, no more, and
  the step after a refused run admits only the answer;
- after a failed look-up, the required step admits run_python, brought back;
- a request naming a data file offers run_python first, whose description says files are
  read by name and variables are live; when the workspace holds that file, the required
  steps admit only run_python; naming another file it holds, the file tools it asks for;
- the request restated after a tool result keeps its end (the answer's form).
"""
from __future__ import annotations

import json

import agent_support
import pytest
from agent_support import World, assert_consistent, run_shown

from lily_kernel.agent import loop, pending, small_steps
from lily_kernel.agent.request import Request
from lily_kernel.session.session import Session
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.tools import notebook_tools

HELLO = '{"name": "answer", "arguments": {"text": "Hello! How can I help?"}}'


def names(tools: list[dict]) -> list[str]:
    return [t["function"]["name"] for t in tools or []]


def admitted(request: dict) -> list[str]:
    schema = request["response_format"]["json_schema"]["schema"]
    return [alt["properties"]["name"]["const"] for alt in schema["anyOf"]]


class Book(agent_support.Book):
    """A notebook whose code raises NameError when it calls ``mean(`` (as the 1.5B model's
    code did), and prints ``RAN <code>`` otherwise."""

    def run(self, code):
        if "mean(" not in code:
            return super().run(code)
        self.ran.append(code)
        line = next(i for i, text in enumerate(code.splitlines(), 1) if "mean(" in text)
        trace = ("Traceback (most recent call last):\n"
                 f'  File "<run_python code>", line {line}, in <module>\n'
                 "NameError: name 'mean' is not defined")
        error = notebook_tools.ErrorInfo(None, code, "NameError", "name 'mean' is not defined",
                                         trace)
        return notebook_tools.RunResult(trace, error)


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def notebook_session(world: World, server: ScriptedServer | None, book: Book) -> Session:
    return Session(workspace=world.workspace, env=world.env(server, LILY_PROFILE="small"),
                   journal=False,
                   add_tools=lambda s: notebook_tools.register(s.tools, book, lambda: True))


def test_a_greeting_is_answered_in_one_step_without_a_tool(world):
    with ScriptedServer([HELLO]) as server:
        session = world.session(server, LILY_PROFILE="small")
        shown: list[str] = []
        reply = loop.run(session, "Say hello.", on_text=shown.append)
        [first] = server.chat_requests()
    assert reply.text == "Hello! How can I help?" and reply.steps == 1
    assert reply.tools_used == [] and reply.notes == []
    assert "".join(shown) == "Hello! How can I help?"  # never the JSON
    assert "answer" in admitted(first) and "answer" in names(first["tools"])
    assert session.conversation[-1] == {"role": "assistant", "content": "Hello! How can I help?"}
    assert_consistent(session.conversation)


def test_the_answer_tool_in_a_later_step_ends_the_request(world):
    (world.workspace / "notes.txt").write_text("The launch moved to Thursday.\n")
    script = ['{"name": "read", "arguments": {"path": "notes.txt"}}',
              {"tool_calls": [{"id": "a1", "name": "answer", "arguments": {"text": "Thursday."}}]}]
    with ScriptedServer(script) as server:
        session = world.session(server, LILY_PROFILE="small")
        reply = run_shown(session, "When is the launch? See notes.txt.")
    assert reply.text == "Thursday." and reply.tools_used == ["read"]
    assert_consistent(session.conversation)
    assert not session.conversation[-1].get("tool_calls")


@pytest.mark.parametrize("written", [
    '```json\n{\n  "text": "cities.csv\\nnotes.txt"\n}\n```',  # as the 1.5B model wrote it
    '{"text": "cities.csv\\nnotes.txt"}'])
def test_the_answer_tools_arguments_written_alone_are_the_answer(world, written):
    (world.workspace / "notes.txt").write_text("N\n")
    script = ['{"name": "list", "arguments": {"path": "."}}', written]
    with ScriptedServer(script) as server:
        reply = run_shown(world.session(server, LILY_PROFILE="small"), "Which files are here?")
    assert reply.text == "cities.csv\nnotes.txt"


@pytest.mark.parametrize("written", [
    '{"text": "a", "other": 1}', '{"text": 3}', 'Here: {"text": "a"}', '```python\n{"text": "a"}\n```'])
def test_other_json_in_an_answer_is_left_as_written(written):
    assert small_steps.bare_answer(written) is None


def test_an_answer_cut_at_the_length_limit_keeps_its_text(world):
    cut = {"content": '{"name": "answer", "arguments": {"text": "Two plus two is 4, and',
           "finish_reason": "length"}
    with ScriptedServer([cut]) as server:
        reply = loop.run(world.session(server, LILY_PROFILE="small"), "What is 2+2?")
    assert reply.text.startswith("Two plus two is 4, and")
    assert "length limit" in reply.text  # the usual note of an answer cut short


def test_answer_beside_another_call_is_not_run(world):
    (world.workspace / "notes.txt").write_text("N\n")
    script = [{"tool_calls": [{"id": "r1", "name": "read", "arguments": {"path": "notes.txt"}},
                              {"id": "a1", "name": "answer", "arguments": {"text": "early"}}]},
              "Done."]
    with ScriptedServer(script) as server:
        session = world.session(server, LILY_PROFILE="full")  # free steps: two calls at once
        session.set_model(profile="small")
        reply = run_shown(session, "Read notes.txt")
    results = {m["tool_call_id"]: m["content"] for m in session.conversation if m["role"] == "tool"}
    assert results["a1"].startswith("Error: answer: not run: call it alone")
    assert results["r1"] == "N\n" and reply.text == "Done."


def test_the_full_profile_offers_no_answer_tool(world):
    with ScriptedServer(["Hello!"]) as server:
        loop.run(world.session(server, LILY_PROFILE="full"), "Say hello.")
        assert "answer" not in names(server.chat_requests()[0]["tools"])


def test_code_that_raised_is_told_with_its_line_and_may_be_tried_again(world):
    book = Book()
    bad = "import statistics\nx = mean([1, 2])\nprint(x)"
    good = "import statistics\nprint(statistics.mean([1, 2]))"
    script = [_run(bad), _run(bad), _run(good), "The mean is 1.5."]
    with ScriptedServer(script) as server:
        session = notebook_session(world, server, book)
        reply = run_shown(session, "Run code to compute the mean of 1 and 2.")
        assert reply.proposal is not None  # run_python asks (a card) in this world
        outcome = pending.decide(session, None, ok=True)
        reply = loop.resume(session, outcome.item, outcome.result)  # the same code: refused
        assert reply.proposal is not None
        session.show(reply.proposal.id)
        outcome = pending.decide(session, None, ok=True)
        reply = loop.resume(session, outcome.item, outcome.result)
        sent = server.chat_requests()
    assert reply.text == "The mean is 1.5." and book.ran == [bad, good]
    raised = next(m["content"] for m in session.conversation if m["role"] == "tool")
    assert raised.startswith("The code ran and raised NameError: name 'mean' is not defined")
    assert "The line that raised (line 2): x = mean([1, 2])" in raised
    assert "call run_python again with the corrected code" in raised
    # the step after the failed run requires a call, run_python admitted again, no answer
    assert "run_python" in admitted(sent[1]) and "answer" not in admitted(sent[1])
    again = [m["content"] for m in session.conversation if m["role"] == "tool"][1]
    assert again.startswith("Already answered:")  # identical code is still a repeat
    # and since it raised, the repeat points at changed code, not at an answer from the error
    assert "would raise the same way again" in again and "Change the line that raised" in again
    assert "Use that result" not in again
    assert_consistent(session.conversation)


def test_the_same_code_sent_again_spends_an_attempt_and_then_the_answer_is_asked_for(world):
    # the 0.5B model on 9 of 10 DABench slice questions: the code raised, then the same call
    # came at every step left (5 or 6 of them), each refused, and the request ran out of steps
    book = Book()
    bad = "x = mean([1, 2])"
    gave_up = '{"name": "answer", "arguments": {"text": "The code failed: mean is undefined."}}'
    script = [_run(bad), _run(bad), _run(bad), gave_up]
    with ScriptedServer(script) as server:
        session = notebook_session(world, server, book)
        reply = run_shown(session, "Run code to compute the mean of 1 and 2.")
        session.show(reply.proposal.id)  # run_python asks (a card) in this world
        outcome = pending.decide(session, None, ok=True)
        reply = loop.resume(session, outcome.item, outcome.result)
        sent = server.chat_requests()
    assert reply.text == "The code failed: mean is undefined." and book.ran == [bad]
    results = [m["content"] for m in session.conversation if m["role"] == "tool"]
    assert results[1].startswith("Already answered:")  # the first repeat: change the code
    # the second spends the last attempt: refused, and the step after it admits only the answer
    assert results[2].startswith("Error: not run: the code raised 3 times in this request")
    assert "response_format" not in sent[2] and admitted(sent[3]) == ["answer"]
    assert "no attempt left for code; the answer was asked for" in reply.notes
    assert len(sent) == 4 and reply.steps == 4  # not the 8 steps the repeats used to take
    # a request resumed after a card counts the repeats again
    assert small_steps.repeats_of_raised(session.conversation) == 2
    assert_consistent(session.conversation)


def test_repeats_are_counted_only_from_well_formed_calls():
    # a resumed request reads its messages back from the journal: a broken call is skipped
    call = {"id": "a", "function": {"name": "run_python", "arguments": '{"code": "m()"}'}}
    raised = {"role": "tool", "tool_call_id": "a", "content": "The code ran and raised X: y"}
    again = {**call, "id": "b"}
    refused = {"role": "tool", "tool_call_id": "b", "content": "Already answered: run_python"}
    broken = [{"role": "assistant", "tool_calls": [{"id": "c"}, {"function": {}},
                                                   {"id": "d", "function": {"name": "x",
                                                                            "arguments": "{"}}]}]
    messages = [{"role": "assistant", "tool_calls": [call]}, raised,
                {"role": "assistant", "tool_calls": [again]}, refused]
    assert small_steps.repeats_of_raised(messages) == 1
    assert small_steps.repeats_of_raised([*broken, *messages]) == 1
    ran = {**raised, "content": "3"}  # the same code that ran without an error: no attempt
    assert small_steps.repeats_of_raised([messages[0], ran, *messages[2:]]) == 0


def test_a_resumed_request_keeps_the_attempts_its_repeats_spent(world):
    # resumed after a card, a request reads its messages back: a raised run and a refused
    # repeat of it are two attempts spent, so the same code once more is the third
    session = notebook_session(world, None, Book())
    code = {"code": "x = mean([1, 2])"}
    call = {"id": "a", "function": {"name": "run_python", "arguments": json.dumps(code)}}
    messages = [{"role": "user", "content": "compute"},
                {"role": "assistant", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "a", "content": "The code ran and raised X: y"},
                {"role": "assistant", "tool_calls": [{**call, "id": "b"}]},
                {"role": "tool", "tool_call_id": "b", "content": "Already answered: run_python"}]
    request = Request(session, None, "compute")
    request.recall(messages)
    assert request.raised == 2 and request.attempts_left()
    third = request.repeated("run_python", code)
    assert third is not None and third.startswith(small_steps.NO_ATTEMPT)
    assert not request.attempts_left()


def test_an_answer_that_repeats_the_error_is_asked_for_the_fix_once(world):
    # DABench 207, 210: after code that raised, the 1.5B model's answer was the result itself
    book = Book()
    bad, good = "x = mean([1, 2])", "import statistics\nprint(statistics.mean([1, 2]))"
    echo = ("The code ran and raised NameError: name 'mean' is not defined\nThe line that "
            "raised (line 1): x = mean([1, 2])")
    script = [_run(bad), echo, _run(good), "The mean is 1.5.", echo]
    with ScriptedServer(script) as server:
        session = notebook_session(world, server, book)
        reply = run_shown(session, "Run code to compute the mean of 1 and 2.")
        notes = list(reply.notes)
        while reply.proposal is not None:  # run_python asks (a card) in this world
            session.show(reply.proposal.id)
            outcome = pending.decide(session, None, ok=True)
            reply = loop.resume(session, outcome.item, outcome.result)
            notes += reply.notes
        sent = server.chat_requests()
    assert reply.text == "The mean is 1.5." and book.ran == [bad, good]
    assert "the answer repeated the error; asked for the fix" in notes
    # the request after the echo: the one-off note, and a required run_python call
    assert sent[2]["messages"][-1]["content"].startswith("(Lily) Your last answer only "
                                                          "repeated the error.")
    assert admitted(sent[2]) == ["run_python"]
    assert sent[2]["temperature"] == 0.7  # sampled: at 0 the same code came again
    assert not any(m.get("content") == echo for m in session.conversation)  # not kept
    assert_consistent(session.conversation)


def test_an_answer_that_repeats_the_error_after_the_last_attempt_stands():
    raised = [{"role": "tool", "content": "The code ran and raised NameError: name 'm' is not "
                                          "defined"}] * small_steps.RUN_ATTEMPTS
    code = [{"type": "function", "function": {"name": "run_python", "parameters": {}}}]
    echo = "The code ran and raised NameError: name 'm' is not defined"
    assert small_steps.echoed_error(echo, raised[:1], code) is not None
    assert small_steps.echoed_error(echo, raised, code) is None  # no attempt left
    assert small_steps.echoed_error("The mean is 1.5.", raised[:1], code) is None
    assert small_steps.echoed_error(echo, [{"role": "tool", "content": "42"}], code) is None
    # DABench 300: the same code again was refused, then the answer repeated the error
    refused = {"role": "tool", "content": "Already answered: run_python {…} is the same code "
                                          "that raised above; it would raise the same way"}
    assert small_steps.echoed_error(echo, [*raised[:1], refused], code) is not None


def test_the_line_that_raised_comes_from_the_traceback_or_the_code():
    frames = ('Traceback (most recent call last):\n  File "<run_python code>", line 2, in <module>\n'
              '    x = df["a"]\n  File "/p/pandas/frame.py", line 4090, in __getitem__\n'
              "    indexer = self.columns.get_loc(key)\nKeyError: 'a'")
    error = notebook_tools.ErrorInfo(None, "", "KeyError", "'a'", frames)
    said = notebook_tools.raised(error, where=" in the sandbox")
    assert said.startswith("The code ran in the sandbox and raised KeyError: 'a'\n"
                           'The line that raised (line 2): x = df["a"]\n')
    assert notebook_tools.RAISED.match(said)
    syntax = notebook_tools.ErrorInfo(None, "", "SyntaxError", "invalid syntax",
                                      '  File "<run_python code>", line 1\n    x = (\n'
                                      "SyntaxError: invalid syntax")
    assert "(line 1): x = (" in notebook_tools.raised(syntax)
    bare = notebook_tools.ErrorInfo(None, "", "NameError", "", 'File "c", line 2, in <module>')
    assert "(line 2): b()" in notebook_tools.raised(bare, "a()\nb()")  # the code's own line


def test_run_python_is_refused_after_its_code_raised_the_allowed_times(world):
    session = notebook_session(world, None, Book())
    request = Request(session, None, "compute")
    for n in range(small_steps.RUN_ATTEMPTS):
        assert request.repeated("run_python", {"code": f"mean({n})"}) is None
        request.remember("run_python", {"code": f"mean({n})"},
                         "The code ran and raised NameError: x")
    request.raised = 0
    request.remember("run_python", {"code": "print(2)"}, "2")
    ran = request.repeated("run_python", {"code": "print(2)"})
    assert ran is not None and "Use that result" in ran  # code that ran: its result stands
    request.raised = small_steps.RUN_ATTEMPTS
    refused = request.repeated("run_python", {"code": "print(1)"})
    assert refused is not None and refused.startswith("Error: not run: the code raised 3 times")
    tool = [{"role": "tool", "content": "The code ran in the sandbox and raised KeyError: 'a'"},
            {"role": "tool", "content": "The code ran without an error."}]
    assert small_steps.raised_runs(tool) == 1


def test_after_a_failed_call_whose_error_names_the_call_that_works_only_that_is_admitted(world):
    # todos (look-up suite): inspect_variable on app.py, whose error says read(path="app.py");
    # free among the others, the 1.5B model called last_error
    (world.workspace / "app.py").write_text("x = 1  # TODO: handle empty input\n")
    script = ['{"name": "inspect_variable", "arguments": {"name": "app.py"}}',
              '{"name": "read", "arguments": {"path": "app.py"}}', "One: handle empty input."]
    with ScriptedServer(script) as server:
        session = Session(workspace=world.workspace,
                          env=world.env(server, LILY_PROFILE="small"), journal=False,
                          add_tools=lambda s: notebook_tools.register(
                              s.tools, Book({"x": 1}), lambda: True, lambda p: s.files.list(p)))
        reply = run_shown(session, "Which TODO comments does app.py have?")
        _, second, third = server.chat_requests()
    error = next(m["content"] for m in session.conversation if m["role"] == "tool")
    assert 'read it with read(path="app.py")' in error
    assert admitted(second) == ["read"] and "response_format" not in third
    assert reply.text == "One: handle empty input."
    step = [{"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "a"}}]},
            {"role": "tool", "tool_call_id": "1", "content": "fine; read(path=\"x\") works"}]
    assert small_steps.named_calls(step) == set()  # a call that worked names nothing


def test_after_a_failed_look_up_the_required_step_admits_run_python(world):
    script = ['{"name": "inspect_variable", "arguments": {"name": "sales"}}',
              '{"name": "run_python", "arguments": {"code": "print(len(sales))"}}']
    with ScriptedServer(script) as server:
        session = notebook_session(world, server, Book({"df": [1, 2]}))  # no sales
        reply = run_shown(session, "How many rows does sales have?")
        first, second = server.chat_requests()
    assert "run_python" not in names(first["tools"])  # the text did not ask for it
    assert "run_python" in admitted(second) and "inspect_variable" not in admitted(second)
    assert "answer" not in admitted(second)
    assert reply.proposal is not None and reply.proposal.tool == "run_python"


def test_the_look_ups_are_offered_only_when_they_could_find_something(world):
    # "What does CSV stand for?" in an empty notebook went to inspect_variable("csv")
    class Failed(Book):
        def last_error(self) -> notebook_tools.ErrorInfo:  # type: ignore[override]
            return notebook_tools.ErrorInfo(1, "x", "NameError", "name 'x' is not defined", "")

    look_ups = {"list_variables", "inspect_variable", "last_error"}
    text = "What does CSV stand for?"
    empty = names(Request(notebook_session(world, None, Book()), None, text).tool_specs())
    assert empty[0] == "answer" and not look_ups.intersection(empty)
    some = Request(notebook_session(world, None, Book({"df": 1})), None, text)
    assert look_ups - set(names(some.tool_specs())) == {"last_error"}
    failed = Request(notebook_session(world, None, Failed()), None, text)
    assert look_ups - set(names(failed.tool_specs())) == {"list_variables", "inspect_variable"}
    # the full profile and /model's budget (any request) offer them all
    full = Session(workspace=world.workspace, env=world.env(None), journal=False,
                   add_tools=lambda s: notebook_tools.register(s.tools, Book(), lambda: True))
    assert look_ups <= set(names(Request(full, None, text).tool_specs()))
    assert look_ups <= set(names(Request(notebook_session(world, None, Book()), None)
                                 .tool_specs()))
    assert notebook_tools.has_something(Book({"_private": 1}), "list_variables") is False
    assert notebook_tools.has_something(Book(), "read_cells") is True


@pytest.mark.parametrize("text", ["What is the mean fare in titanic.csv?",
                                  "Load sales.parquet and sum the amounts.",
                                  "Which DataFrame column has nulls?"])
def test_a_data_question_offers_run_python_first(world, text):
    session = notebook_session(world, None, Book())
    specs = Request(session, None, text).tool_specs()
    assert names(specs)[0] == "run_python" and names(specs)[-1] == "answer"
    said = specs[0]["function"]["description"]
    assert "variables are live" in said and "files are read by their names" in said


def test_a_question_on_a_data_file_the_workspace_holds_requires_code(world):
    """The file is there: the required first step admits only run_python (not answer, not
    inspect_variable on the file's name), and after code that raised, run_python again."""
    (world.workspace / "titanic.csv").write_text("Fare\n7.25\n71.28\n", encoding="utf-8")
    script = ['{"name": "run_python", "arguments": {"code": "print(mean(1))"}}',
              '{"name": "run_python", "arguments": {"code": "print(2)"}}',
              "@mean_fare[39.27]"]
    with ScriptedServer(script) as server:
        session = notebook_session(world, server, Book())
        reply = run_shown(session, "What is the mean fare? The data is in the file titanic.csv.")
        for _ in range(2):  # run_python asks (a card) in this world
            assert reply.proposal is not None
            session.show(reply.proposal.id)
            outcome = pending.decide(session, None, ok=True)
            reply = loop.resume(session, outcome.item, outcome.result)
        first, second, third = server.chat_requests()
    assert admitted(first) == ["run_python"] and admitted(second) == ["run_python"]
    assert names(first["tools"]) == ["run_python", "answer"]  # the look-ups compute nothing
    assert "response_format" not in third  # later steps are free
    assert reply.text.strip() == "@mean_fare[39.27]"
    # the file's start is attached to the request as sent; the restated request stops before
    asked = first["messages"][-1]["content"]
    assert "(Attached by Lily: the start of titanic.csv: 2 rows; its first lines:\nFare\n7.25" \
        in asked
    restated = third["messages"][-1]["content"]
    assert "The user asked: What is the mean fare?" in restated and "Attached" not in restated


def test_a_live_secret_in_a_previewed_data_file_is_masked(world):
    """The preview goes to the endpoint as the model's own read would: masked."""
    secret = "sk-live-0123456789abcdefghij"
    (world.workspace / "keys.csv").write_text(f"service,key\napi,{secret}\n", encoding="utf-8")
    with ScriptedServer(['{"name": "run_python", "arguments": {"code": "print(1)"}}']) as server:
        session = Session(workspace=world.workspace, journal=False, env=world.env(
            server, LILY_PROFILE="small", OPENAI_API_KEY=secret),
            add_tools=lambda s: notebook_tools.register(s.tools, Book(), lambda: True))
        run_shown(session, "How many services are in keys.csv?")
        first, = server.chat_requests()
    asked = first["messages"][-1]["content"]
    assert "Attached by Lily: the start of keys.csv" in asked and "api," in asked
    assert secret not in json.dumps(first)


def test_a_required_call_that_repeats_itself_is_asked_for_once_more(world):
    """The 1.5B model wrote the same imports until its length limit: the broken call is not
    kept, and the step is asked again with the same format and a one-off message."""
    (world.workspace / "2015.csv").write_text("Country,Score\nX,7.5\n", encoding="utf-8")
    loop_ = '{"name": "run_python", "arguments": {"code": "import pandas as pd\\n' + \
        "from sklearn.preprocessing import StandardScaler\\nfrom sklearn.impute import " \
        "SimpleImputer\\n" * 40
    script = [loop_, HELLO]
    with ScriptedServer(script) as server:
        session = notebook_session(world, server, Book())
        reply = run_shown(session, "Which country has the highest score in 2015.csv?")
        first, second = server.chat_requests()
    assert admitted(first) == admitted(second) == ["run_python"]
    assert second["messages"][-1]["content"].startswith("(Lily) Your last call ran on")
    assert first["temperature"] == 0 and second["temperature"] == 0.7  # sampled, not greedy
    assert "asked again" in " ".join(reply.notes)
    assert all("sklearn" not in json.dumps(m) for m in session.conversation)


def test_a_data_file_the_model_may_not_read_is_not_previewed(world):
    """The preview is read as the model's ``read`` would be: a denied file attaches nothing."""
    (world.workspace / "lily.toml").write_text('[tools]\ndeny = ["read"]\n', encoding="utf-8")
    (world.workspace / "salaries.csv").write_text("name,salary\nann,100\n", encoding="utf-8")
    with ScriptedServer(['{"name": "run_python", "arguments": {"code": "print(1)"}}']) as server:
        session = notebook_session(world, server, Book())
        run_shown(session, "What is the mean salary in salaries.csv?")
        first, = server.chat_requests()
    assert "ann,100" not in json.dumps(first) and "Attached by Lily" not in json.dumps(first)


@pytest.mark.parametrize("text", ["Save df to out.csv.",  # no such file: not a question on it
                                  "What is the mean fare in ../titanic.csv?"])
def test_a_data_file_the_workspace_does_not_hold_leaves_the_first_step_open(world, text):
    (world.workspace.parent / "titanic.csv").write_text("Fare\n7.25\n", encoding="utf-8")
    with ScriptedServer([HELLO]) as server:
        session = notebook_session(world, server, Book())
        run_shown(session, text)
        first, = server.chat_requests()
    assert "answer" in admitted(first) and len(admitted(first)) > 2


def test_a_question_on_another_file_the_workspace_holds_starts_with_the_file_tools(world):
    """app.py is there: the required first step admits the file tools the request asks for
    and load_skill (offered: "TODO" names a skill), not a cell or an answer; then it is
    free. A file the workspace does not hold, or a path out of it, leaves the step open."""
    (world.workspace / "app.py").write_text("# TODO: handle empty input\n", encoding="utf-8")
    (world.workspace.parent / "out.py").write_text("# TODO\n", encoding="utf-8")
    script = ['{"name": "read", "arguments": {"path": "app.py"}}', '"TODO: handle empty input"']
    with ScriptedServer(script) as server:
        session = notebook_session(world, server, Book(ns={"df": 1}))
        reply = run_shown(session, "Are there any TODO comments in app.py? Quote them.")
        first, second = server.chat_requests()
    assert sorted(admitted(first)) == ["load_skill", "read", "write"]  # list shows names
    assert {"propose_cell", "answer", "inspect_variable"} <= set(names(first["tools"]))
    assert "response_format" not in second and "handle empty input" in reply.text
    for text in ("Are there any TODO comments in new.py?", "Any TODO in ../out.py?",
                 "What is in /etc/hosts.txt?"):
        assert Request(session, None, text).leads == frozenset(), text
    assert Request(session, "plan_compiler", "Plan tests for app.py.").leads == frozenset()


def test_a_look_up_question_does_not_offer_run_python(world):
    session = notebook_session(world, None, Book())
    assert "run_python" not in names(Request(session, None, "What columns does df have?")
                                     .tool_specs())


def test_the_restated_request_keeps_the_answers_form_at_the_end_of_a_long_request():
    form = "@mean_fare[mean_fare_value] where mean_fare_value is rounded to two decimals."
    long = "Calculate the mean fare. " + "Use pandas, and no other method. " * 60 + form
    restated = small_steps.restated([{"role": "user", "content": long},
                                     {"role": "tool", "content": "34.6542"}], True)
    note = restated[-1]["content"]
    assert form in note and note.startswith("34.6542\n\n(The user asked: Calculate the mean")
    assert note.endswith("in the form the request asks for.)")
    assert len(small_steps.request_of([{"role": "user", "content": long}])) <= \
        small_steps.REQUEST_CHARS


def _run(code: str) -> str:
    """run_python's call as the required step's JSON."""
    return json.dumps({"name": "run_python", "arguments": {"code": code}})
