"""Tool registry and tool policy.

A tool is a named Python callable with a description and a JSON schema built
from its signature. The policy decides, in code, which registered tools may be
used at all (allow/deny, deny wins) and which the model may call (never an
owner-only tool). Each session owns its own registry, so two notebooks never
share tools.
"""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

ALWAYS_CONFIRM = frozenset({"run_python"})  # runs code in the user's namespace: never unasked
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean",
               list: "array", dict: "object"}


class ToolError(Exception):
    """A tool could not run or refused its input; the message is for the reader."""


@dataclass(frozen=True)
class Tool:
    name: str
    func: Callable[..., Any]
    description: str
    parameters: Mapping[str, Any]
    owner_only: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)


def schema_for(func: Callable[..., Any]) -> dict:
    """A JSON schema of ``func``'s parameters, from its signature."""
    props: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        ann = param.annotation
        if isinstance(ann, str):  # from __future__ import annotations
            ann = {"str": str, "int": int, "float": float, "bool": bool,
                   "list": list, "dict": dict}.get(ann.split("|")[0].strip(), None)
        prop: dict[str, Any] = {}
        if ann in _JSON_TYPES:
            prop["type"] = _JSON_TYPES[ann]
        props[param.name] = prop
        if param.default is param.empty:
            required.append(param.name)
        else:
            prop["default"] = param.default
    return {"type": "object", "properties": props, "required": required}


class ToolRegistry:
    """Named tools of one session."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, func: Callable[..., Any] | None = None, *, name: str | None = None,
                 description: str | None = None, owner_only: bool = False):
        """Register ``func`` (usable as a decorator, with or without arguments)."""
        def add(f: Callable[..., Any]) -> Callable[..., Any]:
            tool_name = name or f.__name__
            doc = description if description is not None else inspect.getdoc(f) or ""
            self._tools[tool_name] = Tool(tool_name, f, doc, schema_for(f), owner_only)
            return f
        return add(func) if func is not None else add

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self):
        return iter(self._tools[n] for n in self.names())

    def copy(self) -> "ToolRegistry":
        new = ToolRegistry()
        new._tools = dict(self._tools)
        return new


def _name_set(value: str | None) -> frozenset[str] | None:
    if value is None:
        return None
    return frozenset(part.strip() for part in value.replace(",", " ").split() if part.strip())


@dataclass(frozen=True)
class ToolPolicy:
    """Which tools may be used. ``allow=None`` allows every tool; deny always wins.

    ``confirm`` names the tools the model may call only after the user confirms the
    call on a card (docs/notebook-tools.md#confirmation); ``run_python`` is always in it.
    """

    allow: frozenset[str] | None = None
    deny: frozenset[str] = field(default_factory=frozenset)
    confirm: frozenset[str] = ALWAYS_CONFIRM

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 file_values: Mapping[str, Any] | None = None) -> "ToolPolicy":
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
                   confirm=ALWAYS_CONFIRM | frozenset(confirm))

    def needs_confirmation(self, name: str) -> bool:
        """Must the user confirm a model's call of ``name`` before it runs?"""
        return name in self.confirm

    def unavailable_reason(self, registry: ToolRegistry, name: str) -> str | None:
        """Why tool ``name`` cannot be used at all, or None when it can."""
        if name not in registry:
            return f"tool '{name}' is not registered"
        if name in self.deny:
            return f"tool '{name}' is denied by the tool policy"
        if self.allow is not None and name not in self.allow:
            return f"tool '{name}' is not in the tool policy's allow list"
        return None

    def model_refusal(self, registry: ToolRegistry, name: str) -> str | None:
        """Why the model may not call ``name``, or None when it may."""
        reason = self.unavailable_reason(registry, name)
        if reason:
            return reason
        if registry.get(name).owner_only:  # type: ignore[union-attr]
            return f"tool '{name}' is owner-only: only a /command may run it"
        return None

    def as_dict(self) -> dict:
        return {"allow": sorted(self.allow) if self.allow is not None else None,
                "deny": sorted(self.deny), "confirm": sorted(self.confirm)}


_PY_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
             "array": list, "object": dict}


def check_args(schema: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """Why ``args`` do not fit the tool's JSON schema (as :func:`schema_for` builds it), or None."""
    props = schema.get("properties", {})
    missing = [name for name in schema.get("required", []) if name not in args]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    unknown = sorted(set(args) - set(props))
    if unknown:
        return (f"unknown argument(s): {', '.join(unknown)} "
                f"(takes: {', '.join(props) or 'no arguments'})")
    for name, value in args.items():
        expected = props[name].get("type")
        py = _PY_TYPES.get(expected)
        if py is None:
            continue
        ok = isinstance(value, py) and not (expected in ("integer", "number")
                                            and isinstance(value, bool))
        if not ok:
            return f"argument '{name}' must be of type {expected}"
    return None
