"""The Type-section parse of typed skills (docs/typed-skills.md#declaration).

Declarations are loaded through the real loader (``build_snapshot`` over a
temporary skill root): a malformed one must exclude its skill with a
``skill_error`` whose reason names the SKILL.md line, computed here from the
file the test wrote. Single values go through
:func:`typed_declaration.check_value`, URIs through
:func:`typed_declaration.is_https_uri`; ``/help`` of a typed skill shows its
parameters as a table. Nothing here calls a model. The run-time value check is
tests/typed/test_values.py; name resolution is tests/typed/test_contacts.py.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from agent_support import run_command

from lily_kernel.commands.results import HelpPage
from lily_kernel.errors import ParamError, TypedError
from lily_kernel.session.session import Session
from lily_kernel.skills import typed_declaration
from lily_kernel.skills.eligibility import Host
from lily_kernel.skills.loader import build_snapshot
from lily_kernel.skills.paths import Root
from lily_kernel.skills.typed_declaration import check_value
from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry

# -- building SKILL.md files -------------------------------------------------------------

DEFAULT_ACL = "- write: ['app.sound.volume', 'app.sound.tone']\n- read:  ['app']"
DEFAULT_PARAMS = "- volume: number (required) — how loud\n    min: 0\n    max: 10"


def doc(*, kind: str | None = "internal", acl: str | None = DEFAULT_ACL,
        params: str | None = DEFAULT_PARAMS, purpose: str | None = "Change the sound settings.",
        behaviour: str | None = "1. Propose the change.", numbered: bool = True,
        frontmatter: str | None = "name: {name}\ndescription: A test skill."):
    """A typed SKILL.md; a section is left out when its argument is None.

    ``kind`` is the text of the Type section. ``acl`` defaults to an ACL only for
    internal skills (pass it explicitly to give an external skill one).
    """
    def head(n: int, title: str) -> str:
        return f"## {n}. {title}" if numbered else f"## {title}"

    parts = []
    if frontmatter is not None:
        parts.append(f"---\n{frontmatter}\n---")
    parts.append("# A typed skill\n\nSome prose before the sections.")
    if purpose is not None:
        parts.append(f"{head(1, 'Purpose')}\n{purpose}")
    if kind is not None:
        parts.append(f"{head(2, 'Type')}\n{kind}")
    if acl is not None and (kind == "internal" or acl is not DEFAULT_ACL):
        parts.append(f"{head(3, 'Config ACL')}\n{acl}")
    if params is not None:
        parts.append(f"{head(4, 'Parameters')}\n{params}")
    if behaviour is not None:
        parts.append(f"{head(5, 'Behaviour')}\n{behaviour}")
    return "\n\n".join(parts) + "\n"


def line_of(text: str, line: str, occurrence: int = 1) -> int:
    """The 1-based SKILL.md line number of the ``occurrence``-th line equal to ``line``."""
    lines = text.split("\n")
    hits = [i + 1 for i, x in enumerate(lines) if x == line]
    assert len(hits) >= occurrence, f"{line!r} is not in the file:\n{text}"
    return hits[occurrence - 1]


def names_line(reason: str, n: int) -> bool:
    return re.search(rf"\bline {n}\b", reason) is not None


def snapshot_of(root: Path):
    return build_snapshot((Root("workspace", root, True),), ToolRegistry(), ToolPolicy(),
                          host=Host("linux", {}, ""))


def load(tmp_path: Path, name: str, text: str | bytes):
    """Write ``text`` as the SKILL.md of ``name`` (next to a valid typed skill) and load the root."""
    root = tmp_path / "skills"
    for skill, content in ((name, text), ("good_neighbour", doc().replace("{name}", "good_neighbour"))):
        (root / skill).mkdir(parents=True, exist_ok=True)
        data = content if isinstance(content, bytes) else content.replace("{name}", skill).encode()
        (root / skill / "SKILL.md").write_bytes(data)
    snap = snapshot_of(root)
    assert "good_neighbour" in snap.names(), snap.diagnostics  # exclusion is per skill
    return snap


def excluded_reason(snap, name: str) -> str:
    assert snap.get(name) is None, f"{name} was loaded"
    found = [d for d in snap.diagnostics if d.skill == name]
    assert [d.kind for d in found] == ["skill_error"], found
    return found[0].reason


def loaded(snap, name: str):
    skill = snap.get(name)
    assert skill is not None, snap.diagnostics
    assert skill.typed is not None
    return skill


# -- parsing: valid declarations ---------------------------------------------------------

FULL_EXTERNAL_PARAMS = """\
- recipient: actorUri (required) — who receives it
    resolve: contact
- amount: number (optional) — dollar amount
    min: 0.01
    max: 100
    default: 5
- memo: string (optional) — a note
    default: "thanks, friend"
- urgent: boolean (optional) — flag it
    default: false
- tone: enum (optional) — how it sounds
    enum: [chime, alert, silent]
    default: chime
- post: objectId (optional) — the post it answers"""


def test_every_type_and_constraint_line_is_parsed(tmp_path):
    text = doc(kind="external", params=FULL_EXTERNAL_PARAMS,
               frontmatter="name: {name}\nactivity: Create")
    skill = loaded(load(tmp_path, "pay", text), "pay")
    spec = skill.typed
    assert spec.kind == "external" and spec.activity == "Create"
    assert spec.purpose == "Change the sound settings."
    assert spec.behaviour == "1. Propose the change."
    assert (spec.acl_read, spec.acl_write) == ((), ())
    assert [(p.name, p.type, p.required) for p in spec.params] == [
        ("recipient", "actorUri", True), ("amount", "number", False), ("memo", "string", False),
        ("urgent", "boolean", False), ("tone", "enum", False), ("post", "objectId", False)]
    p = {x.name: x for x in spec.params}
    assert p["recipient"].resolve == "contact" and p["recipient"].description == "who receives it"
    assert (p["amount"].min, p["amount"].max, p["amount"].default) == (0.01, 100, 5)
    assert p["memo"].default == "thanks, friend" and p["memo"].has_default
    assert p["urgent"].default is False and p["urgent"].has_default
    assert p["tone"].enum == ("chime", "alert", "silent") and p["tone"].default == "chime"
    assert not p["post"].has_default and p["post"].default is None
    # Each parameter remembers its own SKILL.md line (the frontmatter counts).
    for name in p:
        first = next(x for x in text.split("\n") if x.startswith(f"- {name}:"))
        assert p[name].line == line_of(text.replace("{name}", "pay"), first)
    assert skill.summary == "Change the sound settings."  # no description: Purpose is the summary


def test_numbered_and_unnumbered_headings_declare_the_same_skill(tmp_path):
    numbered = loaded(load(tmp_path / "a", "s", doc(numbered=True)), "s")
    plain = loaded(load(tmp_path / "b", "s", doc(numbered=False)), "s")
    assert numbered.typed == plain.typed
    assert numbered.typed.kind == "internal"
    assert numbered.typed.acl_write == ("app.sound.volume", "app.sound.tone")
    assert numbered.typed.acl_read == ("app",)


def test_without_frontmatter_the_body_starts_at_line_one(tmp_path):
    text = doc(frontmatter=None, params="- volume: integer (required) — how loud")
    reason = excluded_reason(load(tmp_path, "s", text), "s")
    assert names_line(reason, line_of(text, "- volume: integer (required) — how loud")), reason


def test_crlf_and_bom_keep_line_numbers(tmp_path):
    text = doc(params="- volume: number (required) — how loud\n    default: 3")
    data = b"\xef\xbb\xbf" + text.replace("{name}", "s").replace("\n", "\r\n").encode()
    reason = excluded_reason(load(tmp_path, "s", data), "s")
    assert names_line(reason, line_of(text, "    default: 3")), reason


def test_seed_layout_with_fenced_acl_and_parameters(tmp_path):
    text = doc(acl="```\n- write: ['app.sound.volume']\n- read:  ['app']\n```",
               params="```\n- volume: number (required) — how loud\n    min: 0\n    max: 10\n```")
    spec = loaded(load(tmp_path, "s", text), "s").typed
    assert spec.acl_write == ("app.sound.volume",) and spec.acl_read == ("app",)
    assert [(p.name, p.min, p.max) for p in spec.params] == [("volume", 0, 10)]


def test_internal_parameters_set_a_config_path(tmp_path):
    text = doc(params="- volume: number (required) — implicit: the write path ending in its name\n"
                      "- level: enum (optional) — explicit\n"
                      "    enum: [low, high]\n"
                      "    config: app.sound.tone")
    spec = loaded(load(tmp_path, "s", text), "s").typed
    assert {p.name: p.config for p in spec.params} == {"volume": "app.sound.volume",
                                                       "level": "app.sound.tone"}


def test_enum_values_and_string_defaults_are_kept_as_written(tmp_path):
    text = doc(kind="external", params="- state: enum (optional) — s\n"
                                       "    enum: [true, false, auto, 1e3, 'on']\n"
                                       "    default: true\n"
                                       "- word: string (optional) — w\n"
                                       "    default: false\n"
                                       "- quoted: string (optional) — q\n"
                                       "    default: '  padded  '")
    p = {x.name: x for x in loaded(load(tmp_path, "s", text), "s").typed.params}
    assert p["state"].enum == ("true", "false", "auto", "1e3", "on")
    assert p["state"].default == "true"
    assert p["word"].default == "false" and p["quoted"].default == "  padded  "
    assert check_value(p["state"], "true") == "true"
    with pytest.raises(ParamError):
        check_value(p["state"], "True")


def test_huge_numbers_in_a_declaration_do_not_break_the_loader(tmp_path):
    huge = "1" + "0" * 400
    text = doc(params=f"- volume: number (required) — v\n    min: 0\n    max: {huge}")
    spec = loaded(load(tmp_path, "s", text), "s").typed
    assert check_value(spec.params[0], 10 ** 399) == 10 ** 399
    with pytest.raises(ParamError, match=f"at most {huge}, not"):
        check_value(spec.params[0], 10 ** 401)


def test_activity_frontmatter_picks_the_activity_type(tmp_path):
    text = doc(kind="external", params="- whom: actorUri (required) — who to follow",
               frontmatter="name: {name}\ndescription: d\nactivity: Follow")
    assert loaded(load(tmp_path, "s", text), "s").typed.activity == "Follow"


def test_headings_inside_code_fences_are_not_sections(tmp_path):
    text = doc(behaviour="1. Propose.\n\n```\n## Purpose\nnot the purpose\n## Type\nexternal\n```")
    spec = loaded(load(tmp_path, "s", text), "s").typed
    assert spec.kind == "internal" and spec.purpose == "Change the sound settings."


def test_the_typed_examples_are_off_by_default(tmp_path):
    # issue 34 §6: a notebook user's bundle holds no messaging skills; SKILLS_EXAMPLES=1 adds them
    off = Session(workspace=tmp_path, env=_session_env(tmp_path, examples=False), journal=False)
    assert {"read_receipts", "send_message"}.isdisjoint(off.snapshot.names())
    assert {"plan_compiler", "todo_scan"} <= set(off.snapshot.names())
    assert not [d for d in off.snapshot.diagnostics if d.skill in ("read_receipts",
                                                                  "send_message")]
    on = Session(workspace=tmp_path, env=_session_env(tmp_path), journal=False)
    assert on.snapshot.get("send_message").source == "examples"
    assert set(on.snapshot.names()) == set(off.snapshot.names()) | {"read_receipts",
                                                                   "send_message"}


def test_the_bundled_examples_load(tmp_path):
    session = Session(workspace=tmp_path, env=_session_env(tmp_path, bundled=None), journal=False)
    rr = session.snapshot.get("read_receipts")
    sm = session.snapshot.get("send_message")
    assert rr is not None and sm is not None, session.snapshot.diagnostics
    assert rr.typed.kind == "internal"
    assert rr.typed.acl_write == ("messaging.rcs.read_receipts",)
    assert rr.typed.acl_read == ("messaging.rcs",)
    assert [(p.name, p.type, p.required, p.config) for p in rr.typed.params] == [
        ("read_receipts", "boolean", True, "messaging.rcs.read_receipts")]
    assert sm.typed.kind == "external" and sm.typed.activity == "Create"
    assert [(p.name, p.type, p.required, p.resolve) for p in sm.typed.params] == [
        ("recipient", "actorUri", True, "contact"), ("content", "string", True, None)]
    assert session.snapshot.aliases["receipts"] == "read_receipts"
    assert session.snapshot.aliases["send"] == "send_message"


# -- parsing: malformed declarations exclude the skill, naming the line ------------------

# (id, doc() arguments, the offending line, a fragment of the reason)
MALFORMED = [
    ("unknown type", {"params": "- volume: integer (required) — how loud"},
     "- volume: integer (required) — how loud", "unknown type 'integer'"),
    ("enum without values", {"params": "- tone: enum (required) — the tone"},
     "- tone: enum (required) — the tone", "needs 'enum: [values]'"),
    ("enum with an empty list", {"params": "- tone: enum (required) — t\n    enum: []"},
     "    enum: []", "needs 'enum: [values]'"),
    ("enum not a list", {"params": "- tone: enum (required) — t\n    enum: chime, alert"},
     "    enum: chime, alert", "as a list"),
    ("enum values repeat", {"params": "- tone: enum (required) — t\n    enum: [a, b, a]"},
     "    enum: [a, b, a]", "repeat"),
    ("enum values on a string", {"params": "- tone: string (required) — t\n    enum: [a, b]"},
     "    enum: [a, b]", "only for enum parameters"),
    ("enum values on a boolean", {"params": "- tone: boolean (required) — t\n    enum: [a]"},
     "    enum: [a]", "only for enum parameters"),
    ("min greater than max",
     {"params": "- volume: number (required) — v\n    min: 5\n    max: 1"},
     "    max: 1", "min 5 is greater than max 1"),
    ("min on a string", {"params": "- volume: string (required) — v\n    min: 1"},
     "    min: 1", "'min' is only for number parameters"),
    ("max on a boolean", {"params": "- volume: boolean (required) — v\n    max: 1"},
     "    max: 1", "'max' is only for number parameters"),
    ("min on an enum", {"params": "- tone: enum (required) — t\n    enum: [a]\n    min: 0"},
     "    min: 0", "'min' is only for number parameters"),
    ("min not a number", {"params": "- volume: number (required) — v\n    min: low"},
     "    min: low", "'min' must be a number"),
    ("max infinite", {"params": "- volume: number (required) — v\n    max: 1e999"},
     "    max: 1e999", "'max' must be a number"),
    ("default above max",
     {"params": "- volume: number (optional) — v\n    min: 0\n    max: 10\n    default: 11"},
     "    default: 11", "at most 10"),
    ("default below min",
     {"params": "- volume: number (optional) — v\n    min: 0.5\n    default: 0.25"},
     "    default: 0.25", "at least 0.5"),
    ("default not in the enum (case matters)",
     {"params": "- tone: enum (optional) — t\n    enum: [chime, alert]\n    default: Chime"},
     "    default: Chime", "one of chime, alert"),
    ("default of the wrong type (number)",
     {"params": "- volume: number (optional) — v\n    default: loud"},
     "    default: loud", "must be a number"),
    ("default of the wrong type (boolean)",
     {"params": "- tone: boolean (optional) — t\n    default: yes"},
     "    default: yes", "must be true or false"),
    ("default of the wrong type (actorUri)",
     {"kind": "external",
      "params": "- whom: actorUri (optional) — w\n    default: http://bob.example/users/bob"},
     "    default: http://bob.example/users/bob", "absolute https URI"),
    ("default of the wrong type (objectId)",
     {"kind": "external", "params": "- post: objectId (optional) — p\n    default: objects/1"},
     "    default: objects/1", "absolute https URI"),
    ("default on a required parameter",
     {"params": "- volume: number (required) — v\n    default: 3"},
     "    default: 3", "a required parameter cannot have a default"),
    ("ACL on an external skill",
     {"kind": "external", "acl": "- write: ['app.sound']", "params": "- text: string (required) — t"},
     "## 3. Config ACL", "for internal skills only"),
    ("internal skill without an ACL", {"acl": None},
     "## 2. Type", "needs a 'Config ACL' section"),
    ("unknown resolver",
     {"kind": "external", "params": "- whom: actorUri (required) — w\n    resolve: phonebook"},
     "    resolve: phonebook", "unknown resolver 'phonebook'"),
    ("resolver producing the wrong type",
     {"kind": "external", "params": "- whom: string (required) — w\n    resolve: contact"},
     "    resolve: contact", "produces actorUri, not string"),
    ("duplicate parameter",
     {"params": "- volume: number (required) — v\n- volume: number (optional) — again"},
     "- volume: number (optional) — again", "declared twice"),
    ("bad ACL path (uppercase)", {"acl": "- write: ['App.Sound']\n- read: ['app']"},
     "- write: ['App.Sound']", "'App.Sound' is not a config path"),
    ("bad ACL path (empty segment)", {"acl": "- write: ['app.sound']\n- read: ['app..x']"},
     "- read: ['app..x']", "'app..x' is not a config path"),
    ("ACL line neither read nor write", {"acl": "- write: ['app.sound']\n- admin: ['app']"},
     "- admin: ['app']", "Config ACL lines look like"),
    ("bad config path", {"params": "- volume: number (required) — v\n    config: app..volume"},
     "    config: app..volume", "not a config path"),
    ("unknown constraint", {"params": "- volume: number (required) — v\n    maximum: 3"},
     "    maximum: 3", "unknown constraint"),
    ("constraint given twice", {"params": "- volume: number (required) — v\n    min: 1\n    min: 2"},
     "    min: 2", "given twice"),
    ("constraint before any parameter", {"params": "    min: 1\n- volume: number (required) — v"},
     "    min: 1", "must follow a parameter line"),
    ("malformed parameter line", {"params": "- volume number required"},
     "- volume number required", "a parameter line looks like"),
    ("Type neither internal nor external", {"kind": "sometimes"},
     "## 2. Type", "must say internal or external"),
    ("Type both internal and external", {"kind": "internal or external"},
     "## 2. Type", "must say internal or external"),
    ("Type capitalised", {"kind": "Internal"},
     "## 2. Type", "must say internal or external"),
    ("empty Purpose", {"purpose": ""}, "## 1. Purpose", "Purpose section is empty"),
]


@pytest.mark.parametrize("kwargs, bad_line, fragment", [m[1:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])
def test_malformed_declaration_excludes_the_skill_naming_the_line(tmp_path, kwargs, bad_line,
                                                                  fragment):
    text = doc(**kwargs)
    reason = excluded_reason(load(tmp_path, "broken", text), "broken")
    assert fragment in reason, reason
    expected = line_of(text, bad_line)
    assert names_line(reason, expected), f"expected line {expected}: {reason}"


@pytest.mark.parametrize("section", ["Purpose", "Parameters", "Behaviour"])
def test_missing_section_excludes_the_skill(tmp_path, section):
    text = doc(**{{"Parameters": "params"}.get(section, section.lower()): None})
    reason = excluded_reason(load(tmp_path, "broken", text), "broken")
    assert f"'{section}' section is missing" in reason, reason


def test_missing_type_section_with_activity_excludes_the_skill(tmp_path):
    text = doc(kind=None, frontmatter="name: {name}\ndescription: d\nactivity: Create")
    reason = excluded_reason(load(tmp_path, "broken", text), "broken")
    assert "'Type' section is missing" in reason, reason


def test_without_a_type_section_a_skill_is_an_ordinary_prompt_skill(tmp_path):
    skill = load(tmp_path, "plain", doc(kind=None)).get("plain")
    assert skill is not None and skill.typed is None


@pytest.mark.parametrize("kwargs, fragment", [
    ({"kind": "external", "params": "- text: string (required) — t",
      "frontmatter": "name: {name}\nactivity: Dance"}, "'activity' must be one of"),
    ({"kind": "external", "params": "- text: string (required) — t",
      "frontmatter": "name: {name}\nactivity: create"}, "'activity' must be one of"),
    ({"kind": "external", "params": "- text: string (required) — t",
      "frontmatter": "name: {name}\nactivity: [Create]"}, "'activity' must be a string"),
    ({"frontmatter": "name: {name}\nactivity: Create"}, "'activity' is for external skills only"),
], ids=["unknown", "wrong case", "not a string", "on an internal skill"])
def test_bad_activity_key_excludes_the_skill_naming_the_key(tmp_path, kwargs, fragment):
    reason = excluded_reason(load(tmp_path, "broken", doc(**kwargs)), "broken")
    assert fragment in reason, reason


# -- /help shows the parameters as a table -------------------------------------------------

def _session_env(base: Path, bundled: Path | None = None, examples: bool = True,
                 ) -> dict[str, str]:
    (base / "ws_skills").mkdir(parents=True, exist_ok=True)
    (base / "user_skills").mkdir(parents=True, exist_ok=True)
    env = {"SKILLS_WORKSPACE_DIR": str(base / "ws_skills"),
           "SKILLS_USER_DIR": str(base / "user_skills"), "HOME": str(base / "home")}
    if examples:  # Lily's example skills (the typed messaging ones), off by default
        env["SKILLS_EXAMPLES"] = "1"
    if bundled is not None:
        env["SKILLS_BUNDLED_DIR"] = str(bundled)
    return env


def _table_rows(markdown: str) -> dict[str, list[str]]:
    rows = {}
    for line in markdown.splitlines():
        m = re.match(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \|(.*)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split(" | ")]
    return rows


def test_help_shows_the_parameters_as_a_table(tmp_path):
    env = _session_env(tmp_path, bundled=tmp_path / "no_bundled")
    (tmp_path / "no_bundled").mkdir()
    folder = Path(env["SKILLS_WORKSPACE_DIR"]) / "pay"
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        doc(kind="external", params=FULL_EXTERNAL_PARAMS).replace("{name}", "pay"))
    session = Session(workspace=tmp_path, env=env, journal=False)
    page = run_command(session, "/help pay")
    assert isinstance(page, HelpPage)
    md = page.markdown
    assert "| parameter | type | required | constraints | description |" in md
    rows = _table_rows(md)
    expected = {  # name: (type, required, fragments of the constraints cell)
        "recipient": ("actorUri", "yes", ["resolved by contact"]),
        "amount": ("number", "no", ["≥ 0.01", "≤ 100", "default 5"]),
        "memo": ("string", "no", ["default 'thanks, friend'"]),
        "urgent": ("boolean", "no", ["default False"]),
        "tone": ("enum", "no", ["one of chime, alert, silent", "default 'chime'"]),
        "post": ("objectId", "no", ["—"]),
    }
    assert set(rows) >= set(expected), md
    for name, (ptype, required, fragments) in expected.items():
        cells = rows[name]
        assert cells[0] == ptype and cells[1] == required, (name, cells)
        for fragment in fragments:
            assert fragment in cells[2], (name, cells)
    assert "Sends an ActivityStreams **Create** activity." in md


def test_help_of_an_internal_skill_shows_its_acl(tmp_path):
    session = Session(workspace=tmp_path, env=_session_env(tmp_path), journal=False)
    md = run_command(session, "/help read_receipts").markdown
    rows = _table_rows(md)
    assert rows["read_receipts"][:3] == ["boolean", "yes", "sets messaging.rcs.read_receipts"]
    assert "Config ACL: read `messaging.rcs`; write `messaging.rcs.read_receipts`." in md
    assert '/skill read_receipts {"read_receipts": "…"}' in md


def test_typed_error_is_a_value_error_naming_the_line():
    with pytest.raises(TypedError, match=r"^line 8: parameter 'x' has unknown type 'list'"):
        typed_declaration.parse("## Purpose\np\n## Type\nexternal\n## Behaviour\nb\n"
                                "## Parameters\n- x: list (required) — no\n")


# -- loose ends found in review ------------------------------------------------

def test_type_heading_inside_a_code_fence_does_not_make_a_skill_typed(tmp_path):
    from lily_kernel.skills.skill import parse
    body = ("# Writing typed skills\n\nAn example:\n\n```markdown\n## Purpose\nx\n\n## Type\n"
            "internal\n```\n")
    skill = parse("howto", "workspace", str(tmp_path), body.encode())
    assert skill.typed is None


def test_behavior_spelling_is_accepted():
    spec = typed_declaration.parse("## Purpose\nx\n## Type\nexternal\n## Parameters\n"
                                   "- content: string (required) — text\n## Behavior\n1. do it\n")
    assert spec.behaviour == "1. do it"


@pytest.mark.parametrize("uri", ["https://a.example:99999/x", "https://a.example:port/x"])
def test_uri_with_an_invalid_port_is_refused(uri):
    assert not typed_declaration.is_https_uri(uri)


@pytest.mark.parametrize("text", ["messaging.rcs\n", "messaging.rcs\nx", "\nmessaging.rcs",
                                  "Messaging.rcs", "messaging..rcs", ""])
def test_a_config_path_is_the_whole_text_never_with_a_trailing_newline(text):
    """A config path (an ACL entry, a parameter's config:) is matched whole: anchored with
    "$", "messaging.rcs\\n" passed, as "$" also matches before a final newline."""
    assert typed_declaration.is_config_path("messaging.rcs")
    assert not typed_declaration.is_config_path(text)
