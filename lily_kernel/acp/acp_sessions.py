"""The ACP sessions Lily journaled in a folder: which may be taken up, and the list a client's
history picker shows (docs/front-ends.md#sessions).

One rule for every way back into a session — ``session/load``, ``session/resume``, and
whether ``session/list`` names it: session/journal_auth.py's ``authenticity`` (only a
journal Lily wrote for this user is resumed, or listed). Taking a session up restores its
conversation only, never a setting, a waiting card nor an ``--always`` grant
(docs/session.md#resume).
"""
from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from acp.schema import SessionInfo

from lily_kernel import redaction
from lily_kernel.commands import sanitize
from lily_kernel.errors import CommandError
from lily_kernel.session import journal, journal_auth

PREFIX = "acp-"  # an ACP session's journal label: acp-<session id>
MAX_LISTED = 200  # the newest sessions listed
TITLE_CHARS = 80


def label(session_id: str) -> str:
    """The journal label of ACP session ``session_id``."""
    return f"{PREFIX}{session_id}"


def loadable(workspace: Path, session_id: str) -> Path:
    """The journal of ACP session ``session_id`` in ``workspace``, when there is one to take
    up; CommandError (one line) otherwise. Whether Lily wrote it for this user is decided
    when the session resumes from it (session/journal_auth.py): a foreign one starts fresh
    with one ``Error:`` line, as a notebook's kernel does."""
    path = journal.journal_path(workspace, label(session_id))  # one file per exact label
    if not path.is_file():
        raise CommandError(f"no journal of ACP session '{session_id[:80]}' in {workspace}; "
                           "start a new session.")
    return path


def _title(records: list[dict[str, Any]]) -> str | None:
    for record in records:
        text = record.get("text") if record.get("event") == "prose" else \
            record.get("command") if record.get("event") == "command" else None
        if isinstance(text, str) and text.strip():
            line = " ".join(text.split())
            line = line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1] + "…"
            return sanitize.visible(line)[0]
    return None


def _when(records: list[dict[str, Any]], path: Path) -> str:
    stamp = next((r["t"] for r in reversed(records) if isinstance(r.get("t"), (int, float))),
                 path.stat().st_mtime)
    moment = datetime.datetime.fromtimestamp(float(stamp), datetime.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def listing(workspace: Path, env: Mapping[str, str] | None = None) -> list[SessionInfo]:
    """The ACP sessions journaled in ``workspace`` that Lily wrote for this user (a foreign
    journal is not listed: session/journal_auth.py), newest first: id, folder, title (the
    first request), last activity."""
    folder = workspace / ".lily" / "journal"
    found: list[SessionInfo] = []
    paths = sorted(folder.glob(f"{PREFIX}*.jsonl"), key=lambda p: p.stat().st_mtime,
                   reverse=True) if folder.is_dir() else []
    for path in paths[:MAX_LISTED]:
        said = journal_auth.authenticity(path, env)
        if not isinstance(said, journal_auth.Authentic):
            continue
        records = list(said.records)
        named = next((r["label"] for r in records if isinstance(r.get("label"), str)), "")
        session_id = named[len(PREFIX):] if named.startswith(PREFIX) else ""
        if not session_id or journal.journal_path(workspace, label(session_id)) != path:
            continue  # not the file that label names: never listed under another id
        found.append(SessionInfo(session_id=session_id, cwd=str(workspace),
                                 title=_title(records), updated_at=_when(records, path)))
    return found


def mcp_tables(servers: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The MCP servers of ``session/new`` as ``[mcp.servers]`` tables (stdio and HTTP; an
    SSE server is left out: Lily does not declare ``mcpCapabilities.sse``). Their
    environment and header values are registered as secrets, so no output shows them."""
    tables: dict[str, dict[str, Any]] = {}
    for server in servers:
        name = str(getattr(server, "name", "") or "")
        if not name:
            continue
        if getattr(server, "command", None):
            env = {e.name: e.value for e in getattr(server, "env", None) or []}
            tables[name] = {"command": server.command, "args": list(server.args or []),
                            "env": env}
            secrets: Iterable[str] = env.values()
        elif getattr(server, "type", None) == "http":
            headers = {h.name: h.value for h in server.headers or []}
            tables[name] = {"url": server.url, "headers": headers}
            secrets = headers.values()
        else:
            continue
        for value in secrets:
            redaction.add_secret(value)
    return tables
