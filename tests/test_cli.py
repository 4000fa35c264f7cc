"""The ``lily`` command line, run as a real subprocess."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest


@pytest.fixture
def world(env):
    env.write_skill(env.ws_skills, "alpha", "summary: Alpha summary\ncommand: al")
    env.write_skill(env.user_skills, "alpha", "summary: user alpha")
    env.write_skill(env.user_skills, "beta", "description: Beta description.\n"
                                             "invocation_mode: tool_dispatch\n"
                                             "command_tool: scan_todos")
    env.write_skill(env.bundled_skills, "gamma", "summary: G\neligibility:\n  env: [LILY_TEST_NEVER_SET_VAR]")
    return env


def test_list(world):
    proc = world.cli("skills", "list", check_rc=0)
    out = proc.stdout
    assert "2 skills in snapshot version 1" in out
    assert "alpha" in out and "Alpha summary" in out and "/al" in out and "workspace" in out
    assert "beta" in out and "tool_dispatch" in out and "user" in out
    assert "user alpha" not in out
    assert "gamma" not in out and "1 skill(s) excluded" in out


def test_list_all(world):
    out = world.cli("skills", "list", "--all", check_rc=0).stdout
    assert "gamma" in out and "ineligible" in out and "LILY_TEST_NEVER_SET_VAR" in out
    assert "shadowed" in out and "shadowed by the workspace copy" in out


def test_list_json_shape(world):
    data = json.loads(world.cli("skills", "list", "--json", check_rc=0).stdout)
    assert isinstance(data["snapshot_version"], int) and data["snapshot_version"] == 1
    assert isinstance(data["snapshot_hash"], str) and len(data["snapshot_hash"]) == 64
    assert [s["name"] for s in data["skills"]] == ["alpha", "beta"]
    for s in data["skills"]:
        for key in ("name", "source", "path", "summary", "invocation_mode", "command"):
            assert key in s
        assert s["source"] in ("workspace", "user", "bundled")
    alpha, beta = data["skills"]
    assert (alpha["source"], alpha["path"], alpha["summary"], alpha["invocation_mode"],
            alpha["command"]) == ("workspace", str(world.ws_skills / "alpha"), "Alpha summary",
                                  "prompt_rewrite", "al")
    assert (beta["source"], beta["summary"], beta["invocation_mode"], beta["command"]) == (
        "user", "Beta description.", "tool_dispatch", None)
    kinds = {}
    for d in data["diagnostics"]:
        assert set(d) >= {"skill", "source", "path", "kind", "reason"}
        assert d["source"] in ("workspace", "user", "bundled")
        kinds[(d["kind"], d["skill"])] = d
    assert kinds[("shadowed", "alpha")]["source"] == "user"
    assert kinds[("ineligible", "gamma")]["source"] == "bundled"


def test_list_json_is_deterministic(world):
    a = world.cli("skills", "list", "--json", check_rc=0).stdout
    b = world.cli("skills", "list", "--json", check_rc=0).stdout
    assert a == b


def test_check_passes_without_skill_errors(world):
    proc = world.cli("skills", "check", check_rc=0)
    assert "ineligible: gamma (bundled)" in proc.stdout
    assert "shadowed: alpha (user)" in proc.stdout
    assert "0 skill error(s), 1 ineligible." in proc.stdout


def test_check_fails_on_a_skill_error(world):
    world.write_skill(world.ws_skills, "broken", "summary: [oops")
    proc = world.cli("skills", "check", check_rc=1)
    assert "skill_error: broken (workspace): invalid YAML frontmatter" in proc.stdout
    assert "1 skill error(s)" in proc.stdout


def test_info(world):
    proc = world.cli("skills", "info", "alpha", check_rc=0)
    assert "alpha" in proc.stdout and "Alpha summary" in proc.stdout and "/al" in proc.stdout and "`" not in proc.stdout
    proc = world.cli("skills", "info", "nope", check_rc=1)
    assert "no skill named 'nope'" in proc.stderr
    proc = world.cli("skills", "info", "gamma", check_rc=1)
    assert "excluded" in proc.stderr and "LILY_TEST_NEVER_SET_VAR" in proc.stderr


def test_missing_workspace_root_exits_2_naming_the_root(world, tmp_path):
    missing = tmp_path / "no" / "such" / "skills"
    for action in (("list",), ("list", "--json"), ("check",), ("info", "alpha")):
        proc = world.cli("skills", *action, SKILLS_WORKSPACE_DIR=str(missing))
        assert proc.returncode == 2, (action, proc.stdout, proc.stderr)
        assert str(missing) in proc.stderr and "Traceback" not in proc.stderr
        assert proc.stderr.startswith("Error: ")


def test_default_roots_that_do_not_exist_are_empty(world, tmp_path):
    world.write_skill(world.bundled_skills, "bund", "summary: b")
    empty_ws = tmp_path / "empty_ws"
    empty_ws.mkdir()
    proc = world.cli("skills", "list", "--json", cwd=empty_ws, SKILLS_WORKSPACE_DIR=None,
                     SKILLS_USER_DIR=None, HOME=str(tmp_path / "nohome"), check_rc=0)
    data = json.loads(proc.stdout)
    assert [(s["name"], s["source"]) for s in data["skills"]] == [("bund", "bundled")]


def test_bundled_skills_ship_by_default(env, tmp_path):
    proc = env.cli("skills", "list", "--json", SKILLS_BUNDLED_DIR=None, check_rc=0)
    skills = {s["name"]: s for s in json.loads(proc.stdout)["skills"]}
    assert skills["plan_compiler"]["source"] == "bundled"
    assert skills["plan_compiler"]["command"] == "plan"
    assert skills["todo_scan"]["invocation_mode"] == "tool_dispatch"


def test_workspace_defaults_to_the_current_folder(env, tmp_path):
    proj = tmp_path / "proj"
    env.write_skill(proj / "skills", "local_one", "summary: from ./skills")
    proc = env.cli("skills", "list", "--json", cwd=proj, SKILLS_WORKSPACE_DIR=None, check_rc=0)
    skills = {s["name"]: s for s in json.loads(proc.stdout)["skills"]}
    assert skills["local_one"]["source"] == "workspace"


def test_agent_skills_format_loads_unchanged(env):
    folder = env.write_skill(env.ws_skills, "pdf-processing", """name: pdf-processing
description: Extracts text and tables from PDF files, fills forms, merges documents. Use when working with PDFs or when the user mentions document extraction.
license: Apache-2.0
compatibility: Requires python3 and poppler-utils
metadata:
  author: example-org
  version: "1.0"
allowed-tools: Bash(pdftotext:*) Read""", body="# PDF Processing\n\nSee [the guide](references/guide.md).\n")
    (folder / "references").mkdir()
    (folder / "references" / "guide.md").write_text("# Guide\n")
    (folder / "scripts").mkdir()
    (folder / "scripts" / "extract.py").write_text("print('hi')\n")
    (folder / "assets").mkdir()
    (folder / "assets" / "template.json").write_text("{}")
    env.write_skill(env.ws_skills, "data-analysis", "name: data-analysis\n"
                                                    "description: Analyses tabular data. Use when "
                                                    "the user has a CSV.")

    data = json.loads(env.cli("skills", "list", "--json", check_rc=0).stdout)
    skills = {s["name"]: s for s in data["skills"]}
    assert set(skills) == {"data-analysis", "pdf-processing"}
    pdf = skills["pdf-processing"]
    assert pdf["summary"].startswith("Extracts text and tables")
    assert pdf["description"] == pdf["summary"]
    assert pdf["license"] == "Apache-2.0"
    assert pdf["compatibility"] == "Requires python3 and poppler-utils"
    assert pdf["metadata"] == {"author": "example-org", "version": "1.0"}
    assert pdf["allowed_tools"] == ["Bash(pdftotext:*)", "Read"]
    assert pdf["invocation_mode"] == "prompt_rewrite"
    # nested folders of a skill are not skills; nothing is an error
    assert [d for d in data["diagnostics"] if d["kind"] in ("skill_error", "ineligible")] == []
    assert env.cli("skills", "check").returncode == 0
    assert env.cli("skills", "validate", "--strict", str(folder)).returncode == 0


# -- validate ------------------------------------------------------------------------

def _lines(proc) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.strip()]


def test_validate_valid_skills(env):
    a = env.write_skill(env.base / "v", "plan_compiler", "summary: s\ncommand: plan")
    b = env.write_skill(env.base / "v", "pdf-processing", "name: pdf-processing\ndescription: d")
    proc = env.cli("skills", "validate", str(a), str(b / "SKILL.md"), check_rc=0)
    assert proc.stdout == ""
    assert "2 of 2 skill(s) valid" in proc.stderr


def test_validate_reports_one_line_per_problem(env):
    bad_yaml = env.write_skill(env.base / "v", "bad_yaml", "summary: [x")
    clash = env.write_skill(env.base / "v", "clash", "command: help")
    no_md = env.base / "v" / "no_md"
    no_md.mkdir()
    good = env.write_skill(env.base / "v", "good", "summary: fine")
    proc = env.cli("skills", "validate", str(bad_yaml), str(clash), str(no_md), str(good),
                   check_rc=1)
    lines = _lines(proc)
    assert len(lines) == 3
    assert lines[0].startswith(f"{bad_yaml}: ") and "invalid YAML" in lines[0]
    assert lines[1].startswith(f"{clash}: ") and "/help" in lines[1]
    assert lines[2] == f"{no_md}: SKILL.md is missing"
    assert "1 of 4 skill(s) valid" in proc.stderr


def test_validate_strict(env):
    v = env.base / "v"
    long_desc = "d" * 1025
    ok = env.write_skill(v, "pdf-processing", "name: pdf-processing\ndescription: Does PDFs.")
    cases = {
        "underscore": env.write_skill(v, "plan_compiler", "name: plan_compiler\ndescription: x"),
        "no_description": env.write_skill(v, "no-desc", "name: no-desc"),
        "long_description": env.write_skill(v, "long-desc",
                                            f"name: long-desc\ndescription: {long_desc}"),
        "long_compat": env.write_skill(v, "long-compat", "name: long-compat\ndescription: x\n"
                                                         f"compatibility: {'c' * 501}"),
        "name_mismatch": env.write_skill(v, "pdf-tools", "name: pdf-tool\ndescription: x"),
    }
    # non-strict: all of these are fine for Lily except the name mismatch
    proc = env.cli("skills", "validate", str(ok), *map(str, cases.values()))
    assert proc.returncode == 1 and len(_lines(proc)) == 1 and "pdf-tool" in proc.stdout
    assert env.cli("skills", "validate", "--strict", str(ok)).returncode == 0

    expected = {
        "underscore": "'_'",
        "no_description": "missing required field 'description'",
        "long_description": "description exceeds 1024 characters (1025)",
        "long_compat": "compatibility exceeds 500 characters (501)",
        "name_mismatch": "pdf-tool",
    }
    for case, folder in cases.items():
        proc = env.cli("skills", "validate", "--strict", str(folder))
        assert proc.returncode == 1, (case, proc.stdout)
        lines = _lines(proc)
        assert len(lines) == 1, (case, lines)
        assert lines[0].startswith(f"{folder}: ") and expected[case] in lines[0], (case, lines)
        assert "strict" in proc.stderr


def test_validate_strict_reports_each_violation_separately(env):
    folder = env.write_skill(env.base / "v", "x_y", "summary: no name, no description\n"
                                                   "argument-hint: '[file]'")
    lines = _lines(env.cli("skills", "validate", "--strict", str(folder), check_rc=1))
    assert lines == [  # the errors, then the keys Lily reads: warnings
        f"{folder}: missing required field 'name'",
        f"{folder}: missing required field 'description'",
        f"{folder}: warning: 'summary' is not part of the Agent Skills format (a Lily key)",
        f"{folder}: warning: 'argument-hint' is not part of the Agent Skills format "
        "(a Claude Code key)",
    ]


def test_validate_strict_names_are_compared_exactly(env):
    # U+FB01 (the 'fi' ligature) is NFKC-equal to 'fi': skills-ref compares after NFKC,
    # but Lily cannot load that directory name, so strict validation must not pass it.
    folder = env.write_skill(env.base / "v", "\ufb01le-tool", "name: file-tool\ndescription: x")
    proc = env.cli("skills", "validate", "--strict", str(folder), check_rc=1)
    assert "does not match the directory name" in proc.stdout and "NFKC" in proc.stdout
    # and the unicode-letter name skills-ref accepts is refused: names are ASCII
    cafe = env.write_skill(env.base / "v", "caf\u00e9", "name: caf\u00e9\ndescription: x")
    proc = env.cli("skills", "validate", "--strict", str(cafe), check_rc=1)
    assert "only lowercase ASCII letters, digits and hyphens" in proc.stdout


def test_validate_a_folder_that_is_not_a_skill(env, tmp_path):
    proc = env.cli("skills", "validate", str(tmp_path), check_rc=1)
    assert "SKILL.md is missing" in proc.stdout
    proc = env.cli("skills", "validate", str(tmp_path / "nothing"), check_rc=1)
    assert proc.stderr.splitlines()[0] == f"Error: {tmp_path / 'nothing'}: no such file or folder."


def test_no_arguments_prints_help_and_version_prints_the_version(env):
    from lily_kernel import __version__
    proc = env.cli(check_rc=0)
    assert proc.stdout.startswith("usage: lily") and "skills" in proc.stdout
    assert env.cli("--version", check_rc=0).stdout.strip() == f"lily {__version__}"


@pytest.mark.parametrize("argv", [("skills",), ("skills", "list", "--bogus"), ("kernel",),
                                  ("bogus",), ("skills", "validate")])
def test_usage_errors_are_one_error_line(env, argv):
    proc = env.cli(*argv, check_rc=2)
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("Error: lily")
    assert "usage:" not in proc.stderr and "Traceback" not in proc.stderr


def test_info_and_run_help_print_text_tables_not_markdown(env):
    env.write_skill(env.ws_skills, "alpha", "summary: Alpha does things\ncommand: al")
    info = env.cli("skills", "info", "alpha", check_rc=0).stdout
    run = env.cli("run", "/help", check_rc=0).stdout
    for text in (info, run):
        assert "| ---" not in text and "**" not in text and "`" not in text
    assert any(line.split() == ["alias", "/al"] for line in info.splitlines())
    assert env.cli("skills", "info", "nope", check_rc=1).stderr == "Error: no skill named 'nope'.\n"


def test_model_prints_the_same_table_as_in_a_notebook(env):
    from lily_kernel.commands import render
    from lily_kernel.commands.results import ModelInfo
    out = env.cli("run", "/model", check_rc=0).stdout
    assert out.splitlines()[:2] == [
        "Model configuration; permission mode: ask (/mode, /policy)", ""]
    assert out.splitlines()[2].split() == ["setting", "value"]
    md = render.markdown(ModelInfo({"model": "m", "timeout": None}))
    assert "| setting | value |" in md and "| timeout | — |" in md
    assert any(line.split() == ["temperature", "0.0"] for line in out.splitlines())
    assert any(line.startswith("Sent with every request:") for line in out.splitlines())


def test_run_a_notebook_skill_alias_says_it_needs_a_notebook(env):
    env.write_skill(env.ws_skills, "fixer", "summary: Fix.\ncommand: fix\n"
                                              "requires_tools: [last_error, propose_cell]")
    proc = env.cli("run", "/fix", check_rc=1)
    assert proc.stderr.startswith("Error: /fix runs the skill 'fixer', which is not available "
                                  "here: needs a notebook (the Lily kernel or %load_ext lily)")
    proc = env.cli("skills", "validate", "--lily", str(env.ws_skills / "fixer"), check_rc=0)
    assert "valid in a notebook: needs a notebook" in proc.stdout
    assert "1 of 1 skill(s) valid (what Lily would load here); 1 of them needs a notebook." in proc.stderr


def test_usage_errors_exit_2(env):
    assert env.cli("skills").returncode == 2
    assert env.cli("skills", "bogus").returncode == 2
    assert env.cli("skills", "validate").returncode == 2


def test_run_one_command(env):
    env.write_skill(env.ws_skills, "alpha", "summary: a\ncommand: al")
    proc = env.cli("run", "/skills", check_rc=0)
    assert "alpha" in proc.stdout
    proc = env.cli("run", "/skil", check_rc=1)
    assert proc.stderr.strip() == "Error: unknown command /skil. Run /help for the list of commands."
    assert not (env.workspace / ".lily").exists()


def test_console_script(env):
    script = shutil.which("lily", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("the 'lily' console script is not installed next to this Python")
    env.write_skill(env.ws_skills, "alpha", "summary: a")
    cli_env = {k: v for k, v in os.environ.items() if not k.startswith(("SKILLS_", "LILY_"))}
    cli_env.update(env.session_env())
    proc = subprocess.run([script, "skills", "list", "--json"], cwd=env.workspace, env=cli_env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [s["name"] for s in json.loads(proc.stdout)["skills"]] == ["alpha"]


def test_run_a_skill_request_goes_to_the_model_like_the_kernel(env):
    """`lily run "/plan ..."` runs the prompt_rewrite skill through the agent, as the kernel
    does (docs/architecture.md#one-cell): the model receives the skill and the input."""
    from lily_kernel.testing import ScriptedServer
    env.write_skill(env.ws_skills, "plan_compiler", "summary: Plans.\ncommand: plan",
                    body="Write a plan with an Objective and Steps.")
    script = [{"expect": {"contains": "ship v2"}, "content": "PLAN-FROM-THE-MODEL"}]
    with ScriptedServer(script) as server:
        proc = env.cli("run", "/plan ship v2", check_rc=0, OPENAI_BASE_URL=server.url,
                       OPENAI_API_KEY="sk-test")
        assert server.remaining() == 0
        sent = server.chat_requests()[0]["messages"]
    assert "PLAN-FROM-THE-MODEL" in proc.stdout
    assert any("plan_compiler" in str(m.get("content")) for m in sent)


def test_run_a_skill_request_without_a_model_says_what_to_set(env):
    env.write_skill(env.ws_skills, "plan_compiler", "summary: Plans.\ncommand: plan")
    proc = env.cli("run", "/plan ship v2", check_rc=1)
    assert proc.stderr.startswith("Error: ")
    assert "OPENAI_API_KEY" in proc.stderr and "OPENAI_BASE_URL" in proc.stderr
    assert proc.stdout == ""


def test_no_skill_alias_takes_a_built_in_name_in_any_cli_load(env):
    """The skills room does not know the commands: every CLI load is given the built-in
    names (docs/loader.md#exclusion). ``lily run`` (the Runner's session), ``lily skills
    check`` and ``lily skills install`` each exclude or refuse a skill aliased ``/skills``
    with the reason; forgetting to pass the names anywhere here fails this test."""
    env.write_skill(env.ws_skills, "sneaky", "summary: s\ncommand: skills")
    reason = "'command' /skills collides with the built-in command /skills; built-ins win"
    proc = env.cli("run", "/skill sneaky", check_rc=1)
    assert proc.stderr.startswith("Error: skill 'sneaky' is excluded") and reason in proc.stderr
    assert reason in env.cli("run", "/skills --all", check_rc=0).stdout
    assert f"skill_error: sneaky (workspace): {reason}" in env.cli("skills", "check",
                                                                   check_rc=1).stdout
    source = env.write_skill(env.base / "src", "other", "name: other\ndescription: d\n"
                                                        "command: help")
    proc = env.cli("skills", "install", str(source), "--workspace", check_rc=1)
    assert "refused to install 'other'" in proc.stderr and "built-ins win" in proc.stderr
    assert not (env.ws_skills / "other").exists()


def test_every_group_that_lists_has_list_and_every_subcommand_says_what_it_does(world):
    """Issue 43 §3: `lily logs list` as `lily skills list` and `lily mcp list`; each
    subcommand's --help has a description; `lily acp --help` says `lily acp` runs the agent."""
    import argparse

    from lily_kernel.cli import parser

    def walk(p: argparse.ArgumentParser):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    yield child
                    yield from walk(child)

    groups = {c.prog.split()[-1]: c for c in walk(parser()) if len(c.prog.split()) == 2}
    for group in ("skills", "logs", "mcp"):
        sub = next(a for a in groups[group]._actions if isinstance(a, argparse._SubParsersAction))
        assert "list" in sub.choices, group
    undescribed = [c.prog for c in walk(parser()) if not c.description]
    assert undescribed == []
    assert "`lily acp` itself runs Lily" in world.cli("acp", "--help", check_rc=0).stdout
    listed = world.cli("logs", "list", check_rc=0)
    assert listed.stdout == world.cli("logs", check_rc=0).stdout
