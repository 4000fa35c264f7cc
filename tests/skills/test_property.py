"""Property tests: parsing and loading never raise on arbitrary SKILL.md content, and every
candidate either loads or leaves a diagnostic."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lily_kernel.errors import SkillError
from lily_kernel.skills.eligibility import Host
from lily_kernel.skills.loader import build_snapshot
from lily_kernel.skills.paths import Root
from lily_kernel.skills.skill import Skill, parse
from lily_kernel.tools.builtin_tools import register_builtins
from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

KEYS = ["summary", "invocation_mode", "command", "command_tool", "requires_tools", "eligibility",
        "name", "description", "license", "compatibility", "metadata", "allowed-tools",
        "disable-model-invocation", "os", "env", "binaries", "author", "Summary", "x-y", "1"]
SCALARS = ["prompt_rewrite", "tool_dispatch", "scan_todos", "read", "linux", "win32", "plan",
           "true", "false", "yes", "null", "~", "0", "1.5", "-3", "2024-01-01", "''", '""',
           "'quoted'", '"dq"', "[]", "{}", "[a, b]", "{a: 1}", "&a x", "*a", "!tag x", "!!str 3",
           "|", ">", "- item", "---", "...", "#c", "a: b", "ä", "\u2028", "\t", "%", "@", "`"]


def yamlish_line(draw_key, draw_value, indent):
    return st.builds(lambda i, k, v: " " * i + f"{k}: {v}", indent, draw_key, draw_value)


@st.composite
def frontmatter_text(draw) -> str:
    """YAML-looking frontmatter: keys, nested blocks, lists, odd scalars and indentation."""
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["kv", "block_list", "block_map", "raw", "blank"]))
        key = draw(st.sampled_from(KEYS))
        value = draw(st.one_of(st.sampled_from(SCALARS),
                               st.text(min_size=0, max_size=20)))
        if kind == "kv":
            lines.append(f"{key}: {value}")
        elif kind == "block_list":
            lines.append(f"{key}:")
            for _ in range(draw(st.integers(0, 3))):
                lines.append(" " * draw(st.integers(0, 4)) + "- "
                             + draw(st.sampled_from(SCALARS)))
        elif kind == "block_map":
            lines.append(f"{key}:")
            for _ in range(draw(st.integers(0, 3))):
                lines.append(" " * draw(st.integers(1, 4)) + draw(st.sampled_from(KEYS)) + ": "
                             + draw(st.sampled_from(SCALARS)))
        elif kind == "raw":
            lines.append(draw(st.text(max_size=30)))
        else:
            lines.append("")
    return "\n".join(lines)


@st.composite
def skill_md_bytes(draw) -> bytes:
    """Either raw bytes, or a structured SKILL.md with YAML-ish frontmatter."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=400))
    fm = draw(frontmatter_text())
    body = draw(st.text(max_size=80))
    opener = draw(st.sampled_from(["---\n", "---\r\n", "\ufeff---\n", "--- \n", ""]))
    closer = draw(st.sampled_from(["\n---\n", "\r\n---\r\n", "\n---", "\n", "\n----\n"]))
    text = opener + fm + closer + body
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    return text.encode("utf-8", "surrogatepass")


@SETTINGS
@given(data=skill_md_bytes())
def test_parse_never_raises_anything_but_skill_error(data):
    try:
        skill = parse("prop_skill", "workspace", "/x/prop_skill", data)
    except SkillError as exc:
        assert str(exc)  # a readable reason
        return
    assert isinstance(skill, Skill)
    assert skill.name == "prop_skill"
    assert isinstance(skill.summary, str) and isinstance(skill.body, str)
    assert skill.invocation_mode in ("prompt_rewrite", "tool_dispatch")
    assert all(isinstance(t, str) for t in skill.requires_tools)


NAMES = st.text(alphabet="abcXYZ019-_. ", min_size=1, max_size=12).filter(
    lambda n: n not in (".", "..") and "/" not in n)


@SETTINGS
@given(files=st.dictionaries(NAMES, skill_md_bytes(), min_size=1, max_size=4))
def test_build_snapshot_never_raises_and_accounts_for_every_candidate(files):
    base = Path(tempfile.mkdtemp(prefix="lily-prop-"))
    try:
        root = base / "skills"
        root.mkdir()
        for name, data in files.items():
            (root / name).mkdir()
            (root / name / "SKILL.md").write_bytes(data)
        tools = ToolRegistry()
        register_builtins(tools, base)
        snap = build_snapshot((Root("workspace", root, True),), tools, ToolPolicy(),
                              host=Host("linux", {}, str(base)))
        names = snap.names()
        assert names == sorted(names)
        for name in files:
            if name.startswith("."):
                assert snap.get(name) is None
                assert not snap.for_skill(name)  # hidden: ignored entirely
                continue
            loaded = snap.get(name) is not None
            excluded = [d for d in snap.diagnostics
                        if d.skill == name and d.kind in ("skill_error", "ineligible")]
            assert loaded != bool(excluded), (name, snap.diagnostics)
            for d in excluded:
                assert d.reason and d.source == "workspace"
        # the same files give the same snapshot
        again = build_snapshot((Root("workspace", root, True),), tools, ToolPolicy(),
                               host=Host("linux", {}, str(base)))
        assert (again.hash, again.diagnostics, again.names()) == (snap.hash, snap.diagnostics,
                                                                  names)
    finally:
        shutil.rmtree(base, ignore_errors=True)
