"""A checklist in an answer becomes the client's plan, and a later answer's report of an
entry updates it (docs/front-ends.md#plans)."""
from __future__ import annotations

import pytest
from acp.schema import AgentPlanUpdate
from acp_support import Recorder, World, prompt, run, settle

from lily_kernel.acp.acp_plan import PlanTracker, checklist
from lily_kernel.testing import ScriptedServer

PLAN = ("# Plan\n\n## Steps\n- [ ] Read the data\n- [ ] Fit the model.\n- [ ] Write the report\n"
        "\n```markdown\n- [ ] not a step: inside a fence\n```\n")


def test_the_checklist_format():
    assert checklist(PLAN) == [("Read the data", "pending"), ("Fit the model.", "pending"),
                               ("Write the report", "pending")]
    assert checklist("* [x] done\n+ [~] going\n- [X] Done too\n-[ ] no space\n") == [
        ("done", "completed"), ("going", "in_progress"), ("Done too", "completed")]


def test_a_later_report_updates_entries_and_a_new_checklist_replaces_the_plan():
    plan = PlanTracker()
    first = plan.read(PLAN)
    assert first is not None and [e.status for e in first.entries] == ["pending"] * 3
    update = plan.read("Progress:\n- [x] read the data\n- [~] Fit the model\n")
    assert update is not None
    assert [(e.content, e.status) for e in update.entries] == [
        ("Read the data", "completed"), ("Fit the model.", "in_progress"),
        ("Write the report", "pending")]
    assert plan.read("- [x] Read the data\n") is None  # nothing changed
    assert plan.read("no checklist here") is None
    other = plan.read("- [ ] Something else\n")
    assert other is not None and [e.content for e in other.entries] == ["Something else"]


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def test_the_plan_skills_checklist_reaches_the_client_and_a_later_step_ticks_it(world):
    folder = world.skills / "plan_compiler"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nsummary: Plans a goal.\ncommand: plan\n"
                                     "invocation_mode: prompt_rewrite\n---\nWrite a plan.\n")
    script = [{"content": PLAN}, {"content": "Read it.\n\n- [x] Read the data\n"}]

    async def go():
        client = Recorder()
        with ScriptedServer(script) as server:
            async with world.lily(client, server, "zed") as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("/plan ship v2"))
                await conn.prompt(session_id=new.session_id, prompt=prompt("go on"))
                await settle()
        return [u for u in client.updates if isinstance(u, AgentPlanUpdate)]

    plans = run(go())
    assert len(plans) == 2
    assert [e.content for e in plans[0].entries] == ["Read the data", "Fit the model.",
                                                     "Write the report"]
    assert [e.status for e in plans[1].entries] == ["completed", "pending", "pending"]
