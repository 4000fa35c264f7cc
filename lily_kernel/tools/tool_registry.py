"""Tool registry and tool policy.

A tool is a named Python callable with a description and a JSON schema derived
from its signature (``typing.get_type_hints`` and pydantic; parameter
descriptions from the docstring's ``Args:`` / ``Parameters`` / ``:param:``
lines). The model's arguments are validated with the same pydantic model,
strictly: ``"1"`` is not an integer. pydantic is imported on first use only, so
a session start or a command never pays for it (docs/agent.md#tool-schemas).
The policy decides, in code, which registered tools may be used at all
(allow/deny, deny wins; names or globs such as ``mcp__notes__*``) and which the model
may call (never an owner-only tool). Each session owns its own registry, so two notebooks never share tools.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from lily_kernel.errors import ToolError
from lily_kernel.settings import permissions
from lily_kernel.settings.permissions import Kind, Mode, Permissions

if TYPE_CHECKING:  # pydantic is imported on first use (docs/architecture.md#import-rules)
    from pydantic import BaseModel, ConfigDict
    from pydantic_core import ErrorDetails

_F = TypeVar("_F", bound=Callable[..., Any])

#: The built-in tools that write a workspace file; a rule naming ``write`` in ``[tools]``
#: deny, allow or confirm governs ``edit`` too (it writes the same files, docs/permissions.md).
FILE_WRITES = frozenset({"write", "edit"})
ALWAYS_CONFIRM = frozenset({"run_python"})  # runs code in the user's namespace: never unasked


@dataclass(frozen=True)
class Shown:
    """A tool result with something the user should see where it ran: ``text`` goes to the
    model; ``display`` is the face's (IPython's captured output of ``run_python``)."""

    text: str
    display: object | None = None


def invoke(tool: Tool, args: Mapping[str, Any]) -> Shown:
    """Call ``tool`` with checked ``args``; its result as text (JSON for other values).

    A tool's own failure becomes a :class:`ToolError` naming it (information for the
    model); an interrupt goes through."""
    try:
        value = tool(**args)
    except ToolError:
        raise
    except Exception as exc:
        raise ToolError(f"tool '{tool.name}' raised {type(exc).__name__}: {exc}") from None
    if isinstance(value, Shown):
        return value
    return Shown(value if isinstance(value, str) else json.dumps(value, default=str))


class Schema(dict[str, Any]):
    """A tool's JSON schema (a plain dict to JSON) that also knows how to check arguments."""

    def __init__(self, schema: dict[str, Any], check: Callable[[Mapping[str, Any]], str | None]) -> None:
        super().__init__(schema)
        self.check = check


Origin = Literal["builtin", "notebook", "mcp"]


@dataclass(frozen=True)
class ToolIdentity:
    """A tool as an approval knows it: its source (origin, MCP server and its command or
    URL, or a function's module and name), name, and hashes of its description,
    annotations and input schema. Any difference revokes an approval."""

    source: str
    name: str
    description: str
    annotations: str
    schema: str

    def changes(self, other: ToolIdentity) -> list[str]:
        """What differs from ``other``, in words ("its description", "its source")."""
        return [f"its {label}" for label, a, b in (
            ("source", self.source, other.source), ("name", self.name, other.name),
            ("description", self.description, other.description),
            ("annotations", self.annotations, other.annotations),
            ("input schema", self.schema, other.schema)) if a != b]


@dataclass(frozen=True)
class Tool:
    """A registered tool: the callable, what the model reads, and how approval works.

    ``origin`` and ``server`` say where it comes from (an MCP tool names its server);
    ``annotations`` are MCP's hints (``readOnlyHint``, ``destructiveHint``,
    ``openWorldHint``), shown on the approval card; ``ask`` means a model's call needs the
    user's approval by default, as ``[tools] confirm`` does; ``change(args)`` says what a
    call would change in something that exists (``write``: a unified diff), or None — a
    call with a change asks too (docs/notebook-tools.md#confirmation).
    """

    name: str
    func: Callable[..., Any]
    description: str
    owner_only: bool = False
    origin: Origin = "builtin"
    server: str | None = None
    annotations: Mapping[str, bool] = field(default_factory=dict)
    ask: bool = False
    change: Callable[[Mapping[str, Any]], str | None] | None = field(default=None, compare=False)
    source: str = ""  # where it comes from beyond ``origin``: an MCP server's command or URL
    #: the same call run in the sandbox (tools/gate.py decides when): a notebook face's
    #: ``run_python`` only; None where the face has no sandbox (docs/permissions.md#the-sandbox)
    sandboxed: Callable[..., Any] | None = field(default=None, compare=False)
    #: whether a call could find anything now (a notebook look-up: a variable, an error), read
    #: once a request; None: always. The small profile offers the tool only when it can
    #: (docs/agent.md#small-model-profile)
    usable: Callable[[], bool] | None = field(default=None, compare=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the tool's function."""
        return self.func(*args, **kwargs)

    @cached_property
    def parameters(self) -> Schema:
        """The JSON schema of the arguments; built (and pydantic imported) on first use."""
        return _derive(self.func)

    def identity(self) -> ToolIdentity:
        """What an approval is bound to (docs/permissions.md#approvals)."""
        def digest(value: object) -> str:
            text = json.dumps(value, sort_keys=True, default=repr, ensure_ascii=False)
            return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        func = getattr(self.func, "__wrapped__", self.func)
        where = self.source or f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', '?')}"
        return ToolIdentity(f"{self.origin}:{self.server or ''}:{where}", self.name,
                            digest(self.description), digest(dict(self.annotations)),
                            digest(dict(self.parameters)))

    @property
    def takes_arguments(self) -> bool:
        """Whether the tool has any parameter, from the signature alone (no pydantic)."""
        return any(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                   for p in inspect.signature(self.func).parameters.values())


def schema_for(func: Callable[..., Any]) -> dict[str, Any]:
    """The JSON schema of ``func``'s parameters (see :class:`Schema`)."""
    return _derive(func)


def check_args(schema: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """Why ``args`` do not fit ``schema``, or None.

    ``schema`` is a tool's :attr:`Tool.parameters` (checked with its own pydantic
    model) or a flat JSON schema written by hand (``{"type": "object",
    "properties": {"name": {"type": "string"}}, "required": [...]}``), turned into
    a pydantic model once.
    """
    check = getattr(schema, "check", None)
    if check is None:
        check = _flat_schema_check(json.dumps(schema, sort_keys=True))
    return check(args)


class ToolRegistry:
    """Named tools of one session."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self.version = 0  # counts every add and remove: what was built from the tools is stale

    @overload
    def register(self, func: _F, *, name: str | None = None,
                 description: str | None = None, owner_only: bool = False,
                 origin: Origin = "builtin", server: str | None = None,
                 annotations: Mapping[str, bool] | None = None, ask: bool = False,
                 change: Callable[[Mapping[str, Any]], str | None] | None = None,
                 sandboxed: Callable[..., Any] | None = None,
                 usable: Callable[[], bool] | None = None) -> _F: ...

    @overload
    def register(self, func: None = None, *, name: str | None = None,
                 description: str | None = None, owner_only: bool = False,
                 origin: Origin = "builtin", server: str | None = None,
                 annotations: Mapping[str, bool] | None = None, ask: bool = False,
                 change: Callable[[Mapping[str, Any]], str | None] | None = None,
                 sandboxed: Callable[..., Any] | None = None,
                 usable: Callable[[], bool] | None = None,
                 ) -> Callable[[_F], _F]: ...

    def register(self, func: _F | None = None, *, name: str | None = None,
                 description: str | None = None, owner_only: bool = False,
                 origin: Origin = "builtin", server: str | None = None,
                 annotations: Mapping[str, bool] | None = None, ask: bool = False,
                 change: Callable[[Mapping[str, Any]], str | None] | None = None,
                 sandboxed: Callable[..., Any] | None = None,
                 usable: Callable[[], bool] | None = None,
                 ) -> _F | Callable[[_F], _F]:
        """Register ``func`` (usable as a decorator, with or without arguments); the
        keywords are :class:`Tool`'s fields."""
        def add(f: _F) -> _F:
            tool_name = name or f.__name__
            doc = description if description is not None else summary_of(inspect.getdoc(f) or "")
            self.add(Tool(tool_name, f, doc, owner_only, origin, server,
                          dict(annotations or {}), ask, change, sandboxed=sandboxed,
                          usable=usable))
            return f
        return add(func) if func is not None else add

    def add(self, tool: Tool) -> None:
        """Register a ready-made :class:`Tool` (an MCP server's, docs/mcp.md#tools)."""
        self._tools[tool.name] = tool
        self.version += 1

    def remove(self, name: str) -> None:
        """Forget tool ``name`` (an MCP tool its server no longer lists)."""
        if self._tools.pop(name, None) is not None:
            self.version += 1

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, if registered."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """The registered tools' names, sorted."""
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools[n] for n in self.names())

    def copy(self) -> ToolRegistry:
        """A registry with the same tools, to extend without changing this one."""
        new = ToolRegistry()
        new._tools = dict(self._tools)
        return new


def kind_of(tool: Tool) -> Kind:
    """What a tool does, as the permission model sorts it (docs/permissions.md#the-table):
    the built-in ``write`` writes, ``run_python`` runs, ``propose_cell`` proposes, an MCP
    tool is the server's, a tool declared read-only reads, anything else is ``other``."""
    if tool.name in ALWAYS_CONFIRM:
        return "run"
    if tool.origin == "mcp":
        return "mcp"
    if tool.name in FILE_WRITES and tool.origin == "builtin" and tool.change is not None:
        return "write"
    if tool.name == "propose_cell" and tool.origin == "notebook":
        return "propose"
    return "read" if tool.annotations.get("readOnlyHint") is True else "other"


def matches(name: str, names: frozenset[str]) -> bool:
    """Is ``name`` in ``names``, exactly or by a glob (``mcp__notes__*``)? One rule with the
    permission model's: a rule for ``write`` governs ``edit`` too."""
    return permissions.matches(name, names)


def _name_set(value: str | None) -> frozenset[str] | None:
    if value is None:
        return None
    return frozenset(part.strip() for part in value.replace(",", " ").split() if part.strip())


# The notebook tools (tools/notebook_tools.py) exist only where a face registers them: the
# Lily kernel, %load_ext lily, and lily acp started by a Jupyter server. A skill that needs
# one is ineligible elsewhere (lily CLI).
NOTEBOOK_TOOLS = ("list_variables", "inspect_variable", "read_cells", "last_error",
                  "propose_cell", "run_python")


@dataclass(frozen=True)
class ToolPolicy:
    """Which tools may be used. ``allow=None`` allows every tool; deny always wins.

    ``confirm`` names the tools the model may call only after the user confirms the
    call on a card (docs/notebook-tools.md#confirmation); ``run_python`` is always in it.
    """

    allow: frozenset[str] | None = None
    deny: frozenset[str] = field(default_factory=frozenset)
    confirm: frozenset[str] = ALWAYS_CONFIRM
    offer: frozenset[str] | None = None  # [tools] offer: the tools offered to the model
    read_only: bool = False  # plan mode: only tools that read (or propose) may be called

    @classmethod
    def of(cls, permissions: Permissions) -> ToolPolicy:
        """The tool lists of a session's :class:`Permissions` (settings/permissions.py, their
        one owner): the registry and the loader read them here."""
        return cls(allow=permissions.allow, deny=permissions.deny,
                   confirm=ALWAYS_CONFIRM | permissions.confirm, offer=permissions.offer,
                   read_only=permissions.mode is Mode.PLAN)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 file_values: Mapping[str, Any] | None = None) -> ToolPolicy:
        """LILY_TOOLS_ALLOW / LILY_TOOLS_DENY, else lily.toml's [tools] allow / deny lists."""
        env = os.environ if env is None else env
        file_values = file_values or {}

        def pick(var: str, key: str) -> frozenset[str] | None:
            if env.get(var) is not None:
                return _name_set(env[var])
            value = file_values.get(key)
            return frozenset(map(str, value)) if isinstance(value, list) else None

        confirm = file_values.get("confirm", [])
        if not isinstance(confirm, list) or not all(isinstance(n, str) for n in confirm):
            raise ValueError("[tools] confirm must be a list of tool names")
        return cls(allow=pick("LILY_TOOLS_ALLOW", "allow"),
                   deny=pick("LILY_TOOLS_DENY", "deny") or frozenset(),
                   confirm=ALWAYS_CONFIRM | frozenset(confirm),
                   offer=pick("LILY_TOOLS_OFFER", "offer"))

    def offered(self, name: str) -> bool:
        """Is ``name`` in the set offered to the model? ``[tools] offer`` narrows it (a
        lean request, docs/agent.md#a-lean-request); ``load_skill`` is never narrowed away."""
        return self.offer is None or name in self.offer or name == "load_skill"

    def needs_confirmation(self, name: str) -> bool:
        """Does the policy list ``name`` as asked (``[tools] confirm``, ``run_python``, a
        glob such as ``mcp__notes__*``)? The whole rule is ``tools/gate.decide``
        (docs/permissions.md#the-table)."""
        return matches(name, self.confirm)

    @staticmethod
    def needs_notebook(registry: ToolRegistry, name: str) -> bool:
        """Is ``name`` a notebook tool this face did not register (no notebook here)?"""
        return name not in registry and name in NOTEBOOK_TOOLS

    def unavailable_reason(self, registry: ToolRegistry, name: str) -> str | None:
        """Why tool ``name`` cannot be used at all, or None when it can."""
        if name not in registry:
            if name in NOTEBOOK_TOOLS:
                return (f"tool '{name}' is a notebook tool, registered only in a notebook "
                        "(the Lily kernel or %load_ext lily)")
            return f"tool '{name}' is not registered"
        if matches(name, self.deny):
            return f"tool '{name}' is denied by the tool policy"
        if self.allow is not None and not matches(name, self.allow):
            return f"tool '{name}' is not in the tool policy's allow list"
        return None

    def model_refusal(self, registry: ToolRegistry, name: str) -> str | None:
        """Why the model may not call ``name`` at all, or None: the lists and owner-only.
        Whether one call runs (the mode included) is the gate's (tools/gate.py)."""
        reason = self.unavailable_reason(registry, name)
        if reason:
            return reason
        tool = registry.get(name)
        assert tool is not None  # unavailable_reason names an unregistered tool
        if tool.owner_only:
            return f"tool '{name}' is owner-only: only a /command may run it"
        return None

    def as_dict(self) -> dict[str, Any]:
        """The policy as JSON data (for /model and the journal)."""
        return {"allow": sorted(self.allow) if self.allow is not None else None,
                "deny": sorted(self.deny), "confirm": sorted(self.confirm),
                "offer": sorted(self.offer) if self.offer is not None else None,
                "read_only": self.read_only}


# -- deriving schemas (pydantic, imported here on first use) -------------------------

_JSON_PY = {"string": "str", "integer": "int", "number": "float", "boolean": "bool",
            "array": "list", "object": "dict"}


def _derive(func: Callable[..., Any]) -> Schema:
    from pydantic import Field, create_model
    hints = typing.get_type_hints(func, include_extras=True)
    docs = param_docs(inspect.getdoc(func) or "")
    fields: dict[str, Any] = {}
    for i, param in enumerate(inspect.signature(func).parameters.values()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = ... if param.default is param.empty else param.default
        # Field names p0, p1... with the parameter name as alias: a parameter may be
        # called 'json' or 'copy' without shadowing pydantic's own attributes.
        fields[f"p{i}"] = (hints.get(param.name, Any),
                           Field(default, alias=param.name, description=docs.get(param.name)))
    model = create_model(f"{getattr(func, '__name__', 'tool')}_arguments",
                         __config__=_config(), **fields)
    schema = _clean(model.model_json_schema())
    schema.pop("additionalProperties", None)  # unknown arguments are refused by the check
    return Schema(schema, _checker(model))


def _config() -> ConfigDict:
    from pydantic import ConfigDict
    return ConfigDict(strict=True, extra="forbid", arbitrary_types_allowed=True)


@lru_cache(maxsize=64)
def _flat_schema_check(schema_json: str) -> Callable[[Mapping[str, Any]], str | None]:
    from pydantic import create_model
    schema = json.loads(schema_json)
    required = set(schema.get("required", []))
    py = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict}
    fields: dict[str, Any] = {}
    for i, (name, prop) in enumerate(schema.get("properties", {}).items()):
        ann = py.get(_JSON_PY.get(prop.get("type", ""), ""), Any)
        fields[f"p{i}"] = (ann, _field(... if name in required else None, name))
    return _checker(create_model("arguments", __config__=_config(), **fields))


def _field(default: Any, alias: str) -> Any:
    from pydantic import Field
    return Field(default, alias=alias)


def _checker(model: type[BaseModel]) -> Callable[[Mapping[str, Any]], str | None]:
    from pydantic import ValidationError
    props = _clean(model.model_json_schema()).get("properties", {})

    def check(args: object) -> str | None:
        if not isinstance(args, Mapping):
            return "the arguments must be a JSON object"
        try:  # in JSON mode, as the model sent them: "1" is not an integer, a list is a tuple
            model.model_validate_json(json.dumps(dict(args), default=repr))
        except ValidationError as exc:
            return _explain(exc.errors(include_url=False), props)
        return None
    return check


def _explain(errors: list[ErrorDetails], props: Mapping[str, Any]) -> str:
    """One line for the model, the most basic problem first: missing, unknown, then types."""
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing"]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
    if unknown:
        return (f"unknown argument(s): {', '.join(unknown)} "
                f"(takes: {', '.join(props) or 'no arguments'})")
    e = errors[0]
    name, rest = str(e["loc"][0]), e["loc"][1:]
    expected = props.get(name, {}).get("type")
    if not rest and isinstance(expected, str) and e["type"].endswith("_type"):
        return f"argument '{name}' must be of type {expected}"
    where = "".join(f"[{part!r}]" for part in rest)
    return f"argument '{name}{where}': {e['msg']}"


def _clean(schema: Any, names: bool = False) -> Any:
    """Pydantic's schema without its generated titles, with 'required' always present."""
    if isinstance(schema, list):
        return [_clean(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if names:  # the keys of 'properties' / '$defs' are names, not keywords
        return {key: _clean(value) for key, value in schema.items()}
    out = {key: _clean(value, names=key in ("properties", "$defs"))
           for key, value in schema.items() if key != "title"}
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("required", [])
        out = {"type": "object", "properties": out.pop("properties"),
               "required": out.pop("required"), **{k: v for k, v in out.items() if k != "type"}}
    return out


# -- parameter descriptions from docstrings ---------------------------------------------

_SECTION_RE = re.compile(r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments)"
                         r"\s*:?\s*$")
_UNDERLINE_RE = re.compile(r"^-{3,}\s*$")
_GOOGLE_RE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_RE = re.compile(r"^(\w+)\s*(?::.*)?$")
_SPHINX_RE = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_OTHER_FIELD_RE = re.compile(r"^:\w+")


def param_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions in a docstring: Google ``Args:``, NumPy ``Parameters``, ``:param x:``."""
    lines = doc.expandtabs().splitlines()
    out: dict[str, list[str]] = {}
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        sphinx = _SPHINX_RE.match(line)
        if sphinx:
            name, parts = sphinx.group(1), [sphinx.group(2)]
            i += 1
            while i < len(lines) and lines[i].strip() and not _OTHER_FIELD_RE.match(lines[i].strip()):
                parts.append(lines[i].strip())
                i += 1
            out[name] = parts
            continue
        if _SECTION_RE.match(line):
            numpy = i + 1 < len(lines) and _UNDERLINE_RE.match(lines[i + 1].strip())
            i += 2 if numpy else 1
            i = _section(lines, i, out, numpy=bool(numpy))
            continue
        i += 1
    return {name: " ".join(p for p in parts if p).strip() for name, parts in out.items()}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _section(lines: list[str], i: int, out: dict[str, list[str]], numpy: bool) -> int:
    """Read one Args / Parameters section from line ``i``; return the line after it."""
    base = None
    current: list[str] | None = None
    while i < len(lines):
        raw = lines[i]
        if not raw.strip():
            i += 1
            continue
        indent = _indent(raw)
        if base is None:
            base = indent
        if indent < base or (numpy and i + 1 < len(lines) and _UNDERLINE_RE.match(lines[i + 1].strip())):
            return i
        if indent == base:
            match = (_NUMPY_RE if numpy else _GOOGLE_RE).match(raw.strip())
            if not match:
                return i
            current = out.setdefault(match.group(1).lstrip("*"), [])
            if not numpy:
                current.append(match.group(2))
        elif current is not None:
            current.append(raw.strip())
        i += 1
    return i


def summary_of(doc: str) -> str:
    """The docstring without its parameter section (those lines go into the schema)."""
    lines = doc.splitlines()
    kept: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if _SECTION_RE.match(line):
            numpy = i + 1 < len(lines) and _UNDERLINE_RE.match(lines[i + 1].strip())
            i = _section(lines, i + (2 if numpy else 1), {}, numpy=bool(numpy))
            continue
        if _SPHINX_RE.match(line):
            i += 1
            while i < len(lines) and lines[i].strip() and not _OTHER_FIELD_RE.match(lines[i].strip()):
                i += 1
            continue
        kept.append(lines[i])
        i += 1
    return "\n".join(kept).strip()
