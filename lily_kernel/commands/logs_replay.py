"""A journaled session as a golden test: ``lily logs replay`` (docs/logs.md#replay).

:func:`build` turns one session's records into two files in a folder:

- ``<id>.replay.json``, the *replay script*: every model turn the session received (its
  answer text, its tool calls with their recorded ids and arguments, its usage), each with
  the messages the model was sent just before it (the request, or the tool results), and
  the workspace files the session's tools read (journaled when ``[journal] capture_reads``
  is on), plus where the session's workspace skills and persona live;
- ``<id>.ipynb``, a notebook on the Lily kernel: a first cell that starts the replay
  (:mod:`lily_kernel.jupyter.replay_notebook`), then the session's cells in order, then a cell that
  checks every recorded model turn was used.

Under ``pytest --nbval`` the cells run again for real against a scripted server that gives
the recorded answers, and refuses (HTTP 400, shown in the cell) when what Lily sends it
differs from what it was sent when the session was recorded — a changed skill body, a
tool whose result changed.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from lily_kernel.commands import sanitize
from lily_kernel.commands.logs_export import (
    KERNELSPEC,
    LANGUAGE_INFO,
    cell_id,
    refusal,
    write_notebook,
    write_text,
)
from lily_kernel.errors import LogsError
from lily_kernel.session.logs import Logs, Turn, call_name, summarize, turns

SCRIPT_SUFFIX = ".replay.json"
FORMAT = 1
SANITIZE_NAME = "lily_replay_sanitize.cfg"
# What changes from run to run in Lily's outputs (nbval's --nbval-sanitize-with format).
# What changes from run to run in Lily's outputs (nbval's --nbval-sanitize-with format), the
# one list for every command's output; nbval applies the rules in this order.
SANITIZE = """[session ids in code spans (/new, /fork)]
regex: `[0-9a-f]{12}`
replace: `<id>`

[session ids in /logs and labels]
regex: ([Ss]ession[ -]|into )[0-9a-f]{12}\\b
replace: \\1<id>

[full session ids]
regex: \\b[0-9a-f]{32}\\b
replace: <session-id>

[snapshot hashes]
regex: \\(([0-9a-f]{12})\\)
replace: (<hash>)

[card ids]
regex: ([Cc]ard (?:`|<code>)?|/confirm |/cancel )[0-9a-f]{8}\\b
replace: \\1<card>

[activity ids]
regex: urn:uuid:[0-9a-f-]{36}
replace: urn:uuid:<uuid>

[timestamps]
regex: \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d(\\.\\d+)?Z
replace: <time>

[clock times (/rewind)]
regex: \\b\\d\\d:\\d\\d\\b
replace: <hh:mm>

[/skills filter keys]
regex: lily-skills-[0-9a-f]{12}
replace: lily-skills-<key>

[local ports (the scripted server)]
regex: 127\\.0\\.0\\.1:\\d+
replace: 127.0.0.1:<port>

[replay workspace copies]
regex: /[^\\s`'"]*lily-replay-[A-Za-z0-9_]+
replace: <replay-workspace>

[paths in code spans]
regex: `/[^`\\s]*/[^`\\s]*`
replace: `<path>`

[token estimates and usage counts]
regex: system [\\d,]+ · tools [\\d,]+ \\(\\d+\\) · skills index [\\d,]+ tokens
replace: system <n> · tools <n> · skills index <n> tokens

[a card's last line: once decided the saved card says "Decided ...", which nbval does not see]
regex: (Nothing runs until you decide|Nothing happens until you confirm|Decided|Declined: a new request)([^\\n<"\\\\]|<code>|</code>|<id>|<card>)*
replace: <decide line>
"""  # noqa: E501 (a regex of nbval's config: one line)
# Applies SANITIZE when pytest runs the folder's notebooks without --nbval-sanitize-with.
CONFTEST = '''"""Written by `lily logs replay`: nbval ignores what changes from run to run."""
from pathlib import Path


def pytest_configure(config):
    if not getattr(config.option, "nbval_sanitize_with", None):
        config.option.nbval_sanitize_with = str(Path(__file__).parent / "lily_replay_sanitize.cfg")
'''


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return ""


def model_turns(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The model's turns, in order: ``{"sent": [texts], "turn": scripted-server turn}``."""
    calls = [r for r in records if r.get("event") == "model_call"]
    sent: list[str] = []
    out: list[dict[str, Any]] = []
    for r in records:
        if r.get("event") != "message" or not isinstance(r.get("message"), dict):
            continue
        m = r["message"]
        if m.get("role") != "assistant":
            sent.append(_text(m))
            continue
        turn: dict[str, Any] = {"content": m.get("content") if isinstance(m.get("content"), str)
                                else ""}
        tool_calls = []
        for call in m.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            fn = call.get("function")
            args = fn.get("arguments", "{}") if isinstance(fn, dict) else "{}"
            tool_calls.append({"name": call_name(call), "id": str(call.get("id", "")),
                               "arguments": args if isinstance(args, (str, dict)) else "{}"})
        if tool_calls:
            turn["tool_calls"] = tool_calls
        out.append({"sent": sent, "turn": turn})
        sent = []
    if len(calls) == len(out):  # one model_call per answered turn: its reported usage
        for item, call in zip(out, calls, strict=True):
            usage = call.get("usage")
            if isinstance(usage, dict):
                item["turn"]["usage"] = {k: v for k, v in usage.items() if isinstance(v, int)}
    return out


def captured_files(records: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The files the session's tools read (the first content seen of each)."""
    files: dict[str, dict[str, str]] = {}
    for r in records:
        if r.get("event") != "file_read" or not isinstance(r.get("path"), str):
            continue
        if r["path"] in files:
            continue
        if isinstance(r.get("text"), str):
            files[r["path"]] = {"text": r["text"]}
        elif isinstance(r.get("base64"), str):  # an older journal's binary file
            files[r["path"]] = {"base64": r["base64"]}
        # a file that was not UTF-8 is journaled by size and hash only ("binary"): the
        # replay's copy lacks it
    return files


def _model(records: list[dict[str, Any]]) -> str | None:
    for r in records:
        model = r.get("model") if r.get("event") == "model_call" else None
        if isinstance(model, str):
            return model
    for r in records:
        config = r.get("model_config")
        model = config.get("model") if isinstance(config, dict) else None
        if isinstance(model, str):
            return model
    return None


def _where(path: Path, base: Path) -> str | None:
    """``path`` relative to ``base`` when it exists (so the folder can move with its
    project), else None."""
    if not path.is_dir():
        return None
    try:
        return os.path.relpath(path.resolve(), base.resolve())
    except ValueError:  # another drive
        return str(path.resolve())


def _setup_source(script_name: str, name: str) -> str:
    return ("%%python\n"
            f"# Replay of Lily session {name} (written by `lily logs replay`): the\n"
            "# model's recorded answers come from a scripted server on 127.0.0.1, and the tools\n"
            "# run for real against a copy of the files the session read. Run it with\n"
            "# pytest --nbval; a cell whose request or tool result differs fails there.\n"
            "from lily_kernel.jupyter import replay_notebook as replay\n"
            f"replay.start({script_name!r})")


# Commands that run code, start programs or write files in a replay: /confirm carries out
# the held call waiting (a recorded run_python), /trust trusts the replay's workspace (whose
# lily.toml may start MCP servers), /mcp restart starts one, /skill runs a skill (a
# tool_dispatch skill calls its tool directly), /mode may let calls run without a card,
# /logs export writes a file. Any other "/name" that is not a built-in is a skill's command
# alias, which may dispatch to a tool such as run_python: code too.
CODE_COMMANDS = {"confirm": "carries out the call waiting for confirmation",
                 "trust": "trusts the replay's workspace (its MCP servers may start)",
                 "mcp": "may start an MCP server",
                 "skill": "runs a skill (a tool_dispatch skill calls its tool directly)",
                 "mode": "changes which calls run without asking"}
#: Built-in commands that run nothing and write nothing in a replay (the rest is code).
INERT_COMMANDS = frozenset({"skills", "help", "agent", "reload_skills", "reload_persona",
                            "new", "rewind", "fork", "compact", "cancel", "policy",
                            "logs", "model"})
_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def prompt_aliases(workspace: Path, with_workspace: bool) -> frozenset[str]:
    """The command aliases that, in the replay's kernel, only put a request to the model (a
    ``prompt_rewrite`` skill): the user's and Lily's own skills, and the replayed
    workspace's only ``with_workspace``. Any other alias may dispatch to a tool or carry
    out an action, so :func:`code_reason` counts it as code."""
    from lily_kernel.commands.table import BUILTIN_NAMES
    from lily_kernel.skills.loader import build_snapshot
    from lily_kernel.skills.paths import WORKSPACE_SOURCES, Root, skill_roots
    from lily_kernel.tools.builtin_tools import register_builtins
    from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry
    env = dict(os.environ)
    roots: list[Root] = [r for r in skill_roots(env, workspace)
                         if r.source not in WORKSPACE_SOURCES]
    if with_workspace:  # as the replay's kernel gets it: SKILLS_WORKSPACE_DIR
        roots.insert(0, Root("workspace", workspace / "skills", False))
    tools = ToolRegistry()
    register_builtins(tools, workspace)
    snap = build_snapshot(roots, tools, ToolPolicy(), reserved=BUILTIN_NAMES)
    return frozenset(alias for alias, name in snap.aliases.items()
                     if snap.skill(name).invocation_mode == "prompt_rewrite")


def code_reason(text: str, prompt_only: frozenset[str] = frozenset()) -> str | None:
    """Why a cell of a journal would run code (or write a file, or send the session
    elsewhere) when replayed in the Lily kernel (None: it would not): Python, a magic or a
    shell line, a command in :data:`CODE_COMMANDS`, ``/logs export``, ``/model`` naming a
    ``base_url``, or a ``/name`` that is no inert built-in (a skill's alias may dispatch to
    ``run_python``; ``prompt_only``: the aliases that only ask the model, from
    :func:`prompt_aliases`). Decided from the cell's text, as the kernel routes it, never
    from what the journal says the cell was."""
    stripped = text.lstrip()
    if not stripped:
        return None
    if stripped.startswith("/"):
        words = stripped[1:].split(maxsplit=1)
        name = words[0] if words else ""
        rest = words[1] if len(words) > 1 else ""
        if name in CODE_COMMANDS and (rest.strip() or name != "mode"):  # bare /mode shows it
            return f"/{name} {CODE_COMMANDS[name]}"
        if name == "logs" and rest.split()[:1] == ["export"]:
            return "/logs export writes a file"
        if name == "model" and "base_url" in rest:
            return "/model base_url points the replay at another endpoint"
        if name in INERT_COMMANDS or name in prompt_only:
            return None
        return (f"/{_line(name, 40)} is a skill's command or alias (it may dispatch to a tool "
                "such as run_python)")
    if stripped.startswith("%%python"):
        return "Python (%%python)"
    if stripped[0] in "%!":
        return "an IPython magic or shell command"
    if stripped.rstrip() in ("exit", "quit", "exit()", "quit()"):
        return "ends the kernel"
    return None


def _line(text: str, width: int = 100) -> str:
    """``text`` as one printable line for the terminal (no control characters)."""
    one = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return one if len(one) <= width else one[:width - 1] + "…"


def code_listing(cells: list[Turn], turns_: list[dict[str, Any]],
                 prompt_only: frozenset[str] = frozenset()) -> list[str]:
    """What the replayed notebook would run that is code, one line each: each cell that is
    code (numbered as in the notebook, after the setup cell) and each recorded
    ``run_python`` call the scripted model would make."""
    out = []
    for number, turn in enumerate(cells, 2):
        reason = code_reason(turn.text, prompt_only)
        if reason is not None:
            out.append(f"cell {number}: {reason}: {_line(turn.text)}")
    for i, item in enumerate(turns_, 1):
        for call in item["turn"].get("tool_calls", []):
            if call.get("name") == "run_python":
                args = call.get("arguments")
                code = args.get("code") if isinstance(args, dict) else None
                if code is None and isinstance(args, str):
                    try:
                        code = json.loads(args).get("code")
                    except (ValueError, AttributeError):
                        code = args
                out.append(f"model turn {i}: run_python (runs on /confirm): "
                           f"{_line(str(code or ''))}")
    return out


def build(logs: Logs, session_id: str, to: Path, include_code: bool = False,
          with_workspace: bool = False) -> tuple[Path, Path, list[str]]:
    """Write the replay script and notebook of ``session_id`` into ``to``: their paths,
    and the lines saying what in it is code (:func:`code_listing`). A cell that is code
    is written as a cell only with ``include_code``; else as a Markdown cell showing it,
    and the replay's session denies ``run_python`` and asks before every other call.
    The replayed workspace's skills, persona and ``lily.toml`` are used only with
    ``with_workspace`` (docs/logs.md#replay-and-code)."""
    if not _SAFE_ID.fullmatch(session_id):
        raise LogsError("a session id must be letters, digits, '_' and '-' (up to 64); "
                        "this journal's is not, so it cannot be replayed")
    records = logs.records(session_id)
    if any(r.get("cut") for r in records):
        raise LogsError(f"session {session_id[:12]} has records cut at the journal cap; "
                        "it cannot be replayed exactly (raise [limits] journal_record_bytes)")
    cells = [t for t in turns(records) if t.is_cell]
    if not cells:
        raise LogsError(f"session {session_id[:12]} ran no cells; nothing to replay")
    to = Path(to)
    problem = refusal(to / f"{session_id[:12]}.ipynb")
    if problem:  # before the folder is made (docs/logs.md#where-exports-go)
        raise LogsError(f"{problem}; a replay is never written there, name another folder")
    to.mkdir(parents=True, exist_ok=True)
    workspace = logs.workspace
    name = session_id[:12]
    lily_toml = workspace / "lily.toml"
    recorded = model_turns(records)
    script = {
        "format": FORMAT, "session_id": session_id,
        "label": summarize(session_id, records).label,
        "model": _model(records),
        "include_code": include_code,  # without it the replay runs no code (tools/gate.py)
        "with_workspace": with_workspace,
        "skills_dir": _where(workspace / "skills", to) if with_workspace else None,
        "persona_dir": _where(workspace / "persona", to) if with_workspace else None,
        "lily_toml": (lily_toml.read_text(encoding="utf-8")
                      if with_workspace and lily_toml.is_file() else None),
        "files": captured_files(records),
        "turns": recorded,
    }
    script_path = to / f"{name}{SCRIPT_SUFFIX}"
    write_text(script_path, json.dumps(script, indent=1, ensure_ascii=False) + "\n")
    nb_cells = [_code(_setup_source(script_path.name, name))]
    prompt_only = prompt_aliases(workspace, with_workspace)
    for turn in cells:
        reason = code_reason(turn.text, prompt_only)
        if reason is not None and not include_code:
            nb_cells.append(_left_out(turn.text, reason))
            continue
        failed = not turn.ok or bool(turn.errors) or turn.interrupted
        nb_cells.append(_code(turn.text, ["raises-exception"] if failed else []))
    nb_cells.append(_code("%%python\nreplay.finish()"))
    nb = {"nbformat": 4, "nbformat_minor": 5, "cells": nb_cells,
          "metadata": {"kernelspec": dict(KERNELSPEC),
                       "language_info": dict(LANGUAGE_INFO),
                       "lily": {"replay_of": session_id}}}
    nb_path = to / f"{name}.ipynb"
    write_notebook(nb_path, nb)
    write_text(to / SANITIZE_NAME, SANITIZE)
    if not (to / "conftest.py").exists():  # never replace the project's own
        # the one file that runs by itself a replay writes: Lily's own fixed text
        (to / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    return nb_path, script_path, code_listing(cells, recorded, prompt_only)


def _code(source: str, tags: list[str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"tags": tags} if tags else {}
    return {"cell_type": "code", "id": cell_id(), "execution_count": None,
            "metadata": metadata, "source": source, "outputs": []}


def _left_out(text: str, reason: str) -> dict[str, Any]:
    """A cell of the journal that is code, shown, not run (without ``--include-code``)."""
    return {"cell_type": "markdown", "id": cell_id(), "metadata": {"lily": {"left_out": True}},
            "source": (f"**Not run: {sanitize.md_text(reason)}.** Written from the journal; "
                       "review it, then `lily logs replay --include-code` writes it as a "
                       f"cell.\n\n{sanitize.code_block(text)}")}
