"""The built-in commands: names, usage and one-line help.

This table is the single source for the router, ``/help``, tab completion,
inspection and (passed in by the faces) the loader's alias-collision rule;
:func:`is_command` says which cells are commands. Both import nothing, so a face
can route a cell without loading the core (the kernel starts without it:
docs/architecture.md#import-rules).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltinCommand:
    """One built-in command: its name, usage and one-line summary."""
    name: str
    usage: str
    summary: str


BUILTINS: tuple[BuiltinCommand, ...] = (
    BuiltinCommand("skills", "/skills [--all]",
                   "List the skills in this session's snapshot; --all adds excluded skills and why."),
    BuiltinCommand("skill", "/skill <name> [input]",
                   "Run that skill now: tool_dispatch skills call their tool, prompt_rewrite skills go to the model."),
    BuiltinCommand("help", "/help [skill]",
                   "List the commands, or show one skill's metadata from the snapshot."),
    BuiltinCommand("agent", "/agent [name]",
                   "List the agents, or switch persona (conversation, skills and model are kept)."),
    BuiltinCommand("reload_skills", "/reload_skills",
                   "Rebuild the skill snapshot from disk (version + 1)."),
    BuiltinCommand("reload_persona", "/reload_persona",
                   "Re-read the active agent's persona files."),
    BuiltinCommand("new", "/new",
                   "Start a new session: new id, fresh snapshot, empty conversation."),
    BuiltinCommand("rewind", "/rewind [N]",
                   "List the requests the model sees, or drop request N and everything after it "
                   "(the cells and the journal keep them)."),
    BuiltinCommand("fork", "/fork [name]",
                   "Go on in a new session that carries this conversation, to try another direction."),
    BuiltinCommand("model", "/model [name] [key=value ...]",
                   "Show or change the model configuration "
                   "(temperature, reasoning_effort, verbosity, base_url, timeout, max_retries, "
                   "context_window, max_tokens) and what each part of a request costs in tokens."),
    BuiltinCommand("compact", "/compact",
                   "Replace the earlier turns that no longer fit the model's context window "
                   "with a summary the model writes."),
    BuiltinCommand("logs", "/logs [N], /logs export [FILE]",
                   "This session's journal: its summary and last N cells (default 10), "
                   "or export it as Markdown (or a notebook, FILE.ipynb)."),
    BuiltinCommand("trust", "/trust [--revoke]",
                   "Show what this workspace's lily.toml changes (endpoint, outbox, tools policy) "
                   "and trust it; --revoke undoes it."),
    BuiltinCommand("mcp", "/mcp [restart NAME]",
                   "Show each MCP server's state and tools with their approval mode, or restart one."),
    BuiltinCommand("mode", "/mode [name]",
                   "Show or change the permission mode: plan (read-only), ask (every write and "
                   "run asks; the default), edits (workspace edits run), auto (what the policy "
                   "allows runs)."),
    BuiltinCommand("policy", "/policy",
                   "Show every effective permission setting and the layer it came from "
                   "(administrator, user, environment, workspace, session)."),
    BuiltinCommand("confirm", "/confirm [id] [--always]",
                   "Carry out the change, dispatch or tool call waiting for confirmation "
                   "(--always: that tool runs without a card until /new)."),
    BuiltinCommand("cancel", "/cancel [id]",
                   "Discard the change, dispatch or tool call waiting for confirmation."),
)

BUILTIN_NAMES: frozenset[str] = frozenset(c.name for c in BUILTINS)
BY_NAME: dict[str, BuiltinCommand] = {c.name: c for c in BUILTINS}


def is_command(cell: str) -> bool:
    """Whether ``cell`` is a command (its first non-blank line starts with '/'), without
    parsing it: a face asks this of every cell, and the runner parses a command once
    (``router.parse``, docs/commands.md#parsing)."""
    return cell.lstrip().startswith("/")
