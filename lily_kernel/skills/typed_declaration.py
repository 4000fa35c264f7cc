"""The typed-skill declaration (docs/typed-skills.md#declaration): sections, parameters,
Config ACL, and the values each declared type admits.

A SKILL.md body with a ``Type`` section is a typed skill. Its sections are
headings named ``Purpose``, ``Type``, ``Config ACL`` (internal only),
``Parameters`` and ``Behaviour``, numbered (``## 1. Purpose``) or not
(``## Purpose``). Parameters use the seed's line format::

    - recipient: actorUri (required) — the contact to send money to
        resolve: contact
    - amount: number (required) — dollar amount to transfer
        min: 0.01
        max: 100

A malformed declaration raises :class:`TypedError` naming the SKILL.md line;
the loader turns it into a ``skill_error``. :func:`check_value` says whether one
value fits a parameter (a declared default must, at load time); checking a
whole call's parameters is :func:`lily_kernel.typed.values.validate`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import urlsplit

from lily_kernel.errors import ParamError, TypedError

TYPES = ("string", "number", "boolean", "enum", "actorUri", "objectId")
KINDS = ("internal", "external")
RESOLVERS = {"contact": "actorUri"}  # resolver -> the type it produces
ACTIVITY_TYPES = ("Create", "Follow", "Like", "Announce", "Undo", "Update", "Delete",
                  "Add", "Remove", "Block", "Accept", "Reject")

# Each is used with fullmatch: a "$" would also match before a trailing newline.
_HEADING = re.compile(r"#{1,6}\s+(?:\d+\.\s*)?(.+?)\s*#*\s*")
_PARAM = re.compile(r"[-*]\s+([A-Za-z_][A-Za-z0-9_]*)\s*:\s*([A-Za-z]+)\s*"
                    r"\((required|optional)\)\s*(?:(?:—|–|--|-)\s*(.*))?")
_CONSTRAINT = re.compile(r"([a-z_]+)\s*:\s*(.*)")
_ACL = re.compile(r"[-*]?\s*(read|write)\s*:\s*\[(.*)\]\s*")
_PATH = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)*")
CONSTRAINT_KEYS = ("resolve", "default", "enum", "min", "max", "config")


@dataclass(frozen=True)
class Param:
    """One declared parameter of a typed skill."""
    name: str
    type: str
    required: bool
    description: str = ""
    resolve: str | None = None
    default: Any = None
    has_default: bool = False
    enum: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    config: str | None = None  # internal skills: the config path this parameter sets
    line: int = 0
    config_line: int = 0  # the line of its 'config:' constraint, if any

    def constraints(self) -> str:
        """The parameter's constraints as one line (for /help)."""
        parts = []
        if self.enum:
            parts.append("one of " + ", ".join(self.enum))
        if self.min is not None:
            parts.append(f"≥ {_num(self.min)}")
        if self.max is not None:
            parts.append(f"≤ {_num(self.max)}")
        if self.resolve:
            parts.append(f"resolved by {self.resolve}")
        if self.has_default:
            parts.append(f"default {self.default!r}")
        if self.config:
            parts.append(f"sets {self.config}")
        return "; ".join(parts)


@dataclass(frozen=True)
class TypedSpec:
    """A typed skill's declaration: its kind, purpose, parameters and ACL."""
    kind: str  # internal | external
    purpose: str
    params: tuple[Param, ...]
    behaviour: str
    acl_read: tuple[str, ...] = ()
    acl_write: tuple[str, ...] = ()
    activity: str = "Create"  # external skills: the ActivityStreams activity type

    def param(self, name: str) -> Param | None:
        """The parameter called ``name``, if declared."""
        return next((p for p in self.params if p.name == name), None)


def _num(v: float) -> str:
    if isinstance(v, int):  # float(v) overflows for a huge int
        return str(v)
    return str(int(v)) if v.is_integer() else str(v)


def _is_number(v: Any) -> bool:
    """A JSON number: not a bool, and finite (an int always is; float() would overflow)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return isinstance(v, int) or math.isfinite(v)


# -- parsing -------------------------------------------------------------------

def sections(body: str, first_line: int = 1) -> dict[str, tuple[int, list[str]]]:
    """Heading name (lower case, unnumbered) -> (line of the heading, lines under it)."""
    found: dict[str, tuple[int, list[str]]] = {}
    current: list[str] | None = None
    fence = False
    for offset, line in enumerate(body.split("\n")):
        if line.lstrip().startswith("```"):
            fence = not fence
            if current is not None:
                current.append(line)
            continue
        m = None if fence else _HEADING.fullmatch(line)
        if m:
            name = m.group(1).strip().strip("`*").lower()
            name = {"behavior": "behaviour"}.get(name, name)  # either spelling
            current = []
            if name not in found:
                found[name] = (first_line + offset, current)
            continue
        if current is not None:
            current.append(line)
    return found


def is_typed(body: str) -> bool:
    """Whether a skill body declares a typed skill (a ``## Type`` section)."""
    return "type" in sections(body)


def parse(body: str, first_line: int = 1, activity: str | None = None) -> TypedSpec:
    """The typed-skill declaration in ``body`` (whose first line is SKILL.md line ``first_line``)."""
    secs = sections(body, first_line)
    for required in ("purpose", "type", "parameters", "behaviour"):
        if required not in secs:
            raise TypedError(f"typed skill: the '{required.title()}' section is missing")
    type_line, type_lines = secs["type"]
    words = " ".join(type_lines).replace("`", " ").split()
    kinds = [w for w in words if w in KINDS]
    if len(kinds) != 1:
        raise TypedError(f"line {type_line}: the Type section must say internal or external")
    kind = kinds[0]
    purpose = _text(secs["purpose"][1])
    behaviour = _text(secs["behaviour"][1])
    if not purpose:
        raise TypedError(f"line {secs['purpose'][0]}: the Purpose section is empty")

    acl_read: tuple[str, ...] = ()
    acl_write: tuple[str, ...] = ()
    if "config acl" in secs:
        acl_line, acl_lines = secs["config acl"]
        if kind == "external":
            raise TypedError(f"line {acl_line}: a Config ACL is for internal skills only; "
                             "this skill is external")
        acl_read, acl_write = _acl(acl_line, acl_lines)
    elif kind == "internal":
        raise TypedError(f"line {type_line}: an internal skill needs a 'Config ACL' section")

    params = _params(*secs["parameters"])
    if kind == "internal":
        params = tuple(_with_config_path(p, acl_write) for p in params)
        _check_config_paths(params, acl_write)
    if activity is not None and activity not in ACTIVITY_TYPES:
        raise TypedError(f"'activity' must be one of {', '.join(ACTIVITY_TYPES)}, not '{activity}'")
    if activity is not None and kind == "internal":
        raise TypedError("'activity' is for external skills only")
    return TypedSpec(kind, purpose, params, behaviour, acl_read, acl_write, activity or "Create")


def _text(lines: list[str]) -> str:
    return "\n".join(lines).strip()


def _acl(heading_line: int, lines: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    read: list[str] = []
    write: list[str] = []
    for i, raw in enumerate(lines, heading_line + 1):
        line = raw.strip()
        if not line or line.startswith("```"):
            continue
        m = _ACL.fullmatch(line)
        if not m:
            raise TypedError(f"line {i}: Config ACL lines look like \"- write: ['a.b.c']\"; "
                             f"got '{line}'")
        if not m.group(2).strip():  # "- write: []": no paths
            continue
        for item in (x.strip().strip("'\"").strip() for x in m.group(2).split(",")):
            if not item:  # [''] or a stray comma: an entry that names nothing
                raise TypedError(f"line {i}: the Config ACL has an empty entry; list dotted "
                                 "config paths, e.g. ['messaging.rcs'], or [] for none")
            if not is_config_path(item):
                raise TypedError(f"line {i}: '{item}' is not a config path "
                                 "(dotted lowercase segments, e.g. messaging.rcs)")
            (read if m.group(1) == "read" else write).append(item)
    return tuple(read), tuple(write)


def _params(heading_line: int, lines: list[str]) -> tuple[Param, ...]:
    params: list[Param] = []
    current: dict[str, Any] | None = None

    def finish() -> None:
        if current is not None:
            params.append(_check_param(current))

    for i, raw in enumerate(lines, heading_line + 1):
        if not raw.strip() or raw.strip().startswith("```"):
            continue
        indented = raw[:1] in (" ", "\t")
        line = raw.strip()
        if not indented:
            if line.lower() in ("none", "none.", "(none)"):
                continue
            m = _PARAM.fullmatch(line)
            if not m:
                raise TypedError(f"line {i}: a parameter line looks like "
                                 f"'- name: type (required|optional) — description'; got '{line}'")
            finish()
            name, ptype, req, desc = m.groups()
            if ptype not in TYPES:
                raise TypedError(f"line {i}: parameter '{name}' has unknown type '{ptype}' "
                                 f"(types: {', '.join(TYPES)})")
            if any(p.name == name for p in params):
                raise TypedError(f"line {i}: parameter '{name}' is declared twice")
            current = {"name": name, "type": ptype, "required": req == "required",
                       "description": (desc or "").strip(), "line": i}
            continue
        if current is None:
            raise TypedError(f"line {i}: a constraint line must follow a parameter line")
        m = _CONSTRAINT.fullmatch(line)
        if not m or m.group(1) not in CONSTRAINT_KEYS:
            raise TypedError(f"line {i}: unknown constraint '{line}' for parameter "
                             f"'{current['name']}' (known: {', '.join(CONSTRAINT_KEYS)})")
        key, value = m.groups()
        if key in current:
            raise TypedError(f"line {i}: '{key}' is given twice for parameter '{current['name']}'")
        current[key] = (i, value.strip())
    finish()
    return tuple(params)


def _unquote(text: str) -> str:
    """The text as written, without surrounding quotes (enum values, string defaults)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _scalar(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        return text


def _check_param(d: dict[str, Any]) -> Param:
    name, ptype = d["name"], d["type"]

    def fail(key: str, message: str) -> NoReturn:
        line = d[key][0] if key in d else d["line"]
        raise TypedError(f"line {line}: parameter '{name}': {message}")

    enum: tuple[str, ...] = ()
    if "enum" in d:
        raw = d["enum"][1]
        if not (raw.startswith("[") and raw.endswith("]")):
            fail("enum", "enum values are written as a list: [a, b, c]")
        enum = tuple(_unquote(v) for v in raw[1:-1].split(",") if v.strip())
        if ptype != "enum":
            fail("enum", f"enum values are only for enum parameters, not {ptype}")
        if len(set(enum)) != len(enum):
            fail("enum", "enum values repeat")
    if ptype == "enum" and not enum:
        fail("enum", "an enum parameter needs 'enum: [values]'")
    bounds: dict[str, float] = {}
    for key in ("min", "max"):
        if key in d:
            if ptype != "number":
                fail(key, f"'{key}' is only for number parameters, not {ptype}")
            value = _scalar(d[key][1])
            if not _is_number(value):
                fail(key, f"'{key}' must be a number, not '{d[key][1]}'")
            bounds[key] = value
    if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
        fail("max", f"min {_num(bounds['min'])} is greater than max {_num(bounds['max'])}")
    resolve = None
    if "resolve" in d:
        resolve = d["resolve"][1]
        if resolve not in RESOLVERS:
            fail("resolve", f"unknown resolver '{resolve}' (known: {', '.join(RESOLVERS)})")
        if RESOLVERS[resolve] != ptype:
            fail("resolve", f"resolver '{resolve}' produces {RESOLVERS[resolve]}, not {ptype}")
    config = None
    if "config" in d:
        config = d["config"][1].strip("'\"")
        if not is_config_path(config):
            fail("config", f"'{config}' is not a config path")
    param = Param(name, ptype, d["required"], d["description"], resolve, None, False, enum,
                  bounds.get("min"), bounds.get("max"), config, d["line"],
                  d["config"][0] if "config" in d else 0)
    if "default" in d:
        if param.required:
            fail("default", "a required parameter cannot have a default")
        raw = d["default"][1]
        value = _scalar(raw) if ptype in ("number", "boolean") else _unquote(raw)
        try:
            value = check_value(param, value)
        except ParamError as exc:
            fail("default", f"default {raw} does not fit: {exc}")
        param = Param(name, ptype, False, d["description"], resolve, value, True, enum,
                      bounds.get("min"), bounds.get("max"), config, d["line"],
                  d["config"][0] if "config" in d else 0)
    return param


def _check_config_paths(params: tuple[Param, ...], acl_write: tuple[str, ...]) -> None:
    """A parameter whose config path its own write ACL does not cover could never run: refuse
    the skill at load time, naming the line, instead of refusing every call."""
    for p in params:  # a write path covers itself and whole segments under it
        if p.config and not any(p.config == w or p.config.startswith(w + ".") for w in acl_write):
            raise TypedError(f"line {p.config_line or p.line}: parameter '{p.name}' sets "
                             f"{p.config}, outside the skill's write ACL "
                             f"({', '.join(acl_write) or 'empty'})")


def _with_config_path(param: Param, acl_write: tuple[str, ...]) -> Param:
    """An internal skill's parameter sets a config path: its ``config:`` line, or the write path
    whose last segment is the parameter's name."""
    if param.config:
        return param
    match = [p for p in acl_write if p.rsplit(".", 1)[-1] == param.name]
    if len(match) == 1:
        return Param(**{**param.__dict__, "config": match[0]})
    return param


# -- one value -----------------------------------------------------------------

def is_config_path(value: str) -> bool:
    """Whether ``value`` is a dotted config path (lowercase segments), the whole of it."""
    return _PATH.fullmatch(value) is not None


def is_https_uri(value: str) -> bool:
    """Whether ``value`` is an https URI with a host (and a valid port, if any)."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a port out of range or not a number
    except ValueError:  # e.g. "https://[oops": not a URI at all
        return False
    return (parts.scheme == "https" and bool(parts.hostname) and " " not in value
            and not any(c in value for c in "\n\t<>\"{}|\\^`"))


def check_value(param: Param, value: Any) -> Any:
    """``value`` if it fits ``param``'s type and constraints; ParamError naming the parameter."""
    name, ptype = param.name, param.type
    if ptype == "string":
        if not isinstance(value, str):
            raise ParamError(f"'{name}' must be a string")
        return value
    if ptype == "number":
        if not _is_number(value):
            raise ParamError(f"'{name}' must be a number")
        if param.min is not None and value < param.min:
            raise ParamError(f"'{name}' must be at least {_num(param.min)}, not {_num(value)}")
        if param.max is not None and value > param.max:
            raise ParamError(f"'{name}' must be at most {_num(param.max)}, not {_num(value)}")
        return value
    if ptype == "boolean":
        if not isinstance(value, bool):
            raise ParamError(f"'{name}' must be true or false")
        return value
    if ptype == "enum":
        if not isinstance(value, str) or value not in param.enum:
            raise ParamError(f"'{name}' must be one of {', '.join(param.enum)}, not {value!r}")
        return value
    # actorUri, objectId
    if not isinstance(value, str) or not is_https_uri(value):
        raise ParamError(f"'{name}' must be an absolute https URI, not {value!r}")
    return value
