"""Parse one skill directory's SKILL.md into an immutable :class:`Skill`.

Every rule of docs/skill-format.md that can be checked from the file alone lives here; the
rules that need the other skills or the tool registry (built-in command
collisions, alias clashes, ``command_tool`` registration, eligibility) live in
:mod:`lily_kernel.skills.loader`.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from lily_kernel.errors import FrontmatterError, SkillError, TypedError
from lily_kernel.skills import frontmatter, openclaw

if TYPE_CHECKING:  # the '## Type' section is parsed by skills/typed_declaration.py
    from lily_kernel.skills.typed_declaration import TypedSpec

# Whole-string rules: use fullmatch (``$`` would let a trailing newline through).
NAME_RE = re.compile(r"[a-z0-9]+(?:[_-][a-z0-9]+)*")
COMMAND_RE = re.compile(r"[a-z0-9_-]+")
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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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
        return f"skill name {_quoted(name)} is {len(name)} characters; the limit is {MAX_NAME_LEN}"
    if not NAME_RE.fullmatch(name):
        return (f"skill name {_quoted(name)} is invalid: use lowercase letters and digits, "
                "separated by single '-' or '_'")
    return None


def _quoted(name: str) -> str:
    r"""``name`` in single quotes, as messages show it; one holding a control character
    (a folder named "demo\n") is shown escaped, so the message stays on one line."""
    return f"'{name}'" if name.isprintable() else repr(name)


def parse(name: str, source: str, path: str, data: bytes) -> Skill:
    """Parse SKILL.md bytes of the skill directory ``path`` named ``name``.

    Raises :class:`SkillError` with a readable reason when the skill is malformed.
    """
    problem = name_problem(name)
    if problem:
        raise SkillError(problem)
    try:
        text, body, meta = frontmatter.parse_document(data)
    except FrontmatterError as exc:
        raise SkillError(str(exc)) from None
    skill = _from_mapping(name, source, path, text, body, meta)
    if ("Type" in body and _TYPE_HEADING.search(body)) or "activity" in meta:
        skill = _with_typed(skill, text, body, meta)
    return skill


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
    key by key.
    """
    for key in meta:
        if not isinstance(key, str):
            raise SkillError(f"frontmatter key {key!r} is not a string")
    unknown = tuple(sorted(meta.keys() - KNOWN_KEYS))
    for key in meta:
        if key in _STR_KEYS:
            _opt_str(meta, key)  # raises when not a string

    declared_name = meta.get("name")
    if declared_name is not None and declared_name != name:
        raise SkillError(f"'name' is '{declared_name}' but the skill directory is '{name}'")
    description = meta.get("description") or ""
    summary = meta.get("summary")
    mode = meta.get("invocation_mode") or "prompt_rewrite"
    if mode not in INVOCATION_MODES:
        raise SkillError(f"'invocation_mode' must be one of {', '.join(INVOCATION_MODES)}, not '{mode}'")
    command = meta.get("command")
    if command is not None and not COMMAND_RE.fullmatch(command):
        raise SkillError(f"'command' {_quoted(command)} must match ^[a-z0-9_-]+$")
    command_tool = meta.get("command_tool")
    if mode == "tool_dispatch" and not command_tool:
        raise SkillError("'invocation_mode' is tool_dispatch but 'command_tool' is missing")

    disable = meta.get("disable-model-invocation", False)
    if disable is not False and disable is not True:
        raise SkillError(f"'disable-model-invocation' must be true or false, not {kind_of(disable)}")

    if "argument-hint" in meta or "user-invocable" in meta:
        _claude_code_keys(meta)

    metadata = meta.get("metadata")
    gate = None
    if metadata is None:
        metadata = MappingProxyType({})
    elif isinstance(metadata, dict):
        try:
            gate = openclaw.gate(metadata)
        except ValueError as exc:
            raise SkillError(str(exc)) from None
        metadata = MappingProxyType(dict(metadata))  # a copy: frontmatter keeps the original
    else:
        raise SkillError(f"'metadata' must be a mapping, not {kind_of(metadata)}")

    return Skill(
        name=name, source=source, path=path, text=text, body=body,
        summary=summary if summary is not None else description,
        description=description,
        invocation_mode=mode,
        command=command,
        command_tool=command_tool,
        requires_tools=_str_list(meta.get("requires_tools"), "requires_tools"),
        eligibility=_eligibility(meta.get("eligibility")),
        license=meta.get("license"),
        compatibility=meta.get("compatibility"),
        metadata=metadata,
        allowed_tools=_allowed_tools(meta.get("allowed-tools")),
        disable_model_invocation=disable,
        unknown_keys=unknown,
        frontmatter=MappingProxyType(meta),
        openclaw=gate,
    )


# The keys whose value must be a string (or null); checked first, in the file's order.
_STR_KEYS = frozenset(("name", "description", "summary", "invocation_mode", "command",
                       "command_tool", "license", "compatibility", "model", "context"))


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
        return Eligibility()
    if not isinstance(value, dict):
        raise SkillError(f"'eligibility' must be a mapping, not {kind_of(value)}")
    if not value.keys() <= set(ELIGIBILITY_KEYS):
        unknown = sorted(str(k) for k in value if k not in ELIGIBILITY_KEYS)
        raise SkillError(f"'eligibility' has unknown key(s): {', '.join(unknown)} "
                         f"(allowed: {', '.join(ELIGIBILITY_KEYS)})")
    os_list = value.get("os")
    if os_list is not None:
        os_list = _str_list(os_list, "eligibility.os")
        if not set(os_list) <= set(OS_NAMES):
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
    return Eligibility(os=os_list, env=env, binaries=binaries, any_binaries=any_binaries)


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

