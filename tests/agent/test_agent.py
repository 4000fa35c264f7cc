"""The agent loop (docs/agent.md) against a real ScriptedServer over HTTP on 127.0.0.1.

Every test runs Lily's real loop (``loop.run`` with a real :class:`Session`)
and the real ``openai`` client against :class:`lily_kernel.testing.server.ScriptedServer`,
then reads what the server was sent. Nothing is mocked; nothing leaves
127.0.0.1. Skill roots, persona and workspace live under ``tmp_path``; the
bundled skills are the repository's own.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_support import World, assert_consistent, run_command

from lily_kernel.agent import loop, prompt
from lily_kernel.agent.prompt import index_line, skills_index
from lily_kernel.commands.results import Answer, ToolOutput
from lily_kernel.errors import AgentError
from lily_kernel.session import journal

pytestmark = pytest.mark.usefixtures("no_machine_model")

REPO = Path(__file__).resolve().parents[2]
SECRET_KEY = "sk-lily-test-SECRET-7f3a9c0d1e2b"


# -- fixtures and helpers --------------------------------------------------------------







@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def write_skill(root: Path, name: str, frontmatter: str, body: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\n{frontmatter.strip()}\n---\n{body}", encoding="utf-8")
    return folder


def call(name: str, args, id: str | None = None) -> dict:
    c = {"name": name, "arguments": args}
    if id:
        c["id"] = id
    return c


def calls(*cs: dict) -> dict:
    return {"tool_calls": list(cs)}


def results_by_id(messages: list[dict]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m.get("role") == "tool"}


def offered(request: dict) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


def system_text(request: dict) -> str:
    first = request["messages"][0]
    assert first["role"] == "system"
    return first["content"]


def index_names(system: str) -> list[str]:
    section = system.split("## Skills\n", 1)[1]
    return [line[2:].split(":", 1)[0] for line in section.splitlines() if line.startswith("- ")]


# -- the system context: Lily's instructions, persona, skills index ---------------------

PERSONA = {"SOUL.md": "SOUL-MARK soul", "IDENTITY.md": "IDENTITY-MARK identity",
           "USER.md": "USER-MARK user", "AGENTS.md": "AGENTS-MARK agents"}


def test_system_message_is_instructions_then_persona_then_index(world, server):
    persona = world.workspace / "persona"
    persona.mkdir()
    for name in reversed(list(PERSONA)):  # written in reverse: order must not follow the disk
        (persona / name).write_text(PERSONA[name] + "\n", encoding="utf-8")
    write_skill(world.skills, "zeta-skill", "summary: Zeta summary line.", "ZETA-BODY-MARK\n")
    write_skill(world.skills, "alpha-skill", "description: Alpha described.", "ALPHA-BODY-MARK\n")
    write_skill(world.skills, "hidden-skill",
                "summary: HIDDEN-SUMMARY-MARK\ndisable-model-invocation: true", "HIDDEN-BODY\n")
    # the user's own persona folder (a workspace's persona/ waits for /trust: issue 41)
    session = world.session(server, LILY_PERSONA_DIR=str(persona))
    server.add("hello")
    reply = loop.run(session, "hi")
    assert reply.text == "hello" and reply.skill is None

    [request] = server.chat_requests()
    system = system_text(request)
    marks = ["You are Lily", "load_skill first", "SOUL-MARK", "IDENTITY-MARK", "USER-MARK",
             "AGENTS-MARK", "\n## Skills\n"]
    positions = [system.find(m) for m in marks]
    assert -1 not in positions, dict(zip(marks, positions))
    assert positions == sorted(positions), dict(zip(marks, positions))
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][1]["content"] == "hi"

    snap = session.snapshot
    invocable = [s for s in snap.skills if s.model_invocable]
    names = index_names(system)
    assert names == sorted(names) == [s.name for s in invocable]
    assert {"alpha-skill", "zeta-skill"} <= set(names)
    assert "hidden-skill" not in system and "HIDDEN-SUMMARY-MARK" not in system
    # name and summary only: each index line is exactly "- name: summary", no body
    section = system.split("\n## Skills\n", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("- ")]
    assert lines == [f"- {s.name}: {' '.join(s.summary.split())}" for s in invocable]
    assert "- alpha-skill: Alpha described." in lines
    for skill in snap.skills:
        assert skill.body.strip()[:60] not in system, skill.name
    assert "ZETA-BODY-MARK" not in system and "ALPHA-BODY-MARK" not in system


def test_index_comes_from_the_snapshot_not_the_disk(world, server):
    session = world.session(server)
    write_skill(world.skills, "late-skill", "summary: Added after the session started.", "Late.\n")
    server.add("ok")
    loop.run(session, "hi")
    assert "late-skill" not in system_text(server.chat_requests()[0])


def test_small_index_budget_shows_a_visible_note(world):
    for i in range(30):
        write_skill(world.skills, f"gen-skill-{i:02d}", f"summary: Generated skill number {i} "
                                                       "that does a realistic amount of work.", "x\n")
    snap = world.session(None).snapshot
    invocable = [s.name for s in snap.skills if s.model_invocable]
    full = skills_index(snap)
    assert "more skill" not in full and index_names("\n" + full) == invocable

    budget = 600
    cut = skills_index(snap, budget=budget)
    shown = index_names("\n" + cut)
    assert 0 < len(shown) < len(invocable)
    assert shown == invocable[:len(shown)]  # a prefix, in name order
    left = len(invocable) - len(shown)
    note = f"(+{left} more skills not listed"
    assert note in cut
    body, _, tail = cut.partition(note)
    assert len(body) <= budget
    assert tail.strip().endswith(")")
    omitted = invocable[len(shown):]
    assert "Not listed: " + ", ".join(omitted) + "." in tail  # the note names each one
    # the lines kept are the most that fit: one more would pass the budget
    next_line = index_line(invocable[len(shown)], snap.get(invocable[len(shown)]).summary)
    assert len(body) + len(next_line) > budget


# -- load_skill -------------------------------------------------------------------------

def test_load_skill_returns_the_snapshot_body_after_the_file_changed(world, server):
    skill_md = write_skill(world.skills, "alpha", "summary: Alpha.", "OLD-BODY-MARK\n") / "SKILL.md"
    session = world.session(server)
    skill_md.write_text("---\nsummary: Alpha.\n---\nNEW-BODY-MARK\n", encoding="utf-8")
    server.add(calls(call("load_skill", {"name": "alpha"}, "c1")), "done")
    reply = loop.run(session, "use alpha")
    assert (reply.text, reply.skill) == ("done", "alpha")
    second = server.chat_requests()[1]
    result = results_by_id(second["messages"])["c1"]
    assert "OLD-BODY-MARK" in result and "NEW-BODY-MARK" not in result
    assert "NEW-BODY-MARK" not in json.dumps(server.chat_requests())


@pytest.mark.parametrize("same_turn", [False, True], ids=["next-turn", "same-turn"])
def test_a_second_different_skill_is_refused(world, server, same_turn):
    write_skill(world.skills, "alpha", "summary: Alpha.", "ALPHA-BODY\n")
    write_skill(world.skills, "beta", "summary: Beta.", "BETA-BODY\n")
    session = world.session(server)
    first, second = call("load_skill", {"name": "alpha"}, "c1"), call("load_skill", {"name": "beta"}, "c2")
    if same_turn:
        server.add(calls(first, second), "answer")
    else:
        server.add(calls(first), calls(second), "answer")
    reply = loop.run(session, "do both")
    assert (reply.text, reply.skill) == ("answer", "alpha")
    results = results_by_id(server.chat_requests()[-1]["messages"])
    assert "ALPHA-BODY" in results["c1"]
    assert results["c2"].startswith("Error:") and "'alpha'" in results["c2"]
    assert "BETA-BODY" not in json.dumps(server.chat_requests())
    assert_consistent(session.conversation)


def test_loading_the_same_skill_twice_is_fine(world, server):
    write_skill(world.skills, "alpha", "summary: Alpha.", "ALPHA-BODY\n")
    session = world.session(server)
    server.add(calls(call("load_skill", {"name": "alpha"}, "c1")),
               calls(call("load_skill", {"name": "alpha"}, "c2")), "answer")
    reply = loop.run(session, "alpha twice")
    assert (reply.text, reply.skill) == ("answer", "alpha")
    results = results_by_id(server.chat_requests()[-1]["messages"])
    # the second load answers "already loaded" without the body (docs/agent.md#loop-hygiene)
    assert "ALPHA-BODY" in results["c1"] and "ALPHA-BODY" not in results["c2"]
    assert "already loaded" in results["c2"]
    assert not results["c2"].startswith("Error:")


def test_unknown_skill_is_a_tool_error_and_declares_nothing(world, server):
    session = world.session(server)
    server.add(calls(call("load_skill", {"name": "no-such-skill"}, "c1")), "fine")
    reply = loop.run(session, "x")
    assert (reply.text, reply.skill) == ("fine", None)
    assert results_by_id(server.chat_requests()[-1]["messages"])["c1"].startswith("Error:")


def test_owner_only_skill_is_refused_to_the_model_but_runs_via_slash_skill(world, server):
    write_skill(world.skills, "owner-skill", "summary: Owner only.\ndisable-model-invocation: true",
                "OWNER-BODY-MARK\n")
    session = world.session(server)
    server.add(calls(call("load_skill", {"name": "owner-skill"}, "c1")), "refused, fine")
    reply = loop.run(session, "use owner-skill")
    assert reply.skill is None
    result = results_by_id(server.chat_requests()[-1]["messages"])["c1"]
    assert result.startswith("Error:") and "/skill owner-skill" in result
    assert "OWNER-BODY-MARK" not in json.dumps(server.chat_requests())

    server.add({"expect": {"contains": "OWNER-BODY-MARK"},
                **calls(call("load_skill", {"name": "owner-skill"}, "c2"))}, "owner done")
    reply = run_command(session, "/skill owner-skill apply it to INPUT-MARK")
    assert isinstance(reply, Answer)
    assert (reply.text, reply.skill) == ("owner done", "owner-skill")
    last = server.chat_requests()[-1]["messages"]
    assert "INPUT-MARK" in [m for m in last if m["role"] == "user"][-1]["content"]
    # the forced skill is not refused: its body is already in the request, so loading it
    # again answers "already loaded" (docs/agent.md#loop-hygiene)
    assert "already loaded" in results_by_id(last)["c2"]


# -- /skill and tool_dispatch -----------------------------------------------------------

def test_tool_dispatch_skill_makes_no_model_request(world, server):
    (world.workspace / "notes.py").write_text("x = 1  # TODO: DISPATCH-MARK\n", encoding="utf-8")
    session = world.session(server)
    for cell in ("/todos", "/skill todo_scan"):
        result = run_command(session, cell)
        assert isinstance(result, ToolOutput) and result.tool == "scan_todos"
        assert "DISPATCH-MARK" in result.value
    assert server.requests == []


def test_slash_skill_plan_compiler_sends_body_and_input(world, server):
    session = world.session(server)
    body = session.snapshot.get("plan_compiler").body.strip()
    server.add("# Plan\n\n## Objective\nShip it.")
    reply = run_command(session, "/skill plan_compiler ship the PLAN-INPUT-MARK feature")
    assert isinstance(reply, Answer)
    assert (reply.text, reply.skill) == ("# Plan\n\n## Objective\nShip it.", "plan_compiler")
    [sent] = server.chat_requests()
    user = sent["messages"][-1]
    assert user["role"] == "user"
    assert body in user["content"] and "ship the PLAN-INPUT-MARK feature" in user["content"]
    assert body not in system_text(sent)


# -- read_skill_file --------------------------------------------------------------------

def test_read_skill_file_is_confined_to_the_loaded_skills_references(world, server, tmp_path):
    folder = write_skill(world.skills, "alpha", "summary: Alpha.", "ALPHA-BODY\n")
    (folder / "references").mkdir()
    (folder / "references" / "guide.md").write_text("GUIDE-MARK\n", encoding="utf-8")
    (folder / "private.md").write_text("PRIVATE-MARK\n", encoding="utf-8")
    outside = tmp_path / "outside.md"
    outside.write_text("OUTSIDE-MARK\n", encoding="utf-8")
    (folder / "references" / "link.md").symlink_to(folder / "private.md")
    (folder / "references" / "far.md").symlink_to(outside)
    session = world.session(server)
    server.add(
        calls(call("read_skill_file", {"path": "references/guide.md"}, "before")),
        calls(call("load_skill", {"name": "alpha"}, "load"),
              call("read_skill_file", {"path": "references/guide.md"}, "ok"),
              call("read_skill_file", {"path": "guide.md"}, "short"),
              call("read_skill_file", {"path": "references/../private.md"}, "dotdot"),
              call("read_skill_file", {"path": "../../../outside.md"}, "up"),
              call("read_skill_file", {"path": str(outside)}, "abs"),
              call("read_skill_file", {"path": "private.md"}, "sibling"),
              call("read_skill_file", {"path": "references/link.md"}, "link"),
              call("read_skill_file", {"path": "references/far.md"}, "far")),
        "done")
    reply = loop.run(session, "read")
    assert (reply.text, reply.skill) == ("done", "alpha")
    results = results_by_id(server.chat_requests()[-1]["messages"])
    assert results["before"].startswith("Error:") and "load_skill" in results["before"]
    assert results["ok"].strip() == "GUIDE-MARK" and results["short"].strip() == "GUIDE-MARK"
    for key in ("dotdot", "up", "abs", "sibling", "link", "far"):
        assert results[key].startswith("Error:"), (key, results[key])
    sent = json.dumps(server.chat_requests())
    assert "PRIVATE-MARK" not in sent and "OUTSIDE-MARK" not in sent


# -- tool policy ------------------------------------------------------------------------

def test_unknown_tool_is_a_tool_error_and_the_loop_goes_on(world, server):
    session = world.session(server)
    server.add(calls(call("no_such_tool", {}, "c1")), "carried on")
    reply = loop.run(session, "x")
    assert reply.text == "carried on" and reply.tools_used == []
    result = results_by_id(server.chat_requests()[-1]["messages"])["c1"]
    assert result.startswith("Error:") and "no_such_tool" in result


@pytest.mark.parametrize("how", ["env-deny", "toml-deny", "deny-wins-over-allow"])
def test_denied_tool_is_not_offered_and_refused(world, server, how):
    extra: dict[str, str] = {}
    if how == "env-deny":
        extra["LILY_TOOLS_DENY"] = "write"
    elif how == "toml-deny":
        (world.workspace / "lily.toml").write_text('[tools]\ndeny = ["write"]\n', encoding="utf-8")
    else:
        extra.update(LILY_TOOLS_ALLOW="write read list", LILY_TOOLS_DENY="write")
    session = world.session(server, **extra)
    server.add(calls(call("write", {"path": "denied.txt", "content": "no"}, "c1"),
                     call("read", {"path": "present.txt"}, "c2")), "ok")
    (world.workspace / "present.txt").write_text("PRESENT\n", encoding="utf-8")
    reply = loop.run(session, "write it")
    assert reply.text == "ok"
    first, last = server.chat_requests()[0], server.chat_requests()[-1]
    assert "write" not in offered(first) and "read" in offered(first)
    results = results_by_id(last["messages"])
    assert results["c1"].startswith("Error:") and "denied" in results["c1"]
    assert results["c2"] == "PRESENT\n"  # the allowed call in the same turn still ran
    assert not (world.workspace / "denied.txt").exists()
    assert reply.tools_used == ["read"]


def test_owner_only_tool_is_never_offered_nor_run(world, server):
    ran: list[str] = []

    def launch(target: str) -> str:
        """Owner-only: launches something."""
        ran.append(target)
        return "launched"

    session = world.session(server)
    session.tools.register(launch, owner_only=True)
    server.add(calls(call("launch", {"target": "moon"}, "c1")), "could not")
    reply = loop.run(session, "launch")
    assert reply.text == "could not"
    assert "launch" not in offered(server.chat_requests()[0])
    result = results_by_id(server.chat_requests()[-1]["messages"])["c1"]
    assert result.startswith("Error:") and "owner-only" in result
    assert ran == [] and reply.tools_used == []


def test_arguments_are_checked_against_the_schema_before_the_tool_runs(world, server):
    ran: list[tuple] = []

    def add(a: int, b: int = 0) -> int:
        """Add two integers."""
        ran.append((a, b))
        return a + b

    session = world.session(server)
    session.tools.register(add)
    server.add(calls(call("add", {}, "missing"), call("add", {"a": 1, "zz": 2}, "unknown"),
                     call("add", {"a": "1"}, "wrongtype"), call("add", {"a": True}, "bool"),
                     call("add", {"a": 2, "b": 3}, "good")), "sum done")
    reply = loop.run(session, "add")
    assert reply.text == "sum done"
    results = results_by_id(server.chat_requests()[-1]["messages"])
    assert results["missing"].startswith("Error:") and "missing" in results["missing"]
    assert results["unknown"].startswith("Error:") and "zz" in results["unknown"]
    assert results["wrongtype"].startswith("Error:") and "integer" in results["wrongtype"]
    assert results["bool"].startswith("Error:")
    assert results["good"] == "5"
    assert ran == [(2, 3)] and reply.tools_used == ["add"]


def test_file_tools_refuse_paths_outside_the_workspace(world, server, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("OUTSIDE-SECRET\n", encoding="utf-8")
    (world.workspace / "link").symlink_to(outside)
    (world.workspace / "inside.txt").write_text("INSIDE\n", encoding="utf-8")
    session = world.session(server)
    escapes = {
        "read-dotdot": ("read", {"path": "../outside/secret.txt"}),
        "read-abs": ("read", {"path": str(outside / "secret.txt")}),
        "read-link": ("read", {"path": "link/secret.txt"}),
        "write-dotdot": ("write", {"path": "../outside/new.txt", "content": "x"}),
        "write-abs": ("write", {"path": str(outside / "new.txt"), "content": "x"}),
        "write-link": ("write", {"path": "link/new.txt", "content": "x"}),
        "list-dotdot": ("list", {"path": ".."}),
        "list-abs": ("list", {"path": str(outside)}),
        "list-link": ("list", {"path": "link"}),
        "inside": ("read", {"path": "inside.txt"}),
    }
    server.add(calls(*(call(name, args, key) for key, (name, args) in escapes.items())), "ok")
    assert loop.run(session, "escape").text == "ok"
    results = results_by_id(server.chat_requests()[-1]["messages"])
    reasons = {"dotdot": "'..'", "abs": "absolute", "link": "outside the workspace"}
    for key in escapes:
        if key != "inside":
            assert results[key].startswith("Error:"), (key, results[key])
            assert reasons[key.split("-")[1]] in results[key], (key, results[key])
    assert results["inside"] == "INSIDE\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert "OUTSIDE-SECRET" not in json.dumps(server.chat_requests())


def test_step_budget_ends_the_request_and_keeps_the_conversation_consistent(world, server):
    session = world.session(server)
    server.add(*[calls(call("list", {}, f"s{i}")) for i in range(loop.MAX_STEPS)],
               "after the budget")
    with pytest.raises(AgentError) as info:
        loop.run(session, "loop forever")
    message = str(info.value)
    assert f"{loop.MAX_STEPS} model steps" in message and "\n" not in message
    assert len(server.chat_requests()) == loop.MAX_STEPS
    roles = [m["role"] for m in session.conversation]
    assert roles == ["user"] + ["assistant", "tool"] * loop.MAX_STEPS
    assert_consistent(session.conversation)

    reply = loop.run(session, "now answer")
    assert reply.text == "after the budget"
    sent = server.chat_requests()[-1]["messages"]
    assert_consistent(sent[1:])
    assert [m["role"] for m in sent[-2:]] == ["tool", "user"]


# -- conversation state -----------------------------------------------------------------

def test_conversation_roles_journal_and_no_key(world, server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    session = world.session(server, journal=True, OPENAI_API_KEY=SECRET_KEY)
    server.add(calls(call("load_skill", {"name": "plan_compiler"}, "c1"),
                     call("list", {}, "c2")), "first answer", "second answer")
    first = loop.run(session, "first question")
    assert (first.text, first.skill, first.tools_used) == ("first answer", "plan_compiler", ["list"])
    second = loop.run(session, "second question")
    assert second.text == "second answer" and second.skill is None

    conv = session.conversation
    assert [m["role"] for m in conv] == ["user", "assistant", "tool", "tool", "assistant",
                                         "user", "assistant"]
    assert conv[0]["content"] == "first question" and conv[5]["content"] == "second question"
    assert_consistent(conv)
    # the second request carried the whole first exchange, after the system message
    sent = server.chat_requests()[-1]["messages"]
    assert sent[1:] == conv[:-1]

    path = session.journal.path
    records = list(journal.read(path))
    journaled = [r["message"] for r in records
                 if r.get("event") == "message" and r.get("session_id") == session.session_id]
    assert journaled == conv
    assert SECRET_KEY not in path.read_text(encoding="utf-8")
    assert all(SECRET_KEY not in json.dumps(r) for r in server.requests)


def test_new_empties_the_conversation(world, server):
    session = world.session(server)
    server.add("one", "two")
    loop.run(session, "remember MARK-BEFORE-NEW")
    old_id = session.session_id
    run_command(session, "/new")
    assert session.conversation == [] and session.session_id != old_id
    loop.run(session, "fresh")
    sent = server.chat_requests()[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert "MARK-BEFORE-NEW" not in json.dumps(sent)


def test_lily_cell_magic_uses_the_same_loop(world, server, monkeypatch):
    from IPython.testing.globalipapp import get_ipython
    from IPython.utils.capture import capture_output
    for key, value in world.env(server).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(world.workspace)
    ip = get_ipython()
    if getattr(ip, "_lily", None) is not None:
        ip.run_cell("%unload_ext lily")
    server.add(calls(call("load_skill", {"name": "plan_compiler"}, "c1")), "MAGIC-ANSWER")
    try:
        assert ip.run_cell("%load_ext lily").success
        with capture_output() as captured:
            result = ip.run_cell("%%lily\nplan the MAGIC-REQUEST")
        assert result.success, result.error_in_exec
        import lily
        conv = lily.session().conversation
    finally:
        ip.run_cell("%unload_ext lily")
    requests = server.chat_requests()
    assert len(requests) == 2
    system = system_text(requests[0])
    assert system.startswith(prompt.RULES) and "\n## Skills\n" in system
    last = requests[0]["messages"][-1]
    assert (last["role"], last["content"].strip()) == ("user", "plan the MAGIC-REQUEST")
    assert "Plan Compiler" in results_by_id(requests[1]["messages"])["c1"]
    assert [m["role"] for m in conv] == ["user", "assistant", "tool", "assistant"]
    assert conv[-1]["content"] == "MAGIC-ANSWER"
    shown = [o.data for o in captured.outputs if "text/markdown" in o.data]
    assert shown and "MAGIC-ANSWER" in shown[-1]["text/markdown"]
    assert "plan_compiler" in shown[-1]["text/markdown"]
