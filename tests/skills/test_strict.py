"""``lily skills validate --strict``: the Agent Skills specification exactly
(docs/skills-compat.md#strict), checked rule by rule and against the reference
validator ``skills-ref`` over the same folders.

Each case is a skill folder generated under tmp_path: the folder name, the file
name, its text, the one message --strict must print, and, where Lily and
skills-ref deliberately disagree, which documented difference explains it.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from lily_kernel.skills.validator import validate, validate_strict

LONG = "x" * 1025

# The deliberate differences from skills-ref, as docs/skills-compat.md lists them.
ASCII = "names are ASCII"
SPELLING = "SKILL.md spelled exactly"
FLOW = "flow-style YAML is valid"
LILY_KEYS = "a key Lily reads is a warning"
METADATA = "metadata maps strings to strings"
# What --strict warns about and still passes. case id -> the warning expected.
WARNINGS = {
    "lily-key": "'summary' is not part of the Agent Skills format (a Lily key)",
    "lily-eligibility": "'eligibility' is not part of the Agent Skills format (a Lily key)",
    "claude-code-key": "'disable-model-invocation' is not part of the Agent Skills format "
                       "(a Claude Code key)",
    "argument-hint": "'argument-hint' is not part of the Agent Skills format (a Claude Code key)",
    "license-list": "'license' must be a string",
    "allowed-tools-list": "'allowed-tools' must be a string (tool names separated by spaces)",
    "empty-compatibility": "'compatibility' must be a string of 1 to 500 characters",
}

FM = "---\n{}\n---\n# Body\n\nInstructions.\n"

# (case id, folder, file name, SKILL.md text, expected --strict messages, difference)
CASES = [
    ("valid", "good-skill", "SKILL.md",
     FM.format("name: good-skill\ndescription: Does good things. Use when testing."), [], None),
    ("valid-all-six-fields", "full-skill", "SKILL.md", FM.format(
        "name: full-skill\ndescription: Every field.\nlicense: Apache-2.0\n"
        "compatibility: Requires python3\nallowed-tools: Bash(git:*) Read\n"
        "metadata:\n  author: example-org\n  version: \"1.0\""), [], None),
    ("lily-key", "lily-key", "SKILL.md",
     FM.format("name: lily-key\ndescription: d\nsummary: Short."), [], LILY_KEYS),
    ("lily-eligibility", "lily-elig", "SKILL.md",
     FM.format("name: lily-elig\ndescription: d\neligibility:\n  env:\n    - HOME"), [],
     LILY_KEYS),
    ("claude-code-key", "cc-key", "SKILL.md",
     FM.format("name: cc-key\ndescription: d\ndisable-model-invocation: true"), [], LILY_KEYS),
    ("argument-hint", "cc-hint", "SKILL.md",
     FM.format("name: cc-hint\ndescription: d\nargument-hint: \"<file>\""), [], LILY_KEYS),
    ("unknown-key", "odd-key", "SKILL.md",
     FM.format("name: odd-key\ndescription: d\nhomepage: https://example.org"),
     ["'homepage' is not part of the Agent Skills format"], None),
    ("no-frontmatter", "bare", "SKILL.md", "# Bare\n\nNo frontmatter.\n",
     ["SKILL.md must start with YAML frontmatter (a first line '---')"], None),
    ("missing-name", "no-name", "SKILL.md", FM.format("description: d"),
     ["missing required field 'name'"], None),
    ("empty-name", "empty-name", "SKILL.md", FM.format("name: \"\"\ndescription: d"),
     ["'name' must be a non-empty string"], None),
    ("name-too-long", "a" * 65, "SKILL.md", FM.format(f"name: {'a' * 65}\ndescription: d"),
     [f"name '{'a' * 65}' exceeds 64 characters (65)"], None),
    ("name-64-is-fine", "b" * 64, "SKILL.md", FM.format(f"name: {'b' * 64}\ndescription: d"),
     [], None),
    ("uppercase", "Pdf-Tool", "SKILL.md", FM.format("name: Pdf-Tool\ndescription: d"),
     ["name 'Pdf-Tool' must be lowercase"], None),
    ("underscore", "pdf_tool", "SKILL.md", FM.format("name: pdf_tool\ndescription: d"),
     ["name 'pdf_tool' contains '_': only lowercase ASCII letters, digits and hyphens "
      "are allowed"], None),
    ("leading-hyphen", "-pdf", "SKILL.md", FM.format("name: \"-pdf\"\ndescription: d"),
     ["name '-pdf' cannot start or end with a hyphen"], None),
    ("trailing-hyphen", "pdf-", "SKILL.md", FM.format("name: pdf-\ndescription: d"),
     ["name 'pdf-' cannot start or end with a hyphen"], None),
    ("consecutive-hyphens", "pdf--tool", "SKILL.md",
     FM.format("name: pdf--tool\ndescription: d"),
     ["name 'pdf--tool' cannot contain consecutive hyphens"], None),
    ("name-mismatch", "pdf-tools", "SKILL.md", FM.format("name: pdf-tool\ndescription: d"),
     ["name 'pdf-tool' does not match the directory name 'pdf-tools'"], None),
    ("missing-description", "no-desc", "SKILL.md", FM.format("name: no-desc"),
     ["missing required field 'description'"], None),
    ("empty-description", "empty-desc", "SKILL.md",
     FM.format("name: empty-desc\ndescription: \"\""),
     ["'description' must be a non-empty string"], None),
    ("description-too-long", "long-desc", "SKILL.md",
     FM.format(f"name: long-desc\ndescription: {LONG}"),
     ["description exceeds 1024 characters (1025)"], None),
    ("description-1024-is-fine", "desc-1024", "SKILL.md",
     FM.format(f"name: desc-1024\ndescription: {LONG[:1024]}"), [], None),
    ("compatibility-too-long", "long-compat", "SKILL.md",
     FM.format(f"name: long-compat\ndescription: d\ncompatibility: {'c' * 501}"),
     ["compatibility exceeds 500 characters (501)"], None),
    ("invalid-yaml", "bad-yaml", "SKILL.md",
     FM.format("name: bad-yaml\ndescription: \"unclosed"), ["invalid YAML"], None),
    # -- the documented differences from skills-ref ------------------------------------
    ("unicode-name", "café", "SKILL.md", FM.format("name: café\ndescription: d"),
     ["name 'café' contains 'é': only lowercase ASCII letters, digits and hyphens "
      "are allowed"], ASCII),
    ("lowercase-file-name", "lower-md", "skill.md",
     FM.format("name: lower-md\ndescription: d"),
     ["SKILL.md is missing; found 'skill.md': the file must be named SKILL.md exactly"],
     SPELLING),
    ("flow-style-metadata", "flow-meta", "SKILL.md",
     FM.format("name: flow-meta\ndescription: d\nmetadata: {author: example-org}"), [], FLOW),
    ("nested-metadata", "nested-meta", "SKILL.md",
     FM.format("name: nested-meta\ndescription: d\nmetadata:\n  openclaw:\n    emoji: x"),
     ["'metadata.openclaw' must be a string, not a mapping"], METADATA),
    ("list-in-metadata", "list-meta", "SKILL.md",
     FM.format("name: list-meta\ndescription: d\nmetadata:\n  tags:\n    - a\n    - b"),
     ["'metadata.tags' must be a string, not a list"], METADATA),
    ("number-in-metadata", "number-meta", "SKILL.md",
     FM.format("name: number-meta\ndescription: d\nmetadata:\n  version: 1.0"),
     ["'metadata.version' must be a string, not a number"], METADATA),
    ("quoted-number-in-metadata", "quoted-meta", "SKILL.md",
     FM.format("name: quoted-meta\ndescription: d\nmetadata:\n  version: \"1.0\""), [], None),
    ("metadata-not-a-mapping", "text-meta", "SKILL.md",
     FM.format("name: text-meta\ndescription: d\nmetadata: just text"),
     ["'metadata' must be a mapping of strings to strings"], METADATA),
    ("license-list", "list-license", "SKILL.md",
     FM.format("name: list-license\ndescription: d\nlicense:\n  - MIT"),
     [], None),
    ("allowed-tools-list", "list-tools", "SKILL.md",
     FM.format("name: list-tools\ndescription: d\nallowed-tools:\n  - Read"),
     [], None),
    ("empty-compatibility", "empty-compat", "SKILL.md",
     FM.format("name: empty-compat\ndescription: d\ncompatibility: \"\""),
     [], None),
]


def make(base: Path, folder: str, file_name: str, text: str) -> Path:
    skill = base / folder
    skill.mkdir(parents=True)
    (skill / file_name).write_text(text, encoding="utf-8")
    return skill


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_rule_has_its_own_message(tmp_path, case):
    _, folder, file_name, text, expected, _ = case
    problems, warnings = validate_strict(make(tmp_path, folder, file_name, text))
    assert len(problems) == len(expected), problems
    for got, want in zip(problems, expected):
        assert want in got, (got, want)
    assert warnings == ([WARNINGS[case[0]]] if case[0] in WARNINGS else []), warnings


def test_several_problems_are_each_reported(tmp_path):
    skill = make(tmp_path, "Many_Bad", "SKILL.md",
                 FM.format("summary: s\ncommand: go\nname: Many_Bad\nmetadata:\n  n: 2"))
    assert validate(skill, strict=True) == [
        "name 'Many_Bad' must be lowercase",
        "name 'Many_Bad' contains '_': only lowercase ASCII letters, digits and hyphens "
        "are allowed",
        "missing required field 'description'",
        "'metadata.n' must be a string, not a number",
    ]
    assert validate_strict(skill)[1] == [
        "'summary' is not part of the Agent Skills format (a Lily key)",
        "'command' is not part of the Agent Skills format (a Lily key)"]


def test_lily_only_rules_do_not_decide_strict(tmp_path):
    # invocation_mode 'fast' is a Lily error; for --strict it is a Lily key: a warning
    skill = make(tmp_path, "mode", "SKILL.md",
                 FM.format("name: mode\ndescription: d\ninvocation_mode: fast"))
    assert validate_strict(skill) == (
        [], ["'invocation_mode' is not part of the Agent Skills format (a Lily key)"])
    assert "invocation_mode" in validate(skill)[0]  # the default rules still refuse it


def test_skills_ref_agrees_except_on_the_documented_differences(tmp_path):
    skills_ref = pytest.importorskip("skills_ref.validator")
    disagreements = {}
    for case_id, folder, file_name, text, expected, difference in CASES:
        skill = make(tmp_path / case_id, folder, file_name, text)
        lily_ok = validate(skill, strict=True) == []
        ref_problems = skills_ref.validate(skill)
        assert lily_ok == (expected == []), case_id
        if difference is None:
            assert lily_ok == (ref_problems == []), (case_id, ref_problems)
        else:  # the difference is real: the two validators do disagree here
            disagreements[case_id] = difference
            assert lily_ok != (ref_problems == []), (case_id, difference, ref_problems)
    assert set(disagreements.values()) == {ASCII, SPELLING, FLOW, LILY_KEYS, METADATA}


def test_documented_differences_are_in_the_docs():
    repo = Path(__file__).resolve().parents[2]
    docs = (repo / "docs" / "skills-compat.md").read_text(encoding="utf-8")
    for difference in (ASCII, SPELLING, FLOW, LILY_KEYS, METADATA):
        assert difference in docs, difference


# skills-ref's own test cases (its tests/test_validator.py), restated as folders: the
# folder, the SKILL.md text (None: no SKILL.md; a path that is not a folder: "FILE"), and the
# documented difference when Lily's verdict is not skills-ref's.
SKILLS_REF_CASES = [
    ("valid", "my-skill", FM.format("name: my-skill\ndescription: A test skill"), None),
    ("missing-skill-md", "my-skill", None, None),
    ("not-a-directory", "file.txt", "FILE", None),
    ("uppercase", "MySkill", FM.format("name: MySkill\ndescription: A test skill"), None),
    ("name-70", "a" * 70, FM.format(f"name: {'a' * 70}\ndescription: A test skill"), None),
    ("leading-hyphen", "-my-skill", FM.format("name: -my-skill\ndescription: A test skill"), None),
    ("consecutive-hyphens", "my--skill", FM.format("name: my--skill\ndescription: t"), None),
    ("underscore", "my_skill", FM.format("name: my_skill\ndescription: A test skill"), None),
    ("mismatch", "wrong-name", FM.format("name: correct-name\ndescription: t"), None),
    ("unexpected-field", "my-skill",
     FM.format("name: my-skill\ndescription: t\nunknown_field: should not be here"), None),
    ("all-fields", "my-skill",
     FM.format("name: my-skill\ndescription: t\nlicense: MIT\nmetadata:\n  author: Test"), None),
    ("allowed-tools-string", "my-skill",
     FM.format("name: my-skill\ndescription: t\nallowed-tools: Bash(jq:*) Bash(git:*)"), None),
    ("allowed-tools-block-list", "my-skill",
     FM.format("name: my-skill\ndescription: t\nallowed-tools:\n  - Read\n  - Bash"), None),
    ("allowed-tools-list-with-number", "my-skill",
     FM.format("name: my-skill\ndescription: t\nallowed-tools:\n  - Read\n  - 123"), None),
    ("chinese-name", "技能", FM.format("name: 技能\ndescription: t"), ASCII),
    ("russian-hyphenated", "мой-навык", FM.format("name: мой-навык\ndescription: t"), ASCII),
    ("russian-uppercase", "НАВЫК", FM.format("name: НАВЫК\ndescription: t"), None),
    ("description-1100", "my-skill", FM.format(f"name: my-skill\ndescription: {'x' * 1100}"), None),
    ("compatibility", "my-skill",
     FM.format("name: my-skill\ndescription: t\ncompatibility: Requires Python 3.11+"), None),
    ("compatibility-550", "my-skill",
     FM.format(f"name: my-skill\ndescription: t\ncompatibility: {'x' * 550}"), None),
    ("nfkc-decomposed", "caf\u00e9", FM.format("name: cafe\u0301\ndescription: t"), ASCII),
]

# The shapes the public collections write (anthropics/skills, Claude Code plugins,
# OpenClaw's skills), each as its authors do: both validators must agree, but for the
# documented differences.
COLLECTION_CASES = [
    ("anthropic-license-file", "docx", FM.format(
        "name: docx\ndescription: \"Document creation and editing. Use when working with .docx "
        "files.\"\nlicense: Proprietary. LICENSE.txt has complete terms"), None),
    ("anthropic-apache", "mcp-builder", FM.format(
        "name: mcp-builder\ndescription: Guide for creating MCP servers.\n"
        "license: Complete terms in LICENSE.txt"), None),
    ("claude-code-keys", "fix-issue", FM.format(
        "name: fix-issue\ndescription: Fix a GitHub issue\ndisable-model-invocation: true\n"
        "argument-hint: \"[issue-number]\""), LILY_KEYS),
    ("claude-allowed-tools-list", "safe-reader", FM.format(
        "name: safe-reader\ndescription: Read files without making changes.\n"
        "allowed-tools:\n  - Read\n  - Grep"), None),
    ("version-as-number", "pdf-tools", FM.format(
        "name: pdf-tools\ndescription: d\nmetadata:\n  author: example\n  version: 1.0"), METADATA),
    ("openclaw-flow-metadata", "weather", FM.format(
        'name: weather\ndescription: Current weather.\nmetadata: {"openclaw": {"emoji": "x", '
        '"requires": {"bins": ["curl"]}}}'), None),  # both refuse: flow style, nested map
    ("openclaw-block-metadata", "github", FM.format(
        "name: github\ndescription: Use gh.\nmetadata:\n  openclaw:\n    requires:\n"
        "      bins:\n        - gh"), METADATA),
]


def _folder(base: Path, folder: str, text: str | None) -> Path:
    if text == "FILE":
        base.mkdir(parents=True)
        (base / folder).write_text("test")
        return base / folder
    path = base / folder
    path.mkdir(parents=True)
    if text is not None:
        (path / "SKILL.md").write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("case", SKILLS_REF_CASES + COLLECTION_CASES,
                         ids=[c[0] for c in SKILLS_REF_CASES + COLLECTION_CASES])
def test_strict_gives_skills_refs_verdict(tmp_path, case):
    skills_ref = pytest.importorskip("skills_ref.validator")
    case_id, folder, text, difference = case
    path = _folder(tmp_path / case_id, folder, text)
    ref_ok = skills_ref.validate(path) == []
    lily_ok = validate_strict(path)[0] == []
    if difference is None:
        assert lily_ok == ref_ok, (case_id, validate_strict(path), skills_ref.validate(path))
    else:
        assert lily_ok != ref_ok, (case_id, difference)


def test_strict_warnings_do_not_fail_the_command(env):
    folder = env.write_skill(env.base / "v", "pdf-tools", "name: pdf-tools\ndescription: d\n"
                             "summary: Short.\ncommand: pdf\n"
                             "allowed-tools:\n  - Read\nmetadata:\n  version: \"1.0\"")
    proc = env.cli("skills", "validate", "--strict", str(folder), check_rc=0)
    assert proc.stdout.splitlines() == [
        f"{folder}: warning: 'summary' is not part of the Agent Skills format (a Lily key)",
        f"{folder}: warning: 'command' is not part of the Agent Skills format (a Lily key)",
        f"{folder}: warning: 'allowed-tools' must be a string (tool names separated by spaces)"]
    lily = env.cli("skills", "validate", "--lily", str(folder), check_rc=0)  # the loader's view
    assert "warning" not in lily.stdout


def test_strict_refuses_metadata_that_is_not_strings(env):
    # the issue-34 case: a map inside metadata (OpenClaw's shape), a list, a number
    folder = env.write_skill(env.base / "m", "weather", "name: weather\ndescription: d\n"
                             "metadata:\n  openclaw:\n    emoji: x\n  tags:\n    - a\n"
                             "  version: 2")
    proc = env.cli("skills", "validate", "--strict", str(folder), check_rc=1)
    assert proc.stdout.splitlines() == [
        f"{folder}: 'metadata.openclaw' must be a string, not a mapping",
        f"{folder}: 'metadata.tags' must be a string, not a list",
        f"{folder}: 'metadata.version' must be a string, not a number"]
    assert "0 of 1 skill(s) valid (strict Agent Skills rules)." in proc.stderr
