"""The demo's stand-in model: a few fixed rules instead of a model (docs/testing.md#stand-in).

``ScriptedServer(demo_responder)`` answers ``make demo`` and the quickstart
notebook when no API key is set. Everything it says starts with
``[scripted model] ``, so it is never mistaken for a model.
"""
from __future__ import annotations

import json
import re
from typing import Any

from lily_kernel.testing.messages import message_text

__all__ = ["demo_responder"]

_DEMO_PREFIX = "[scripted model] "
_SEPARATOR_ROW = re.compile(r"^\|[\s:\-|]+\|$")


def _offered_tools(request: dict[str, Any]) -> set[str]:
    names = set()
    for tool in request.get("tools") or []:
        if isinstance(tool, dict):
            fn = tool["function"] if isinstance(tool.get("function"), dict) else tool
            if isinstance(fn.get("name"), str):
                names.add(fn["name"])
    return names


def _answered_call(messages: list[Any], tool_message: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The name and arguments of the tool call a tool message answers."""
    wanted = tool_message.get("tool_call_id")
    fallback: tuple[str | None, dict[str, Any]] = (None, {})
    for msg in reversed(messages):
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {}
            found = (fn.get("name"), args if isinstance(args, dict) else {})
            if call.get("id") == wanted:
                return found
            if fallback[0] is None:
                fallback = found
    return fallback


def _count_table_rows(text: str) -> int:
    rows = [line.strip() for line in text.splitlines() if line.strip().startswith("|")]
    separators = [i for i, row in enumerate(rows) if _SEPARATOR_ROW.match(row)]
    if separators:  # a header row precedes each separator row
        skip = set(separators) | {i - 1 for i in separators if i > 0}
        rows = [row for i, row in enumerate(rows) if i not in skip]
    return len(rows)


def _forced_skill(user_text: str) -> tuple[str | None, str]:
    """The skill a ``/skill`` or alias request forces, and the user's input after it."""
    found = re.search(r'<skill name="([^"]+)">', user_text)
    if not found:
        return None, user_text
    body, _, rest = user_text.partition("</skill>")
    given = re.search(r"^ARGUMENTS: (.*)$", body, re.MULTILINE)  # Claude Code's rule
    return found.group(1), (given.group(1) if given else rest).strip()


def _results_since(messages: list[Any], start: int) -> dict[str, str]:
    """Each tool's latest result after message ``start``, by tool name."""
    found: dict[str, str] = {}
    for msg in messages[start + 1:]:
        if msg.get("role") == "tool":
            name, _ = _answered_call(messages, msg)
            if name:
                found[name] = message_text(msg)
    return found


def _corrected(source: str, error: str) -> str:
    """A corrected cell for a failed one: a clearly marked placeholder for a missing name,
    else the cell with a comment naming the error (the stand-in knows no more)."""
    body = re.sub(r"^%%python[^\n]*\n", "", source)
    missing = re.search(r"NameError: name '([A-Za-z_]\w*)' is not defined", error)
    if missing:
        name = missing.group(1)
        return (f"{name} = 7  # [scripted model] define {name} first: put the value you meant\n"
                f"{body}")
    return f"# [scripted model] this cell raised {error.splitlines()[0] if error else 'an error'}\n{body}"


def _fix(user_text: str, results: dict[str, str]) -> dict[str, Any]:
    """``/fix`` (fix_error): read the last error, propose a corrected cell, explain."""
    if "last_error" not in results:
        return {"tool_calls": [{"name": "last_error", "arguments": {}}]}
    report = results["last_error"]
    if report.startswith("No cell has failed"):
        return {"content": f"{_DEMO_PREFIX}No cell has failed in this session, so there is "
                           "nothing to fix."}
    source = report.partition("--- source ---\n")[2].partition("\n--- error ---")[0]
    error = report.partition("--- error ---\n")[2].partition("\n---")[0].strip()
    if "propose_cell" not in results:
        return {"tool_calls": [{"name": "propose_cell",
                                "arguments": {"code": _corrected(source, error)}}]}
    return {"content": (f"{_DEMO_PREFIX}The last failed cell raised `{error.splitlines()[0]}`. "
                        "I proposed a corrected cell below: read it, change what it marks, "
                        "and run it. Nothing ran.")}


def _explore(user_text: str, results: dict[str, str]) -> dict[str, Any]:
    """``/explore NAME`` (explore_data): inspect the variable, propose a cell, summarise."""
    name = (user_text.split() or [""])[0]
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        return {"content": f"{_DEMO_PREFIX}Name a variable to explore: `/explore df`."}
    if "inspect_variable" not in results:
        return {"tool_calls": [{"name": "inspect_variable", "arguments": {"name": name}}]}
    summary = results["inspect_variable"]
    if summary.startswith("Error:"):
        return {"content": f"{_DEMO_PREFIX}{summary.removeprefix('Error:').strip()}"}
    if "propose_cell" not in results:
        table = "DataFrame" in summary.splitlines()[0]
        code = f"{name}.describe(include='all')" if table else f"{name}"
        return {"tool_calls": [{"name": "propose_cell", "arguments": {"code": code}}]}
    lines = [line for line in summary.splitlines() if line.strip()][:6]
    return {"content": (f"{_DEMO_PREFIX}Here is `{name}` at a glance:\n\n"
                        + "\n".join(f"- {line.strip()}" for line in lines)
                        + "\n\nI proposed a cell below with a first look at its values; "
                        "nothing ran.")}


def demo_responder(request: dict[str, Any]) -> dict[str, Any]:
    """A rule-based stand-in "model" for ``make demo`` when no API key is set.

    Use it as ``ScriptedServer(demo_responder)``. It is clearly labelled: every
    text it returns starts with ``"[scripted model] "``. Rules, first match wins:

    0. ``/fix`` (the ``fix_error`` skill forced): call ``last_error``, then
       ``propose_cell`` with a corrected cell (a marked placeholder for a missing name),
       then explain. ``/explore NAME`` (``explore_data``): call ``inspect_variable``,
       then ``propose_cell``, then summarise what it saw.
    1. The last message is a tool result: after ``scan_todos``, summarise
       ``I found N markers.`` (N = the table rows of the result); after
       ``list_variables``, repeat what it listed; after ``run_python``, say
       what the code printed; after any
       other tool (e.g. ``load_skill``), answer a short Markdown plan
       (``# Plan`` / ``## Objective`` ...) saying it followed the loaded skill.
    2. A ``load_skill`` tool is offered, no tool message follows the last user
       message, and that message mentions "plan": call
       ``load_skill {"name": "plan_compiler"}``.
    3. The last user message contains "TODO" or "todo" and ``scan_todos`` is
       offered: call ``scan_todos {"input": "."}``.
    4. ``list_variables`` is offered and the last user message asks about
       "variables": call it. ``run_python`` is offered and the message holds
       ``run: <code>``: call ``run_python`` with that code (Lily then asks the
       user to confirm).
    5. Otherwise echo: ``You said: <first 200 characters>.`` plus a note on how
       to use a real model.

    Every answer reports token usage (an estimate from the request's size), as real
    endpoints do, so the answer's footer shows it.
    """
    turn = _respond(request)
    turn["usage"] = True  # ScriptedServer: report an estimate
    return turn


def _respond(request: dict[str, Any]) -> dict[str, Any]:
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    tools = _offered_tools(request)
    last = messages[-1] if messages else {}
    last_user_at = max((i for i, m in enumerate(messages) if m.get("role") == "user"),
                       default=-1)
    user_text = message_text(messages[last_user_at]).strip() if last_user_at >= 0 else ""

    forced, forced_input = _forced_skill(user_text)
    results = _results_since(messages, last_user_at)
    if forced == "fix_error" and {"last_error", "propose_cell"} <= tools:
        return _fix(forced_input, results)
    if forced == "explore_data" and {"inspect_variable", "propose_cell"} <= tools:
        return _explore(forced_input, results)
    if last.get("role") == "tool":
        name, args = _answered_call(messages, last)
        result = message_text(last)
        if name == "scan_todos":
            n = _count_table_rows(result)
            return {"content": f"{_DEMO_PREFIX}I found {n} marker{'' if n == 1 else 's'}."}
        if name == "list_variables":
            head, *lines = result.splitlines() or [""]
            return {"content": f"{_DEMO_PREFIX}I can see {head.rstrip(':')}.\n\n"
                               + "\n".join(f"- {line}" for line in lines)}
        if name == "run_python":
            return {"content": f"{_DEMO_PREFIX}You confirmed, so the code ran. What came back:"
                               f"\n\n```\n{result.strip()}\n```"}
        skill = args.get("name") if name == "load_skill" else None
        objective = (user_text.splitlines() or ["(no objective given)"])[0][:200]
        followed = (f"I followed the loaded skill `{skill}`" if skill
                    else f"I followed the result of the `{name or 'tool'}` tool")
        return {"content": (
            f"{_DEMO_PREFIX}{followed} to draft this plan.\n\n"
            "# Plan\n\n"
            f"## Objective\n{objective}\n\n"
            "## Constraints\n- (none stated)\n\n"
            "## Phases\n1. Understand the goal (1 step)\n2. Do the work (2 steps)\n\n"
            "## Steps\n"
            "1. Restate the objective and what done looks like.\n"
            "2. Make the change in small, checked steps.\n"
            "3. Review the result against the objective.\n")}

    tool_since_user = any(m.get("role") == "tool" for m in messages[last_user_at + 1:])
    if ("load_skill" in tools and not tool_since_user
            and re.search(r"\bplan", user_text, re.IGNORECASE)):
        return {"tool_calls": [{"name": "load_skill", "arguments": {"name": "plan_compiler"}}]}
    if "list_variables" in tools and not tool_since_user \
            and re.search(r"\bvariables?\b", user_text, re.IGNORECASE):
        return {"tool_calls": [{"name": "list_variables", "arguments": {}}]}
    code = re.search(r"\brun:\s*(.+)", user_text, re.IGNORECASE | re.DOTALL)
    if "run_python" in tools and not tool_since_user and code:
        return {"tool_calls": [{"name": "run_python", "arguments": {"code": code.group(1).strip()}}]}
    if "scan_todos" in tools and ("TODO" in user_text or "todo" in user_text):
        return {"tool_calls": [{"name": "scan_todos", "arguments": {"input": "."}}]}
    return {"content": (f"{_DEMO_PREFIX}You said: {user_text[:200]}. (This is a scripted "
                        "stand-in: set OPENAI_API_KEY or OPENAI_BASE_URL for a real model.)")}
