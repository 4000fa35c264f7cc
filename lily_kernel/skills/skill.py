"""Parse one skill directory's SKILL.md into an immutable :class:`Skill`.

Every rule of docs/skill-format.md that can be checked from the file alone lives here; the
rules that need the other skills or the tool registry (built-in command
collisions, alias clashes, ``command_tool`` registration, eligibility) live in
:mod:`lily_kernel.skills.loader`.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from lily_kernel.errors import FrontmatterError, SkillError, TypedError
from lily_kernel.skills import frontmatter, openclaw

if TYPE_CHECKING:  # the '## Type' section is parsed by skills/typed_declaration.py
    from lily_kernel.skills.typed_declaration import TypedSpec

NAME_RE = re.compile(r"^[a-z0-9]+(?:[_-][a-z0-9]+)*$")
COMMAND_RE = re.compile(r"[a-z0-9_-]+\Z")  # with match(): the whole string, no final newline
MAX_NAME_LEN = 64
INVOCATION_MODES = ("prompt_rewrite", "tool_dispatch")
OS_NAMES = ("darwin", "linux", "win32")
ELIGIBILITY_KEYS = ("os", "env", "binaries", "any_binaries")

# Keys Lily reads. Everything else is kept in ``frontmatter`` and listed as a note.
V0_KEYS = ("summary", "invocation_mode", "command", "command_tool", "requires_tools", "eligibility")
AGENT_SKILLS_KEYS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
# Claude Code's keys (docs/skills-compat.md#claude-code-conventions); Lily acts on the
# first three and shows the others in /help as declared, not enforced.
CLAUDE_CODE_KEYS = ("argument-hint", "disable-model-invocation", "user-invocable", "model",
                    "context")
NOT_ENFORCED_KEYS = ("allowed-tools", "model", "context")
EXTRA_KEYS = ("activity",)  # typed external skills
KNOWN_KEYS = frozenset(V0_KEYS + AGENT_SKILLS_KEYS + CLAUDE_CODE_KEYS + EXTRA_KEYS)
MAX_DESCRIPTION = 1024  # the Agent Skills limit; over it, the loader adds a note


@dataclass(frozen=True)
class Eligibility:
    """Where a skill may run: operating systems, variables and binaries it needs."""
    os: tuple[str, ...] | None = None  # None: any OS
    env: tuple[str, ...] = ()
    binaries: tuple[str, ...] = ()
    any_binaries: tuple[str, ...] = ()  # at least one on PATH

    def as_dict(self) -> dict[str, Any]:
        """The rules as JSON data."""
        return {"os": list(self.os) if self.os is not None else None,
                "env": list(self.env), "binaries": list(self.binaries),
                "any_binaries": list(self.any_binaries)}


@dataclass(frozen=True)
class Skill:
    """One parsed skill (docs/skill-format.md)."""
    name: str
    source: str  # workspace | user | bundled
    path: str  # the skill directory
    text: str  # the whole SKILL.md, decoded
    body: str
    summary: str = ""
    description: str = ""
    invocation_mode: str = "prompt_rewrite"
    command: str | None = None
    command_tool: str | None = None
    requires_tools: tuple[str, ...] = ()
    eligibility: Eligibility = Eligibility()
    license: str | None = None
    compatibility: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    allowed_tools: tuple[str, ...] = ()
    disable_model_invocation: bool = False
    unknown_keys: tuple[str, ...] = ()
    frontmatter: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    typed: TypedSpec | None = None  # when the body declares a typed skill (docs/typed-skills.md#declaration)
    openclaw: Any = None  # an openclaw.OpenClawGate when metadata.openclaw (or older) gates it

    @property
    def skill_md(self) -> str:
        """The path of the skill's SKILL.md."""
        return self.path.rstrip("/\\") + "/SKILL.md"

    @property
    def model_invocable(self) -> bool:
        """False for ``disable-model-invocation: true``: left out of the model's index and
        refused by ``load_skill`` unless the user forced the skill."""
        return not self.disable_model_invocation

    @property
    def user_invocable(self) -> bool:
        """False for ``user-invocable: false``: ``/skill`` and the alias refuse it; only the
        model may load it (parsing has checked the value is a boolean)."""
        return self.frontmatter.get("user-invocable", True) is not False

    @property
    def argument_hint(self) -> str | None:
        """Claude Code's ``argument-hint`` as text (``[a, b]`` in YAML reads back as ``[a] [b]``)."""
        hint = self.frontmatter.get("argument-hint")
        if hint is None or hint == "":
            return None
        if isinstance(hint, list):
            return " ".join(f"[{h}]" for h in hint)
        return str(hint)

    def declared_not_enforced(self) -> list[tuple[str, Any]]:
        """Keys the skill declares that Lily shows but does not act on (for /help)."""
        fm = self.frontmatter
        return [(k, fm[k]) for k in NOT_ENFORCED_KEYS if k in fm]


def body_summary(body: str, limit: int = 200) -> str:
    """The first paragraph of ``body`` that is prose (not a heading, fence or comment),
    on one line and at most ``limit`` characters; the index's stand-in for a missing
    description (docs/skills-compat.md#notes)."""
    fallback = ""
    for para in body.split("\n\n"):
        text = para.strip()
        if not text or text.startswith(("```", "~~~", "<!--", "---")):
            continue
        if text.startswith("#"):
            fallback = fallback or text.lstrip("#").strip().split("\n")[0]
            continue
        fallback = text
        break
    text = " ".join(fallback.split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid skill name, or None when it is."""
    if not name:
        return "skill name is empty"
    if len(name) > MAX_NAME_LEN:
        return f"skill name '{name}' is {len(name)} characters; the limit is {MAX_NAME_LEN}"
    if not NAME_RE.match(name):
        return (f"skill name '{name}' is invalid: use lowercase letters and digits, "
                "separated by single '-' or '_'")
    return None


def all_names_valid(names: list[str]) -> bool:
    """True when each of ``names`` is a valid skill name (:func:`name_problem` says None of
    each), told for them all at once, for a load; else False. Each is lowercase letters and
    digits, runs of which single '-' or '_' join: "/".join(names) holds no other character,
    and, with both separators and '/' read as '-', starts and ends with no '-' and holds
    no two together. (No folder's name holds a '/'; the count of them checks it.)"""
    if not names:
        return True
    joined = "/".join(names)
    try:
        if joined.encode("ascii").translate(None, _NAME_BYTES):
            return False  # a character no name may hold
    except UnicodeEncodeError:
        return False
    dashed = joined.replace("_", "-").replace("/", "-")
    return (dashed != "" and dashed[0] != "-" and dashed[-1] != "-" and "--" not in dashed
            and joined.count("/") == len(names) - 1 and max(map(len, names)) <= MAX_NAME_LEN)


_NAME_BYTES = b"abcdefghijklmnopqrstuvwxyz0123456789-_/"


def parse(name: str, source: str, path: str, data: bytes) -> Skill:
    """Parse SKILL.md bytes of the skill directory ``path`` named ``name``.

    Raises :class:`SkillError` with a readable reason when the skill is malformed.
    """
    if len(name) > MAX_NAME_LEN or not _NAME_MATCH(name):
        raise SkillError(name_problem(name))
    return parse_named(name, source, path, data)


def parse_named(name: str, source: str, path: str, data: bytes) -> Skill:
    """:func:`parse` of a skill whose name is known to be valid (:func:`all_names_valid`)."""
    try:
        text, body, meta = _parse_document(data)
    except FrontmatterError as exc:
        raise SkillError(str(exc)) from None
    skill = _from_mapping(name, source, path, text, body, meta)
    if ("Type" in body and _TYPE_HEADING.search(body)) or "activity" in meta:
        skill = _with_typed(skill, text, body, meta)
    return skill


_NAME_MATCH = NAME_RE.match
_parse_document = frontmatter.parse_document  # decode, split and parse_yaml, in one call
_TYPE_HEADING = re.compile(r"^#{1,6}[ \t]+(?:\d+\.[ \t]*)?`?Type`?[ \t]*$", re.MULTILINE)


def _with_typed(skill: Skill, text: str, body: str, meta: dict[str, Any]) -> Skill:
    """Attach the typed-skill declaration; a malformed one is a SkillError naming the line."""
    from dataclasses import replace

    from lily_kernel.skills import typed_declaration
    activity = meta.get("activity")
    kinds = typed_declaration.ACTIVITY_TYPES
    if activity is not None and not isinstance(activity, str):
        raise SkillError(f"'activity' must be a string, not {kind_of(activity)}")
    if activity is not None and activity not in kinds:
        raise SkillError(f"'activity' must be one of {', '.join(kinds)}, not '{activity}'")
    if not typed_declaration.is_typed(body):  # e.g. a '## Type' heading only inside a code fence
        if activity is not None:
            raise SkillError("'activity' is for typed external skills, but the 'Type' "
                             "section is missing")
        return skill
    first_line = text[:len(text) - len(body)].count("\n") + 1
    try:
        spec = typed_declaration.parse(body, first_line, activity)
    except TypedError as exc:
        raise SkillError(str(exc)) from None
    summary = skill.summary or " ".join(spec.purpose.split())
    return replace(skill, typed=spec, summary=summary)


def _from_mapping(name: str, source: str, path: str, text: str, body: str, meta: dict[str, Any]) -> Skill:
    """The :class:`Skill` a frontmatter mapping describes; ``meta`` is owned by the Skill after.

    The checks run in a fixed order (the first problem found is the one reported): key
    types, then the types of the string-valued keys in the file's order, then the rules
    key by key. The common case, a value of the right type, is tested inline; anything
    else goes through the helper that names the key in its error.
    """
    if meta.keys() <= KNOWN_KEYS:  # the usual case: every key is a known (string) key
        unknown: tuple[str, ...] = ()
    else:
        for key in meta:
            if key.__class__ is not str and not isinstance(key, str):
                raise SkillError(f"frontmatter key {key!r} is not a string")
        unknown = tuple(sorted(meta.keys() - KNOWN_KEYS))
    get = meta.get
    declared_name = get("name")
    description = get("description")
    summary = get("summary")
    mode = get("invocation_mode")
    command = get("command")
    command_tool = get("command_tool")
    license_ = get("license")
    compatibility = get("compatibility")
    # The string-valued keys (_STR_KEYS): the usual case, each a string or absent, is told
    # at once; otherwise they are checked in the file's order, and the first wrong one named.
    if not ((declared_name is None or declared_name.__class__ is str)
            and (description is None or description.__class__ is str)
            and (summary is None or summary.__class__ is str)
            and (mode is None or mode.__class__ is str)
            and (command is None or command.__class__ is str)
            and (command_tool is None or command_tool.__class__ is str)
            and (license_ is None or license_.__class__ is str)
            and (compatibility is None or compatibility.__class__ is str)
            and "model" not in meta and "context" not in meta):
        for key, value in meta.items():
            if value.__class__ is not str and key in _STR_KEYS and value is not None:
                _opt_str(meta, key)  # raises: not a string

    if declared_name is not None and declared_name != name:
        raise SkillError(f"'name' is '{declared_name}' but the skill directory is '{name}'")
    description = description or ""
    mode = mode or "prompt_rewrite"
    if mode not in INVOCATION_MODES:
        raise SkillError(f"'invocation_mode' must be one of {', '.join(INVOCATION_MODES)}, not '{mode}'")
    if command is not None and not COMMAND_RE.match(command):
        raise SkillError(f"'command' {command!r} must match ^[a-z0-9_-]+$ (lower-case ASCII "
                         "letters, digits, '_' and '-', nothing else)")
    if mode == "tool_dispatch" and not command_tool:
        raise SkillError("'invocation_mode' is tool_dispatch but 'command_tool' is missing")

    disable = get("disable-model-invocation", False)
    if disable is not False and disable is not True:
        raise SkillError(f"'disable-model-invocation' must be true or false, not {kind_of(disable)}")

    if "argument-hint" in meta or "user-invocable" in meta:
        _claude_code_keys(meta)

    metadata = get("metadata")
    gate = None
    if metadata is None:
        metadata = _EMPTY
    elif isinstance(metadata, dict):
        if "openclaw" in metadata or "clawdbot" in metadata or "moltbot" in metadata:
            try:
                gate = _openclaw_gate(metadata)
            except ValueError as exc:
                raise SkillError(str(exc)) from None
        metadata = MappingProxyType(dict(metadata))  # a copy: frontmatter keeps the original
    else:
        raise SkillError(f"'metadata' must be a mapping, not {kind_of(metadata)}")

    requires_tools = get("requires_tools")
    if requires_tools is None:
        requires_tools = ()
    else:
        try:  # a list seen good before: that (shared) tuple
            known = (_TOOL_LISTS.get(tuple(requires_tools))
                     if requires_tools.__class__ is list else None)
        except TypeError:  # an item that is a list or a mapping
            known = None
        requires_tools = known or _tool_list(requires_tools)
    eligibility = get("eligibility")
    if eligibility is None:
        eligibility = _ANY_ELIGIBILITY
    else:
        try:  # the usual rule, an OS list only, seen good before: that (shared) Eligibility
            os_list = (eligibility.get("os")
                       if eligibility.__class__ is dict and len(eligibility) == 1 else None)
            shared = _BY_OS.get(tuple(os_list)) if os_list.__class__ is list else None
        except TypeError:  # an item that is a list or a mapping
            shared = None
        eligibility = shared or _eligibility(eligibility)
    allowed_tools = get("allowed-tools")
    allowed_tools = _allowed_tools(allowed_tools) if allowed_tools is not None else ()

    # The fields are set directly, as the dataclass __init__ would (it is the slowest
    # part of a load otherwise); _check_fast_init below keeps the two in step.
    skill = _new(Skill)
    f = skill.__dict__
    f["name"] = name
    f["source"] = source
    f["path"] = path
    f["text"] = text
    f["body"] = body
    f["summary"] = summary if summary is not None else description
    f["description"] = description
    f["invocation_mode"] = mode
    f["command"] = command
    f["command_tool"] = command_tool
    f["requires_tools"] = requires_tools
    f["eligibility"] = eligibility
    f["license"] = license_
    f["compatibility"] = compatibility
    f["metadata"] = metadata
    f["allowed_tools"] = allowed_tools
    f["disable_model_invocation"] = disable
    f["unknown_keys"] = unknown
    f["frontmatter"] = MappingProxyType(meta)
    f["typed"] = None
    f["openclaw"] = gate
    return skill


_new = object.__new__
_openclaw_gate = openclaw.gate
_EMPTY: Mapping[str, Any] = MappingProxyType({})
_ANY_ELIGIBILITY = Eligibility()
_ELIGIBILITY_KEYS = frozenset(ELIGIBILITY_KEYS)
_OS_SET = frozenset(OS_NAMES)
# The keys whose value must be a string (or null); checked first, in the file's order.
_STR_KEYS = frozenset(("name", "description", "summary", "invocation_mode", "command",
                       "command_tool", "license", "compatibility", "model", "context"))


def _check_fast_init() -> None:
    """Fail at import if Skill or Eligibility gains, loses or renames a field set directly."""
    made = _from_mapping("x", "workspace", "/x", "", "", {})
    expected = Skill(name="x", source="workspace", path="/x", text="", body="")
    if vars(made).keys() != {f.name for f in fields(Skill)} or made != expected:
        raise AssertionError("skill._from_mapping is out of step with the Skill dataclass")
    elig = _eligibility({"os": [], "env": [], "binaries": [], "any_binaries": []})
    if vars(elig).keys() != {f.name for f in fields(Eligibility)} or elig != Eligibility():
        raise AssertionError("skill._eligibility is out of step with the Eligibility dataclass")


def _claude_code_keys(meta: dict[str, Any]) -> None:
    """Type checks of ``argument-hint`` and ``user-invocable`` (Claude Code's keys Lily
    recognises but sets no field for; ``model`` and ``context`` are strings, see _STR_KEYS)."""
    hint = meta.get("argument-hint")
    if (hint is not None and not isinstance(hint, str)  # `[file]` in YAML is a list
            and (not isinstance(hint, list) or not all(isinstance(h, str) for h in hint))):
        raise SkillError(f"'argument-hint' must be a string, not {kind_of(hint)}")
    invocable = meta.get("user-invocable", True)
    if invocable is not True and invocable is not False:
        raise SkillError(f"'user-invocable' must be true or false, not {kind_of(invocable)}")


def _opt_str(meta: dict[str, Any], key: str) -> str | None:
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise SkillError(f"'{key}' must be a string, not {kind_of(value)}")
    return value


def _str_list(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SkillError(f"'{key}' must be a list of strings, not {kind_of(value)}")
    for item in value:
        if not isinstance(item, str) or not item:
            raise SkillError(f"'{key}' must be a list of non-empty strings; found {kind_of(item)}")
    return tuple(value)


def _eligibility(value: Any) -> Eligibility:
    if value is None:
        return _ANY_ELIGIBILITY
    if not isinstance(value, dict):
        raise SkillError(f"'eligibility' must be a mapping, not {kind_of(value)}")
    if not value.keys() <= _ELIGIBILITY_KEYS:
        unknown = sorted(str(k) for k in value if k not in ELIGIBILITY_KEYS)
        raise SkillError(f"'eligibility' has unknown key(s): {', '.join(unknown)} "
                         f"(allowed: {', '.join(ELIGIBILITY_KEYS)})")
    os_list = value.get("os")
    if os_list is not None:
        os_list = _str_list(os_list, "eligibility.os")
        if not _OS_SET.issuperset(os_list):
            bad = [o for o in os_list if o not in OS_NAMES]
            raise SkillError(f"'eligibility.os' has unknown OS {', '.join(map(repr, bad))} "
                             f"(allowed: {', '.join(OS_NAMES)})")
        if not os_list:  # an empty list means "no constraint", as in the v0 format's example
            # (docs/skill-format.md#keys)
            os_list = None
    env = value.get("env")
    binaries = value.get("binaries")
    any_binaries = value.get("any_binaries")
    env = _str_list(env, "eligibility.env") if env is not None else ()
    binaries = _str_list(binaries, "eligibility.binaries") if binaries is not None else ()
    any_binaries = (_str_list(any_binaries, "eligibility.any_binaries")
                    if any_binaries is not None else ())
    elig = _new(Eligibility)  # as in _from_mapping: the frozen __init__ is slow
    f = elig.__dict__
    f["os"] = os_list
    f["env"] = env
    f["binaries"] = binaries
    f["any_binaries"] = any_binaries
    if os_list and len(value) == 1:  # one shared (immutable) rule per OS list
        if len(_BY_OS) >= 256:
            _BY_OS.clear()
        _BY_OS[os_list] = elig
    return elig


# OS list (a tuple of names, checked) -> the Eligibility of a rule that has only it.
_BY_OS: dict[tuple[str, ...], Eligibility] = {}
# A requires_tools list seen good (as a tuple) -> that tuple, shared by the skills naming it.
_TOOL_LISTS: dict[tuple[str, ...], tuple[str, ...]] = {}


def _tool_list(value: Any) -> tuple[str, ...]:
    """``requires_tools`` as a tuple, checked (:func:`_str_list`) and kept in _TOOL_LISTS."""
    tools = _str_list(value, "requires_tools")
    if len(_TOOL_LISTS) >= 256:
        _TOOL_LISTS.clear()
    return _TOOL_LISTS.setdefault(tools, tools)


def _allowed_tools(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    return _str_list(value, "allowed-tools")


def kind_of(value: Any) -> str:
    """What a YAML value is, as an error message names it ("a list", "null", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


_check_fast_init()
