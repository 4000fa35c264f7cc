"""MCP tools as Lily tools: names, schemas, approval and results (docs/mcp.md#tools).

Each server tool becomes ``mcp__<server>__<tool>`` (OpenAI's function-name rules, at most
64 characters). Its description, annotations and input schema come from ``tools/list``.
A result goes to the model as text: the text blocks, ``structuredContent`` as JSON, an
image described by type and size (the image itself is kept for the notebook to show);
everything redacted, then capped by the loop at ``tool_result_chars``. ``isError`` is a
tool error.
"""
from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lily_kernel.errors import ToolError
from lily_kernel.redaction import redact
from lily_kernel.tools.tool_registry import Schema, Tool

PREFIX = "mcp__"
MAX_NAME = 64
SHOWN_MIME = ("image/png", "image/jpeg")
_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str, "integer": int, "number": (int, float), "boolean": bool,
    "array": list, "object": dict}


_PLAIN = re.compile(r"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*")


def _part(name: str) -> str:
    """One part of a prefixed name, escaped so no two names meet: kept as it is when it is
    letters and digits joined by single ``_`` or ``-`` (it then holds no ``__`` and neither
    starts nor ends with ``_``), else ``-`` and the hex of its UTF-8 bytes (no ``_`` at all)."""
    if _PLAIN.fullmatch(name):
        return name
    return "-" + name.encode("utf-8", "surrogatepass").hex()


def tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, each part escaped (:func:`_part`), so the name splits back
    one way only: ``mcp__a___b`` cannot come from both ``a_``/``b`` and ``a``/``_b``
    (docs/permissions.md#approvals). Past 64 characters the tool part is shortened and ends
    with a hash of the whole name."""
    name = PREFIX + _part(server) + "__" + _part(tool)
    if len(name) <= MAX_NAME:
        return name
    import hashlib
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return name[:MAX_NAME - 13] + "-" + digest


def annotations_of(tool: Any) -> dict[str, bool]:
    """The tool's ``readOnlyHint`` / ``destructiveHint`` / ``idempotentHint`` /
    ``openWorldHint`` that the server set, by their MCP names."""
    ann = getattr(tool, "annotations", None)
    out: dict[str, bool] = {}
    for attr, key in (("read_only_hint", "readOnlyHint"), ("destructive_hint", "destructiveHint"),
                      ("idempotent_hint", "idempotentHint"), ("open_world_hint", "openWorldHint")):
        value = getattr(ann, attr, None) if ann is not None else None
        if isinstance(value, bool):
            out[key] = value
    return out


def input_schema(raw: Any) -> Schema:
    """The server's input schema, with a check of the arguments' shape (an object, the
    required names present, top-level types); the server validates the rest."""
    schema = dict(raw) if isinstance(raw, Mapping) else {}
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    raw_props = schema.get("properties")
    props: Mapping[str, Any] = raw_props if isinstance(raw_props, Mapping) else {}
    required = [r for r in schema.get("required", []) if isinstance(r, str)] \
        if isinstance(schema.get("required"), list) else []

    def check(args: object) -> str | None:
        if not isinstance(args, Mapping):
            return "the arguments must be a JSON object"
        missing = [r for r in required if r not in args]
        if missing:
            return f"missing required argument(s): {', '.join(missing)}"
        for key, value in args.items():
            spec = props.get(key)
            expected = spec.get("type") if isinstance(spec, Mapping) else None
            py = _JSON_TYPES.get(expected) if isinstance(expected, str) else None
            if py is not None and (not isinstance(value, py) or
                                   (isinstance(value, bool) and expected != "boolean")):
                return f"argument '{key}' must be of type {expected}"
        return None
    return Schema(schema, check)


@dataclass(frozen=True)
class McpTool(Tool):
    """A server's tool in the session's registry (``origin`` "mcp"): its schema is the
    server's, not one derived from a Python signature."""

    schema: Schema | None = None

    @property
    def parameters(self) -> Schema:
        """The input schema from ``tools/list``."""
        return self.schema if self.schema is not None else input_schema({})

    @property
    def takes_arguments(self) -> bool:
        """Whether the schema names any property."""
        return bool(self.parameters.get("properties"))


@dataclass(frozen=True)
class McpImage:
    """An image an MCP tool returned (``image/png`` or ``image/jpeg``): the model reads its
    description, and the command's results carry it to the notebook, which shows it."""

    mime: str
    data: bytes
    tool: str


def make_tool(name: str, server: str, tool: Any, call: Callable[[dict[str, Any]], Any],
              auto_approve: frozenset[str], shown: list[McpImage], source: str = "") -> McpTool:
    """The registry entry for one listed tool; ``call`` sends the arguments to the server.

    Every field the approval card reads is set here, in one place (``origin``, ``server``,
    ``annotations``, ``ask``)."""
    def run(**args: Any) -> str:
        return result_text(name, call(args), shown)
    description = redact(str(getattr(tool, "description", None) or tool.name))[:2000]
    ask = tool.name not in auto_approve and name not in auto_approve
    return McpTool(name, run, description, origin="mcp", server=server,
                   annotations=annotations_of(tool), ask=ask, source=source,
                   schema=input_schema(getattr(tool, "input_schema", None)))


def result_text(name: str, result: Any, shown: list[McpImage]) -> str:
    """A ``CallToolResult`` as the text the model reads; ToolError when ``isError``."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        elif kind in ("image", "audio"):
            mime = str(getattr(block, "mime_type", "") or "")
            try:
                data = base64.b64decode(block.data, validate=False)
            except (ValueError, TypeError):
                data = b""
            if kind == "image" and mime in SHOWN_MIME and data:
                shown.append(McpImage(mime, data, name))
                parts.append(f"[image {mime}, {len(data):,} bytes: shown to the user in the "
                             "notebook]")
            else:
                parts.append(f"[{kind} {mime or 'of unknown type'}, {len(data):,} bytes: "
                             "not shown]")
        elif kind == "resource":
            res = getattr(block, "resource", None)
            text = getattr(res, "text", None)
            parts.append(f"[resource {getattr(res, 'uri', '')}]" + (f"\n{text}" if text else ""))
        elif kind == "resource_link":
            parts.append(f"[resource link {getattr(block, 'uri', '')}]")
    structured = getattr(result, "structured_content", None)
    if structured is not None and not _said(structured, parts):
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    text = redact("\n".join(parts))
    if getattr(result, "is_error", False):
        raise ToolError(f"{name}: {text or 'the tool reported an error'}")
    return text


def _said(structured: Any, parts: list[str]) -> bool:
    """Does a text block already hold ``structured`` as JSON (servers often send both)?"""
    for part in parts:
        try:
            said = json.loads(part)
        except ValueError:
            continue
        # the SDK wraps a non-object return value as {"result": value}
        if said == structured or structured == {"result": said}:
            return True
    return False
