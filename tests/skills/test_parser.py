"""docs/skill-format.md: parsing one SKILL.md (frontmatter rules, keys, types, names)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lily_kernel.errors import SkillError
from lily_kernel.skills import frontmatter
from lily_kernel.skills.skill import parse


def ok(data: bytes | str, name: str = "demo"):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return parse(name, "workspace", f"/roots/{name}", data)


def bad(data: bytes | str, name: str = "demo") -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    with pytest.raises(SkillError) as info:
        parse(name, "workspace", f"/roots/{name}", data)
    return str(info.value)


# -- frontmatter framing ---------------------------------------------------------

def test_no_frontmatter_means_defaults_and_whole_file_is_body():
    s = ok("# Title\n\nJust instructions.\n")
    assert s.body == "# Title\n\nJust instructions.\n"
    assert s.summary == "" and s.invocation_mode == "prompt_rewrite" and s.command is None
    assert s.frontmatter == {}


def test_utf8_bom_is_stripped():
    s = ok(b"\xef\xbb\xbf---\nsummary: with bom\n---\nbody\n")
    assert s.summary == "with bom"
    assert s.body == "body\n"
    assert not s.text.startswith("\ufeff")


def test_bom_without_frontmatter_is_not_part_of_body():
    s = ok(b"\xef\xbb\xbfplain body\n")
    assert s.body == "plain body\n"


def test_crlf_line_endings():
    s = ok(b"---\r\nsummary: crlf\r\ncommand: go\r\n---\r\nline 1\r\nline 2\r\n")
    assert s.summary == "crlf"
    assert s.command == "go"
    assert s.body == "line 1\nline 2\n"
    assert "\r" not in s.text


def test_bom_and_crlf_together():
    s = ok(b"\xef\xbb\xbf---\r\nsummary: both\r\n---\r\nbody\r\n")
    assert (s.summary, s.body) == ("both", "body\n")


def test_dashes_inside_a_value_do_not_split():
    s = ok("---\nsummary: before --- after\ndescription: '---'\n---\nreal body\n")
    assert s.summary == "before --- after"
    assert s.description == "---"
    assert s.body == "real body\n"


def test_indented_dashes_in_block_scalar_do_not_split():
    s = ok("---\nsummary: |\n  first\n  ---\n  last\n---\nbody\n")
    assert s.summary == "first\n---\nlast\n"
    assert s.body == "body\n"


def test_a_line_with_more_than_three_dashes_does_not_close():
    # '----' is not exactly '---': the frontmatter is still open, then closes later.
    s = ok("---\nsummary: x\n---\n")
    assert s.summary == "x"
    msg = bad("---\nsummary: x\n----\nbody\n")
    assert "closing" in msg


def test_closing_line_may_be_the_last_line_without_newline():
    s = ok("---\nsummary: tail\n---")
    assert s.summary == "tail" and s.body == ""


def test_empty_frontmatter_is_defaults():
    s = ok("---\n---\nbody\n")
    assert s.summary == "" and s.body == "body\n"


def test_first_line_must_be_exactly_three_dashes():
    # '--- ' (trailing space) or text before it: no frontmatter at all, the whole file is body.
    s = ok("--- \nsummary: x\n---\nbody\n")
    assert s.summary == ""
    assert s.body.startswith("--- \nsummary: x")


def test_no_closing_dashes_is_a_skill_error():
    msg = bad("---\nsummary: never closed\n\n# body\n")
    assert "no closing '---'" in msg


def test_invalid_yaml_is_a_skill_error():
    msg = bad("---\nsummary: [unclosed\n---\nbody\n")
    assert "invalid YAML frontmatter" in msg


@pytest.mark.parametrize("yaml_text, kind", [
    ("- a\n- b", "a list"),
    ("just a string", "a string"),
    ("42", "a int"),
])
def test_non_mapping_yaml_is_a_skill_error(yaml_text, kind):
    msg = bad(f"---\n{yaml_text}\n---\nbody\n")
    assert "must be a YAML mapping" in msg
    assert kind in msg


@pytest.mark.parametrize("yaml_text, word", [
    ("summary: &a hello\ndescription: *a", "anchors"),
    ("base: &b {x: 1}\nsummary: s", "anchors"),
    ("summary: !!str 12", "tags"),
    ("summary: !custom value", "tags"),
    ("metadata:\n  k: !!python/object:os.system x", "tags"),
])
def test_anchors_aliases_and_tags_are_refused(yaml_text, word):
    msg = bad(f"---\n{yaml_text}\n---\nbody\n")
    assert word in msg and "not allowed" in msg


def test_alias_alone_is_refused():
    msg = bad("---\nsummary: *nowhere\n---\nbody\n")
    assert "invalid YAML frontmatter" in msg


def test_ampersand_and_bang_inside_quoted_text_are_fine():
    s = ok("---\nsummary: 'R&D! and *stars*'\ndescription: \"a & b ! c\"\n---\nbody\n")
    assert s.summary == "R&D! and *stars*"
    assert s.description == "a & b ! c"


def test_not_utf8_is_a_skill_error():
    msg = bad(b"---\nsummary: \xff\xfe\n---\n")
    assert "UTF-8" in msg


# -- size caps --------------------------------------------------------------------

KIB = 1024


# (the part that grows, its size in KiB, and for a size over a cap, the words of the error)
CAPS = {
    "frontmatter just under 64 KiB": ("frontmatter", 63, None),
    "frontmatter over 64 KiB": ("frontmatter", 64, ("frontmatter", "64 KiB")),
    "file just under 256 KiB": ("body", 255, None),
    "file over 256 KiB": ("body", 256, ("SKILL.md", "256 KiB")),
}


@pytest.mark.parametrize(("part", "kib", "error"), CAPS.values(), ids=CAPS.keys())
def test_size_caps(part, kib, error):
    grown = ("x" if part == "frontmatter" else "y") * (kib * KIB)
    text = (f"---\nsummary: {grown}\n---\nbody\n" if part == "frontmatter"
            else f"---\nsummary: big body\n---\n{grown}")
    if error is None:
        s = ok(text)
        assert len(s.summary if part == "frontmatter" else s.body) == kib * KIB
    else:
        msg = bad(text)
        assert all(word in msg for word in error), msg


def test_caps_are_the_documented_sizes():
    assert frontmatter.MAX_FRONTMATTER_BYTES == 64 * KIB
    assert frontmatter.MAX_FILE_BYTES == 256 * KIB


# -- recognised keys: types ------------------------------------------------------------

WRONG_TYPES = [
    ("summary", "summary: [a, b]"),
    ("summary", "summary: 3"),
    ("invocation_mode", "invocation_mode: 3"),
    ("invocation_mode", "invocation_mode: fast"),
    ("command", "command: [plan]"),
    ("command", "command: Not Valid"),
    ("command", "command: 'a/b'"),
    ("command_tool", "command_tool: [t]"),
    ("requires_tools", "requires_tools: read"),
    ("requires_tools", "requires_tools: [read, 3]"),
    ("eligibility", "eligibility: [linux]"),
    ("eligibility", "eligibility: 3"),
    ("eligibility", "eligibility: true"),
    ("eligibility", "eligibility: {platform: [linux]}"),
    ("eligibility.os", "eligibility: {os: linux}"),
    ("eligibility.os", "eligibility: {os: [beos]}"),
    ("eligibility.env", "eligibility: {env: HOME}"),
    ("eligibility.binaries", "eligibility: {binaries: {git: yes}}"),
    ("name", "name: 3"),
    ("description", "description: {a: b}"),
    ("license", "license: [MIT]"),
    ("compatibility", "compatibility: 3.5"),
    ("metadata", "metadata: [a, b]"),
    ("metadata", "metadata: just text"),
    ("allowed-tools", "allowed-tools: 3"),
    ("allowed-tools", "allowed-tools: [Read, {x: 1}]"),
    ("disable-model-invocation", "disable-model-invocation: 'yes'"),
    ("disable-model-invocation", "disable-model-invocation: 1"),
    ("argument-hint", "argument-hint: 3"),
    ("argument-hint", "argument-hint: [file, 3]"),
    ("user-invocable", "user-invocable: 'no'"),
    ("model", "model: [sonnet]"),
    ("context", "context: {fork: true}"),
    ("eligibility.any_binaries", "eligibility: {any_binaries: claude}"),
    ("metadata.openclaw", "metadata: {openclaw: [bins]}"),
    ("metadata.openclaw.requires", "metadata: {openclaw: {requires: [memo]}}"),
    ("metadata.openclaw.requires.bins", "metadata: {openclaw: {requires: {bins: [3]}}}"),
    ("metadata.clawdbot.os", "metadata: {clawdbot: {os: {darwin: 1}}}"),
    ("metadata.moltbot.always", "metadata: {moltbot: {always: 'yes'}}"),
    ("activity", "activity: [Create]"),
    ("activity", "activity: Teleport"),
]


@pytest.mark.parametrize("key, line", WRONG_TYPES, ids=[f"{k}:{v}" for k, v in WRONG_TYPES])
def test_wrong_type_or_value_names_the_key(key, line):
    msg = bad(f"---\n{line}\n---\nbody\n")
    assert f"'{key}'" in msg


def test_every_recognised_key_has_a_wrong_type_case():
    from lily_kernel.skills.skill import KNOWN_KEYS
    assert {k.split(".")[0] for k, _ in WRONG_TYPES} >= KNOWN_KEYS


def test_of_two_wrong_string_keys_the_first_in_the_file_is_named():
    # Either order: the check follows the file, not a fixed list of keys.
    assert "'summary'" in bad("---\nsummary: [a]\nlicense: [MIT]\n---\n")
    assert "'license'" in bad("---\nlicense: [MIT]\nsummary: [a]\n---\n")
    # Keys read only for /help (model, context) take part in that order too.
    assert "'context'" in bad("---\ncontext: [x]\ndescription: [a]\n---\n")
    assert "'description'" in bad("---\ndescription: [a]\ncontext: [x]\n---\n")
    # A wrong string key is named before a rule of another key is checked.
    assert "'command_tool'" in bad("---\nname: other\ncommand_tool: [t]\n---\n")


def test_an_os_rule_is_read_as_written_and_a_bad_list_fails():
    first = ok("---\neligibility:\n  os: [linux, darwin]\n---\n")
    again = ok("---\neligibility: {os: [linux, darwin]}\n---\n", name="other")
    assert again.eligibility == first.eligibility
    assert again.eligibility.os == ("linux", "darwin")
    assert ok("---\neligibility: {os: [darwin, linux]}\n---\n").eligibility.os == (
        "darwin", "linux")
    both = ok("---\neligibility: {os: [linux, darwin], env: [HOME]}\n---\n")
    assert both.eligibility.env == ("HOME",) and both.eligibility.os == ("linux", "darwin")
    # A longer list with an unknown OS, a list in it, a number: each is named.
    assert "'eligibility.os'" in bad("---\neligibility: {os: [linux, darwin, beos]}\n---\n")
    assert "'eligibility.os'" in bad("---\neligibility: {os: [linux, [darwin]]}\n---\n")
    assert "'eligibility.os'" in bad("---\neligibility: {os: [linux, darwin, 3]}\n---\n")
    # A mapping whose keys spell a good list is no list.
    assert "'eligibility.os'" in bad("---\neligibility: {os: {linux: 1, darwin: 2}}\n---\n")
    ok("---\neligibility: {os: [linux]}\n---\n")
    assert "'eligibility.os'" in bad("---\neligibility: {os: {linux: 1}}\n---\n")
    assert "'eligibility'" in bad("---\neligibility: [os]\n---\n")


def test_required_tools_are_read_in_order_and_a_bad_value_fails():
    first = ok("---\nrequires_tools: [read, list]\n---\n")
    again = ok("---\nrequires_tools:\n  - read\n  - list\n---\n", name="other")
    assert again.requires_tools == first.requires_tools == ("read", "list")
    assert ok("---\nrequires_tools: [list, read]\n---\n").requires_tools == ("list", "read")
    # No mapping, string, list with an empty or a non-string item.
    ok("---\nrequires_tools: [r, e, a, d]\n---\n")
    for value in ("read", "{read: 1, list: 2}", "[read, list, '']", "[read, [list]]",
                  "[read, list, 3]"):
        assert "'requires_tools'" in bad(f"---\nrequires_tools: {value}\n---\n"), value


def test_tool_dispatch_without_command_tool_is_a_skill_error():
    msg = bad("---\ninvocation_mode: tool_dispatch\n---\nbody\n")
    assert "command_tool" in msg and "tool_dispatch" in msg


def test_all_keys_of_the_right_type_load():
    s = ok("""---
name: demo
summary: Short.
description: Long description. Use when testing.
invocation_mode: tool_dispatch
command: demo-cmd
command_tool: scan_todos
requires_tools: [read, list]
eligibility:
  os: [linux, darwin]
  env: [HOME]
  binaries: [sh]
license: Apache-2.0
compatibility: Needs a shell
metadata:
  author: someone
  version: "1.0"
allowed-tools: Read Bash(git:*)
disable-model-invocation: true
---
body
""")
    assert s.summary == "Short."
    assert s.description == "Long description. Use when testing."
    assert s.invocation_mode == "tool_dispatch"
    assert s.command == "demo-cmd" and s.command_tool == "scan_todos"
    assert s.requires_tools == ("read", "list")
    assert s.eligibility.os == ("linux", "darwin")
    assert s.eligibility.env == ("HOME",) and s.eligibility.binaries == ("sh",)
    assert s.license == "Apache-2.0" and s.compatibility == "Needs a shell"
    assert dict(s.metadata) == {"author": "someone", "version": "1.0"}
    assert s.allowed_tools == ("Read", "Bash(git:*)")
    assert s.disable_model_invocation is True and s.model_invocable is False
    assert s.unknown_keys == ()


def test_skill_is_immutable():
    s = ok("---\nmetadata: {a: 1}\n---\n")
    with pytest.raises(AttributeError):
        s.summary = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.metadata["a"] = 2  # type: ignore[index]


# -- name ---------------------------------------------------------------------------

def test_name_must_equal_directory_name():
    msg = bad("---\nname: other-name\n---\nbody\n", name="demo")
    assert "'name'" in msg and "other-name" in msg and "demo" in msg


def test_name_equal_to_directory_loads():
    assert ok("---\nname: demo\n---\n", name="demo").name == "demo"


@pytest.mark.parametrize("dirname", [
    "Upper", "MixedCase", "has space", "-lead", "trail-", "_lead", "trail_",
    "double--dash", "double__under", "mixed-_sep", "dot.name", "ünïcode", "x" * 65,
])
def test_invalid_directory_names_are_skill_errors(dirname):
    msg = bad("---\nsummary: x\n---\n", name=dirname)
    assert "skill name" in msg
    if len(dirname) > 64:
        assert "64" in msg


@pytest.mark.parametrize("dirname", ["plan_compiler", "pdf-processing", "a", "x1", "a" * 64,
                                     "v2-tool_mix"])
def test_valid_directory_names_load(dirname):
    assert ok("---\nsummary: x\n---\n", name=dirname).name == dirname


INVALID_NAMES = ["Upper", "MixedCase", "has space", "-lead", "trail-", "_lead", "trail_",
                 "double--dash", "double__under", "mixed-_sep", "dot.name", "ünïcode", "x" * 65]
VALID_NAMES = ["plan_compiler", "pdf-processing", "a", "x1", "a" * 64, "v2-tool_mix", "42"]


def _is_name(name: str) -> bool:
    """The naming rule, spelled without a regular expression: lowercase letters and digits,
    runs of which single '-' or '_' join, 1 to 64 characters."""
    dashed = name.replace("_", "-")
    return (0 < len(name) <= 64 and set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-_")
            and dashed[0] != "-" and dashed[-1] != "-" and "--" not in dashed)


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(list("ab09-_/. A\né\r\t")), max_size=6))
def test_name_problem_is_the_naming_rule(name):
    from lily_kernel.skills.skill import name_problem
    assert (name_problem(name) is None) == _is_name(name), name


@pytest.mark.parametrize("dirname", ["demo\n", "demo\r\n", "\ndemo", "de\nmo", "demo\t"])
def test_a_name_with_a_line_break_is_refused_by_the_naming_rule(dirname):
    """``$`` matches before a final newline: the rule is matched whole (fullmatch). The
    message names the folder escaped, on one line."""
    msg = bad("---\nsummary: x\n---\n", name=dirname)
    assert msg == (f"skill name {dirname!r} is invalid: use lowercase letters and digits, "
                   "separated by single '-' or '_'")
    assert "\n" not in msg


def test_a_skill_folder_named_with_a_trailing_newline_is_a_skill_error(env):
    env.write_skill(env.ws_skills, "demo", "summary: x")
    env.write_skill(env.ws_skills, "demo\n", "summary: x")
    snap = env.snapshot()
    assert snap.names() == ["demo"]
    assert env.diag(snap, "skill_error", "demo\n").reason.startswith(
        "skill name 'demo\\n' is invalid: use lowercase letters")


def test_a_command_with_a_trailing_newline_is_refused():
    assert bad('---\ncommand: "demo\\n"\n---\n') == (
        "'command' 'demo\\n' must match ^[a-z0-9_-]+$")


def test_a_load_with_one_bad_name_names_it_and_loads_the_rest(env):
    for name in ("good-one", "Bad_Name", "good_two"):
        env.write_skill(env.ws_skills, name, "summary: x")
    snap = env.snapshot()
    assert snap.names() == ["good-one", "good_two"]
    assert "skill name 'Bad_Name' is invalid" in env.diag(snap, "skill_error", "Bad_Name").reason


def test_both_v0_and_agent_skills_naming_styles_load():
    v0 = ok("---\nsummary: plan\ncommand: plan\n---\n# Plan\n", name="plan_compiler")
    agent = ok("---\nname: pdf-processing\ndescription: Extracts text from PDFs. "
               "Use when the user has a PDF.\n---\n# PDF\n", name="pdf-processing")
    assert (v0.name, agent.name) == ("plan_compiler", "pdf-processing")
    assert agent.summary == agent.description


# -- unknown keys, case sensitivity ----------------------------------------------------

def test_unknown_keys_are_ignored_and_listed():
    s = ok("---\nsummary: s\nauthor: me\nx-custom: [1, 2]\n---\n")
    assert s.summary == "s"
    assert s.unknown_keys == ("author", "x-custom")


def test_keys_are_case_sensitive():
    s = ok("---\nSummary: not the summary\nCommand: nope\n---\n")
    assert s.summary == "" and s.command is None
    assert set(s.unknown_keys) == {"Summary", "Command"}


def test_non_string_key_is_a_skill_error():
    msg = bad("---\n1: one\n---\n")
    assert "key" in msg


# -- allowed-tools, disable-model-invocation, summary fallback ----------------------------

def test_allowed_tools_as_space_separated_string():
    assert ok("---\nallowed-tools: Read  Write Bash(git:*)\n---\n").allowed_tools == (
        "Read", "Write", "Bash(git:*)")


def test_allowed_tools_as_list():
    assert ok("---\nallowed-tools: [Read, Write]\n---\n").allowed_tools == ("Read", "Write")
    assert ok("---\nallowed-tools:\n  - Read\n  - Grep\n---\n").allowed_tools == ("Read", "Grep")


def test_disable_model_invocation_defaults_false():
    s = ok("---\nsummary: s\n---\n")
    assert s.disable_model_invocation is False and s.model_invocable is True
    s = ok("---\ndisable-model-invocation: false\n---\n")
    assert s.model_invocable is True


def test_summary_falls_back_to_description():
    s = ok("---\ndescription: The description.\n---\n")
    assert s.summary == "The description."


def test_explicit_summary_wins_over_description():
    s = ok("---\nsummary: The summary.\ndescription: The description.\n---\n")
    assert s.summary == "The summary." and s.description == "The description."


def test_summary_defaults_to_empty():
    assert ok("---\nlicense: MIT\n---\n").summary == ""


def test_empty_eligibility_os_list_means_any_os():
    s = ok("---\neligibility:\n  os: []\n  env: []\n  binaries: []\n---\n")
    assert s.eligibility.os is None


def test_a_list_key_names_its_first_bad_item():
    """A list of strings must hold non-empty strings only (docs/skill-format.md#keys); the
    first bad item is the one named, whatever the items before it."""
    found = "must be a list of non-empty strings; found"
    for line, reason in (("requires_tools: [read, '']", f"'requires_tools' {found} a string"),
                         ("requires_tools: [read, 3, '']", f"'requires_tools' {found} a number"),
                         ("requires_tools: ['', 3]", f"'requires_tools' {found} a string"),
                         ("eligibility: {os: [linux, ~]}", f"'eligibility.os' {found} null"),
                         ("eligibility: {env: [A, [B]]}", f"'eligibility.env' {found} a list"),
                         ("allowed-tools: [Read, yes]", f"'allowed-tools' {found} a boolean")):
        assert bad(f"---\n{line}\n---\n") == reason, line
    assert ok("---\nrequires_tools: [read, write]\n---\n").requires_tools == ("read", "write")
