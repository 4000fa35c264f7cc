"""The Lily kernel through jupyter_client: routing, errors, widgets, completion, sessions.

``lily`` is a kernel shared by the tests that leave its session as they found
it (snapshot version 1, default agent); tests that reload, switch or
interrupt start their own kernels with ``start_kernel``.
"""
from __future__ import annotations

import ast
import json
import re
import time

import pytest
from kernel_support import ANSI, NO_MODEL_PREFIX, WIDGET_MIME, Kernel, Run, write_skill

from lily_kernel.session.journal import journal_path


def snapshot_names(kernel: Kernel) -> list[str]:
    run = kernel.ok("%%python\nimport lily\nprint(' '.join(lily.session().snapshot.names()))")
    return run.stdout.split()


def session_state(kernel: Kernel) -> dict:
    run = kernel.ok("%%python\nimport json, lily\n"
                    "s = lily.session().state()\n"
                    "print(json.dumps({k: s[k] for k in ('session_id', 'active_agent', "
                    "'snapshot_version', 'reload_count')}))")
    return json.loads(run.stdout)


def only_display(run: Run) -> dict:
    assert run.status == "ok", (run.code, run.reply, run.messages)
    outputs = run.outputs
    assert [m["msg_type"] for m in outputs] == ["display_data"], outputs
    return outputs[0]["content"]["data"]


# -- routing of each kind of cell ---------------------------------------------

def test_command_cell_is_answered_by_the_router(lily):
    data = only_display(lily.run("/help"))
    assert set(data) == {"text/plain", "text/markdown"}
    assert "/reload_skills" in data["text/markdown"]
    assert "/skills" in data["text/plain"]


def test_command_after_blank_lines_is_still_a_command(lily):
    data = only_display(lily.run("\n  \n/help plan_compiler"))
    assert "plan_compiler" in data["text/markdown"]


def test_percent_cells_go_to_ipython(lily):
    run = lily.ok("%pwd")
    assert run.result == {"text/plain": repr(str(lily.workspace))}


def test_bang_cells_go_to_the_shell(lily):
    run = lily.ok("!echo hi")
    assert run.stdout.strip() == "hi"


def test_python_cells_run_in_the_notebook_namespace(lily):
    assert lily.ok("%%python\nlily_test_value = 6").outputs == []
    run = lily.ok("%%python\nprint('seen', lily_test_value)\nlily_test_value * 7")
    assert run.stdout == "seen 6\n"
    assert run.result == {"text/plain": "42"}
    # the namespace is IPython's: a %-magic sees what %%python defined
    assert "lily_test_value" in lily.ok("%who").stdout


def test_python_cell_after_blank_lines(lily):
    assert lily.ok("\n\n%%python\n6 * 7").result == {"text/plain": "42"}


def test_python_errors_keep_their_traceback(lily):
    run = lily.run("%%python\n1 / 0")
    assert run.status == "error"
    assert run.errors[0]["ename"] == "ZeroDivisionError"


@pytest.mark.parametrize("cell", ["%%python\nx = 1\n\n1 / 0", "\n\n%%python\n1 / 0"])
def test_python_traceback_line_numbers_are_the_cells_own(lily, cell):
    """Issue 23.11: line N of a %%python traceback is line N of the cell the user sees."""
    run = lily.run(cell)
    line = cell.splitlines().index("1 / 0") + 1
    tb = "\n".join(run.errors[0]["traceback"])
    assert re.search(rf"\bline {line}\b", re.sub(r"\x1b\[[0-9;]*m", "", tb)), tb


def test_language_info_is_python_so_python_cells_highlight(lily):
    """Issue 23.11: a front end picks the editor mode from language_info (Markdown drew
    `[1, 2]` as a link); prose still goes to the agent, routing is Lily's."""
    info = lily.kc.kernel_info(reply=True, timeout=30)["content"]["language_info"]
    assert info["name"] == "python" and info["mimetype"] == "text/x-python"
    assert info["codemirror_mode"] == {"name": "ipython", "version": 3}
    assert info["pygments_lexer"] == "ipython3"
    assert lily.ok("%%python\n[1, 2]").result == {"text/plain": "[1, 2]"}


@pytest.mark.parametrize("prose", ["What is a skill?", "Summarise this notebook.\nThen list its cells.",
                                   "  hello /skills", "%lily what is a skill?",
                                   "%%lily\nwhat is a skill?"])
def test_prose_goes_to_the_agent_which_names_the_variables(lily, prose):
    line = lily.run(prose).error_line()
    assert line.startswith(NO_MODEL_PREFIX), line
    assert "OPENAI_API_KEY" in line and "OPENAI_BASE_URL" in line


# -- errors: one line, exact messages, "run all" stops ----------------------------

@pytest.mark.parametrize("code, expected", [
    ("/foo", "Error: unknown command /foo. Run /help for the list of commands."),
    ("/skill", "Error: /skill requires a skill name."),
    ("/skill x", "Error: no skill named 'x' in this session's snapshot (version 1)."),
    ("/skil plan_compiler", "Error: unknown command /skil. Run /help for the list of commands."),
    ("/skills everything", "Error: /skills takes no arguments but --all, not 'everything'."),
])
def test_command_errors_are_one_exact_line(lily, code, expected):
    run = lily.run(code)
    assert run.error_line() == expected
    assert [m["msg_type"] for m in run.outputs] == ["error"]
    assert run.reply["status"] == "error"
    assert len(run.reply["traceback"]) == 1 and not ANSI.search(run.reply["traceback"][0])


@pytest.mark.parametrize("failing", ["/foo", "What is a skill?"])
def test_a_failing_cell_aborts_the_queued_next_cell(lily, failing):
    first = lily.kc.execute(failing)
    second = lily.kc.execute("/help")
    assert lily.reply(first)["content"]["status"] == "error"
    assert lily.reply(second)["content"]["status"] == "aborted"
    # and the kernel goes on: the next cell, sent on its own, runs
    assert only_display(lily.run("/help"))


# -- /skills: an HTML table that survives a restart, and a live filter beside it -------

def widget_models(run: Run) -> dict[str, dict]:
    """comm_id -> widget state, for the widget models opened by the cell."""
    return {m["content"]["comm_id"]: m["content"]["data"]["state"]
            for m in run.of_type("comm_open") if m["content"]["target_name"] == "jupyter.widget"}


def skills_displays(run: Run) -> tuple[dict, dict]:
    """The two displays of /skills: its live filter (a widget), then the table."""
    assert run.status == "ok", (run.code, run.reply, run.messages)
    assert [m["msg_type"] for m in run.outputs] == ["display_data"] * 2, run.outputs
    live, table = (m["content"]["data"] for m in run.outputs)
    assert set(live) == {WIDGET_MIME, "text/plain"} and live["text/plain"] == ""
    assert set(table) == {"text/html", "text/plain"}  # no widget: restorable as it is
    return live, table


def type_into(kernel: Kernel, comm_id: str, text: str) -> dict[str, str]:
    """Set a Text widget's value as a front end does; return comm_id -> new HTML values."""
    msg = kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {
        "method": "update", "state": {"value": text}, "buffer_paths": []}})
    kernel.kc.shell_channel.send(msg)
    return {m["content"]["comm_id"]: m["content"]["data"]["state"]["value"]
            for m in kernel.iopub_until_idle(msg["header"]["msg_id"])
            if m["msg_type"] == "comm_msg" and "value" in m["content"]["data"].get("state", {})}


def test_skills_table_is_html_and_its_filter_a_widget_apart(start_kernel):
    kernel = start_kernel()
    names = snapshot_names(kernel)
    assert "plan_compiler" in names and "todo_scan" in names
    run = kernel.run("/skills")
    live, data = skills_displays(run)
    models = widget_models(run)
    model_id = live[WIDGET_MIME]["model_id"]
    assert live[WIDGET_MIME]["version_major"] == 2
    assert models[model_id]["_model_name"] == "VBoxModel"
    kids = [ref.removeprefix("IPY_MODEL_") for ref in models[model_id]["children"]]
    assert [models[k]["_model_name"] for k in kids] == ["TextModel", "HTMLModel"]
    assert models[kids[1]]["value"] == ""  # nothing filtered yet: the table shows itself
    for name in names:
        assert name in data["text/html"], name
        assert name in data["text/plain"], name
    assert "<table" in data["text/html"]
    assert "/plan" in data["text/plain"] and "/todos" in data["text/plain"]
    key = re.search(r"lily-skills-([0-9a-f]{12})", data["text/html"]).group(1)

    # typing in the filter: the widget shows the matching rows and hides the static table
    shown = type_into(kernel, kids[0], "todo")[kids[1]]
    assert "todo_scan" in shown and "plan_compiler" not in shown
    assert f".lily-skills-{key} {{display: none}}" in shown
    assert type_into(kernel, kids[0], "")[kids[1]] == ""  # cleared: the static table again

    # shown again: a filter of its own (issue 23.4), which starts empty and hides only
    # its own table; typing in the first one leaves the second alone
    type_into(kernel, kids[0], "plan")
    again = kernel.run("/skills")
    live2, data2 = skills_displays(again)
    models2 = widget_models(again)
    model2 = live2[WIDGET_MIME]["model_id"]
    assert model2 != model_id and model2 in models2
    kids2 = [ref.removeprefix("IPY_MODEL_") for ref in models2[model2]["children"]]
    assert models2[kids2[0]]["value"] == "" and models2[kids2[1]]["value"] == ""
    key2 = re.search(r"lily-skills-([0-9a-f]{12})", data2["text/html"]).group(1)
    assert key2 != key
    assert data2["text/html"].replace(key2, key) == data["text/html"]
    updates = type_into(kernel, kids2[0], "todo")
    assert kids[1] not in updates and kids2[1] in updates  # only the second table changed
    assert f".lily-skills-{key2} {{display: none}}" in updates[kids2[1]]
    assert f".lily-skills-{key} " not in updates[kids2[1]]
    # its heading counts what it shows
    assert re.search(r"1 of \d+ skills match “todo”", updates[kids2[1]])
    assert "no skill matches “zzz-none”" in type_into(kernel, kids2[0], "zzz-none")[kids2[1]]


def test_after_skills_output_keeps_its_order(lily):
    """/skills skips the stream flush of its displays; later cells flush as usual."""
    skills_displays(lily.run("/skills"))
    run = lily.ok("%%python\nfrom IPython.display import display\n"
                  "print('FIRST', flush=False)\ndisplay('SECOND')")
    assert [m["msg_type"] for m in run.outputs] == ["stream", "display_data"], run.outputs


def test_skills_all_lists_excluded_skills_with_reasons(start_kernel, world):
    write_skill(world.ws_skills, "broken", "invocation_mode: bogus")
    write_skill(world.ws_skills, "needs_tool", "invocation_mode: tool_dispatch\n"
                                               "command_tool: no_such_tool")
    kernel = start_kernel(world=world)

    plain = kernel.run("/skills")
    _, data = skills_displays(plain)
    assert "broken" not in data["text/html"] and "needs_tool" not in data["text/html"]
    assert "2 skill(s) excluded" in data["text/plain"]

    run = kernel.run("/skills --all")
    live, data = skills_displays(run)
    assert live[WIDGET_MIME]["model_id"] in widget_models(run)
    for text in (data["text/html"], data["text/plain"]):
        assert "broken" in text and "needs_tool" in text
        assert "invocation_mode" in text and "bogus" in text
        assert "no_such_tool" in text
        assert "skill_error" in text
        assert "plan_compiler" in text  # the included skills are listed too


def test_help_is_markdown(lily):
    data = only_display(lily.run("/help"))
    assert data["text/markdown"].lstrip().startswith("#")
    for command in ("/skills", "/skill", "/help", "/agent", "/reload_skills", "/new", "/model"):
        assert command in data["text/markdown"], command
    skill = only_display(lily.run("/help plan_compiler"))
    assert "prompt_rewrite" in skill["text/markdown"] and "/plan" in skill["text/markdown"]


# -- completion, inspection, is_complete -------------------------------------------

@pytest.mark.parametrize("code, matches, start", [
    ("/sk", {"/skill", "/skills"}, 0),
    ("/reload", {"/reload_skills", "/reload_persona"}, 0),
    ("/to", {"/todos"}, 0),  # a skill's alias
    ("/pl", {"/plan"}, 0),
    ("/skill pla", {"plan_compiler"}, 7),
    ("/skill todo", {"todo_scan"}, 7),
    ("/help plan", {"plan_compiler"}, 6),
    ("/help /rel", {"/reload_skills", "/reload_persona"}, 6),
    ("/agent rev", {"reviewer"}, 7),
    ("/skills --a", {"--all"}, 8),
    ("/zzz", set(), 0),
    ("\n/sk", {"/skill", "/skills"}, 1),
])
def test_command_completion(lily, code, matches, start):
    reply = lily.complete(code)
    assert reply["status"] == "ok"
    assert set(reply["matches"]) == matches
    if matches:
        assert (reply["cursor_start"], reply["cursor_end"]) == (start, len(code))


def test_completion_on_the_first_line_of_a_multiline_command(lily):
    code = "/skill pla\nbody text"
    reply = lily.complete(code, cursor_pos=len("/skill pla"))
    assert reply["matches"] == ["plan_compiler"]


def test_a_variable_argument_completes_the_notebooks_variables(lily):
    lily.ok("%%python\nsales_df = [1]\nsales_total = 2\n_sales_private = 3\nsales_api_key = 'x'\n"
            "def sales_fn(): pass")
    reply = lily.complete("/explore sal")
    assert set(reply["matches"]) == {"sales_df", "sales_total"}  # no private, secret or callable
    assert (reply["cursor_start"], reply["cursor_end"]) == (9, 12)


@pytest.mark.parametrize("code, matches", [
    ("/model temp", {"temperature="}),
    ("/model gpt-4o timeout=5 max_r", {"max_retries="}),
    ("/model timeout=", set()),
])
def test_model_completes_setting_names(lily, code, matches):
    assert set(lily.complete(code)["matches"]) == matches


def test_a_missing_variable_fails_before_the_model_is_asked(lily):
    run = lily.run("/explore no_such_frame")
    assert run.status == "error"
    # the lily fixture has no model: reaching the agent would say "no model is configured"
    assert run.error_line().startswith("Error: no variable named 'no_such_frame' in this notebook")


def test_agent_completion_lists_every_agent(lily):
    assert {"default", "reviewer"} <= set(lily.complete("/agent ")["matches"])


@pytest.mark.parametrize("code, match", [("%%python\nimpo", "import"), ("%pw", "%pwd")])
def test_other_cells_complete_as_ipython(lily, code, match):
    reply = lily.complete(code)
    assert reply["status"] == "ok" and match in reply["matches"]


def test_inspect_a_command(lily):
    reply = lily.inspect("/help")
    assert reply["status"] == "ok" and reply["found"]
    assert "/help [skill]" in reply["data"]["text/markdown"]
    assert "/help [skill]" in reply["data"]["text/plain"]


@pytest.mark.parametrize("code", ["/plan", "/skill plan_compiler", "/help plan_compiler"])
def test_inspect_an_alias_or_skill(lily, code):
    reply = lily.inspect(code)
    assert reply["found"], reply
    assert "plan_compiler" in reply["data"]["text/markdown"]
    assert "prompt_rewrite" in reply["data"]["text/plain"]


def test_inspect_unknown_command_is_not_found(lily):
    reply = lily.inspect("/nope")
    assert reply["status"] == "ok" and not reply["found"] and reply["data"] == {}


def test_inspect_python_is_ipython(lily):
    reply = lily.inspect("%%python\nprint")
    assert reply["status"] == "ok" and reply["found"]
    assert "Signature" in ANSI.sub("", reply["data"]["text/plain"])


@pytest.mark.parametrize("code, status", [
    ("/skills", "complete"),
    ("/plan\nturn this into a plan:\n", "complete"),
    ("/skill", "complete"),  # runs, and fails with its own message
    ("/help plan_compiler", "complete"),
    ("Tell me about\n", "complete"),
    ("%%python\nif True:", "incomplete"),
    ("%%python\nx = 1\n", "complete"),
    ("%%python\n1 +", "invalid"),
])
def test_is_complete(lily, code, status):
    assert lily.is_complete(code)["status"] == status


# -- the snapshot: /reload_skills is the only way in --------------------------------

def test_reload_skills_makes_a_new_skill_appear(start_kernel, world):
    kernel = start_kernel(world=world)
    assert "fresh_skill" not in skills_displays(kernel.run("/skills"))[1]["text/html"]

    write_skill(world.ws_skills, "fresh_skill", "summary: Brand new.\ncommand: fresh")
    assert "fresh_skill" not in skills_displays(kernel.run("/skills"))[1]["text/html"]
    assert kernel.run("/help fresh_skill").error_line() == (
        "Error: no skill named 'fresh_skill' in this session's snapshot (version 1).")
    assert kernel.run("/fresh").error_line() == (
        "Error: unknown command /fresh. Run /help for the list of commands.")

    notice = only_display(kernel.run("/reload_skills"))
    assert "snapshot version 2" in notice["text/plain"]
    _, data = skills_displays(kernel.run("/skills"))
    assert "fresh_skill" in data["text/html"] and "Brand new." in data["text/plain"]
    assert "fresh_skill" in only_display(kernel.run("/help fresh_skill"))["text/markdown"]
    assert "/fresh" in kernel.complete("/fre")["matches"]
    state = session_state(kernel)
    assert (state["snapshot_version"], state["reload_count"]) == (2, 1)


# -- commands never reach a model ---------------------------------------------------

MODEL_FREE_COMMANDS = [
    "/help", "/help plan_compiler", "/help /skills", "/skills", "/skills --all",
    "/agent", "/agent reviewer", "/agent default", "/reload_skills", "/reload_persona",
    "/model temperature=0.2", "/todos", "/skill todo_scan",
    "/nope", "/skill", "/skill nothing_here", "/agent nobody", "/confirm", "/cancel",
    "/model api_key=sk-leak", "/new",
]


def test_commands_never_contact_the_model_endpoint(start_kernel, recorder):
    secret = "sk-lily-test-secret-0123456789"
    kernel = start_kernel(OPENAI_BASE_URL=recorder.url, OPENAI_API_KEY=secret)
    outcomes = {code: kernel.run(code).status for code in MODEL_FREE_COMMANDS}
    assert outcomes["/help"] == "ok" and outcomes["/nope"] == "error"
    time.sleep(0.2)
    assert recorder.connections == [], "a command cell opened a connection to the model endpoint"

    # /model alone asks the endpoint what it lists (GET /v1/models, the window: never the
    # model, docs/agent.md#the-endpoints-models); this one never answers, and /model still shows
    model = only_display(kernel.run("/model"))
    assert recorder.url in model["text/plain"]
    assert "Models at the endpoint" not in model["text/plain"]
    assert secret not in json.dumps(model)
    journals = list((kernel.workspace / ".lily" / "journal").glob("*.jsonl"))
    assert journals
    for path in journals:
        text = path.read_text()
        assert secret not in text and "sk-leak" not in text

    # the recorder does see a connection when one is made from the kernel
    kernel.ok("%%python\nimport socket\n"
              f"socket.create_connection(('127.0.0.1', {recorder.port}), timeout=5).close()")
    assert recorder.wait_for(1)


# -- interrupt ------------------------------------------------------------------------

SLOW_TOOL = ("%%python\nimport lily, time\n@lily.tool\n"
             "def slow_tool(input: str = ''):\n    time.sleep(30)\n    return 'done'")


def test_interrupt_stops_a_running_command(start_kernel, world):
    write_skill(world.ws_skills, "slow", "summary: Sleeps.\ninvocation_mode: tool_dispatch\n"
                                         "command: slow\ncommand_tool: slow_tool")
    kernel = start_kernel(world=world)
    assert "slow" not in snapshot_names(kernel)  # its tool is not registered yet
    kernel.ok(SLOW_TOOL)
    kernel.ok("/reload_skills")
    assert "slow" in snapshot_names(kernel)

    msg_id = kernel.kc.execute("/slow")
    time.sleep(0.5)
    kernel.km.interrupt_kernel()
    # a hang guard, not a time limit (bench/limits.py interrupt measures that): the tool
    # sleeps 30 s and would end the cell "ok", so the error below is the interrupt's
    reply = kernel.reply(msg_id, timeout=25)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["traceback"] == ["Error: interrupted."]
    errors = [m["content"] for m in kernel.iopub_until_idle(msg_id) if m["msg_type"] == "error"]
    assert [e["traceback"] for e in errors] == [["Error: interrupted."]]

    assert kernel.km.is_alive()
    assert only_display(kernel.run("/help"))
    assert session_state(kernel)["snapshot_version"] == 2


# -- sessions: one per kernel ------------------------------------------------------------

def test_two_kernels_have_separate_sessions(start_kernel):
    one, two = start_kernel(), start_kernel()
    first, second = session_state(one), session_state(two)
    assert first["session_id"] != second["session_id"]

    only_display(one.run("/agent reviewer"))
    only_display(one.run("/reload_skills"))
    first, after = session_state(one), session_state(two)
    assert (first["active_agent"], first["snapshot_version"]) == ("reviewer", 2)
    assert (after["active_agent"], after["snapshot_version"]) == ("default", 1)
    assert after["session_id"] == second["session_id"]
    listing = only_display(two.run("/agent"))["text/plain"]
    assert "default" in listing and "reviewer" in listing

    # a tool registered in one notebook is not a tool of the other
    one.ok("%%python\nimport lily\n@lily.tool\ndef only_here():\n    return 1")
    check = "%%python\nimport lily\nprint('only_here' in lily.session().tools.names())"
    assert one.ok(check).stdout.strip() == "True"
    assert two.ok(check).stdout.strip() == "False"


def test_new_starts_a_new_session(start_kernel):
    kernel = start_kernel()
    only_display(kernel.run("/agent reviewer"))
    before = session_state(kernel)
    only_display(kernel.run("/new"))
    after = session_state(kernel)
    assert after["session_id"] != before["session_id"]
    assert (after["active_agent"], after["snapshot_version"]) == ("default", 1)


def test_jpy_session_name_names_the_journal(start_kernel):
    kernel = start_kernel(JPY_SESSION_NAME="analysis.ipynb")
    only_display(kernel.run("/help"))
    journal = journal_path(kernel.workspace, "analysis.ipynb")
    assert journal.is_file(), list((kernel.workspace / ".lily").rglob("*"))
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert records[0]["event"] == "session_created"
    assert records[0]["label"] == "analysis.ipynb"
    assert records[0]["session_id"] == session_state(kernel)["session_id"]
    assert any(r.get("event") == "command" and r.get("command") == "/help" for r in records)


#: What a Lily kernel imports of Lily at start: the kernel, the integration that installs
#: Lily in the shell (with the cell events, the figure descriptions and the %%python cells'
#: journal hook, standard library only), the command table (which cells are commands), the errors and
#: the workspace paths. The rest of the core loads with the first cell that needs it
#: (docs/architecture.md#import-rules).
KERNEL_START = {"lily_kernel", "lily_kernel.commands", "lily_kernel.commands.table",
                "lily_kernel.errors", "lily_kernel.jupyter", "lily_kernel.jupyter.cell_events",
                "lily_kernel.jupyter.integration",
                "lily_kernel.jupyter.kernel", "lily_kernel.jupyter.plots",
                "lily_kernel.jupyter.python_cells", "lily_kernel.redaction",
                "lily_kernel.skills", "lily_kernel.skills.paths"}


def test_the_kernel_starts_without_the_core_and_loads_it_on_the_first_lily_cell(start_kernel):
    """At start (a %%python cell runs no Lily code) the kernel has imported only
    KERNEL_START of Lily, and neither PyYAML nor the session; the first command loads the
    core, and completion works from there."""
    kernel = start_kernel()
    probe = ("%%python\nimport sys\n"
             "sorted(m for m in sys.modules if m.startswith(('lily', 'yaml')))")
    loaded = set(ast.literal_eval(kernel.ok(probe).result["text/plain"]))
    assert loaded == KERNEL_START, sorted(loaded ^ KERNEL_START)
    assert "/skills" in only_display(kernel.run("/help"))["text/plain"]
    after = set(ast.literal_eval(kernel.ok(probe).result["text/plain"]))
    assert {"lily_kernel.jupyter.cells", "lily_kernel.session.session", "yaml"} <= after
    assert "/help" in kernel.complete("/he")["matches"]
