"""Reading the journal: sessions, transcripts and usage (docs/logs.md).

The journal (``<workspace>/.lily/journal/``, docs/session.md#journal) is the source of
truth; this module only reads it. Every regular file under that folder is read, whatever
its name, and records are grouped by their ``session_id``, so one session may span
several files (one per kernel, say) and one file several sessions (``/new``). A torn last
line, a line that is not JSON, a record without a session id, a record cut at the cap or
a journal written by an older Lily is read or skipped with one line in :attr:`notes`,
never an exception.
"""
from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

from lily_kernel.errors import LilyError, LogsError
from lily_kernel.session import journal_auth
from lily_kernel.session.journal import UNCHAINED, verify_chain

MAX_NOTES = 20  # problem lines kept per read; the rest are counted
#: Called by a reader with each record and its line's bytes (journal_auth.mark).
Marker = Callable[[dict[str, Any], bytes], None]


def journal_dir(workspace: Path) -> Path:
    """The folder every journal file of ``workspace`` lives in."""
    return Path(workspace) / ".lily" / "journal"


def journal_files(workspace: Path) -> list[Path]:
    """Every regular file under the journal folder (any name, any depth), in name order;
    symlinks are not followed."""
    root = journal_dir(workspace)
    found: list[Path] = []
    for here, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in files:
            path = Path(here) / name
            if path.is_file() and not path.is_symlink():
                found.append(path)
    return sorted(found)


@dataclass
class Notes:
    """Problem lines met while reading (one per problem), capped at :data:`MAX_NOTES`."""

    lines: list[str] = field(default_factory=list)
    more: int = 0

    def add(self, line: str) -> None:
        """Keep ``line`` (or count it once the cap is reached)."""
        if len(self.lines) < MAX_NOTES:
            self.lines.append(line)
        else:
            self.more += 1

    def all(self) -> list[str]:
        """The lines, with a last one counting those left out."""
        return self.lines + ([f"... and {self.more} more problem line(s)"] if self.more else [])


def parse_lines(data: bytes, path: Path, first_line: int, notes: Notes,
                final: bool = True, mark: Marker | None = None
                ) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of each good line in ``data``. A last line without its newline
    is torn (a crash, or a writer mid-line): skipped, with a note when ``final``.
    ``mark``: called with each record and its line's bytes (journal_auth.mark)."""
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when data ends with a newline
    for i, raw in enumerate(lines):
        number = first_line + i
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            notes.add(f"{path.name}:{number}: not a JSON record, skipped")
            continue
        if not isinstance(record, dict):
            notes.add(f"{path.name}:{number}: not a JSON object, skipped")
            continue
        if not isinstance(record.get("session_id"), str) or not record["session_id"]:
            notes.add(f"{path.name}:{number}: record without a session id, skipped")
            continue
        if record.get("cut"):
            notes.add(f"{path.name}:{number}: a {record.get('event') or 'record'} record was cut "
                      f"at the {record.get('cap')}-byte cap; its head is kept")
        record.pop("_mark", None)  # a reader's verdict is never the file's to give
        if mark is not None:
            mark(record, raw)
        yield number, record
    if tail.strip() and final:
        notes.add(f"{path.name}:{first_line + len(lines)}: torn last line (a crash mid-write), "
                  "skipped")


def read_file(path: Path, notes: Notes, mark: Marker | None = None) -> list[dict[str, Any]]:
    """The good records of one journal file, each with ``_file`` set to its name and
    ``_line`` to its line number (journal.READER_KEYS)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        notes.add(f"{path.name}: cannot be read: {exc.strerror or exc}")
        return []
    out = []
    for number, record in parse_lines(data, path, 1, notes, mark=mark):
        record["_file"], record["_line"] = path.name, number
        out.append(record)
    return out


def _t(record: dict[str, Any]) -> float:
    value = record.get("t")
    return float(value) if isinstance(value, (int, float)) else 0.0


@dataclass
class SessionSummary:
    """One session as ``lily logs`` lists it."""

    id: str
    label: str
    started: float
    last: float
    requests: int = 0
    tool_calls: int = 0
    tokens_in: int | None = None  # None: the endpoint never reported usage
    tokens_out: int | None = None
    models: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    records: int = 0
    first: str = ""  # the first request (one line, clipped): names the session with the label
    parent: str = ""  # the session this one resumed or forked from (docs/session.md#resume)
    parent_kind: str = ""  # "resumed" or "forked"
    foreign: str = ""  # why Lily cannot prove it wrote this session for you ("": it did)

    def as_dict(self) -> dict[str, Any]:
        """The summary as plain JSON data (``--json``)."""
        return {"id": self.id, "label": self.label, "started": iso(self.started),
                "last_activity": iso(self.last), "requests": self.requests,
                "tool_calls": self.tool_calls, "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out, "models": self.models, "tools": self.tools,
                "files": self.files, "records": self.records, "first_request": self.first,
                "parent": {"id": self.parent, "kind": self.parent_kind} if self.parent else None,
                "foreign": self.foreign or None}


def iso(t: float) -> str:
    """``t`` (seconds since the epoch) as UTC ISO 8601, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else "-"


def summarize(session_id: str, records: list[dict[str, Any]]) -> SessionSummary:
    """The list row of one session's records (in journal order)."""
    times = [_t(r) for r in records if _t(r)]
    s = SessionSummary(session_id, "", min(times, default=0.0), max(times, default=0.0),
                       records=len(records))
    files: list[str] = []
    for r in records:
        event = r.get("event")
        if r.get("_file") and r["_file"] not in files:
            files.append(r["_file"])
        if isinstance(r.get("notebook"), str) and r["notebook"]:
            s.label = r["notebook"]  # the notebook's path as last known (a front end told)
        if not s.first and event in ("prose", "message"):
            s.first = _first_request(r)
        if event == "session_created":
            s.label = s.label or str(r.get("label") or "")
            for key, kind in (("resumed_from", "resumed"), ("forked_from", "forked")):
                if isinstance(r.get(key), str):
                    s.parent, s.parent_kind = r[key], kind
            _add(s.models, (r.get("model_config") or {}).get("model")
                 if isinstance(r.get("model_config"), dict) else None)
        elif event == "model_changed" and isinstance(r.get("model_config"), dict):
            _add(s.models, r["model_config"].get("model"))
        elif event == "model_call":
            _add(s.models, r.get("model"))
            usage = r.get("usage")
            if isinstance(usage, dict):
                s.tokens_in = (s.tokens_in or 0) + _int(usage.get("prompt_tokens"))
                s.tokens_out = (s.tokens_out or 0) + _int(usage.get("completion_tokens"))
        elif event == "message" and isinstance(r.get("message"), dict):
            message = r["message"]
            if message.get("role") == "user":
                s.requests += 1
            for call in message.get("tool_calls") or []:
                s.tool_calls += 1
                _add(s.tools, call_name(call))
    s.files = files
    if not s.label:
        # the file's name without its label hash (session/journal.journal_path)
        s.label = re.sub(r"-[0-9a-f]{16}$", "", files[0].rsplit(".", 1)[0]) if files else ""
    return s


def _first_request(r: dict[str, Any]) -> str:
    """The request a prose record, or a user message, holds: one line, at most 60 characters."""
    text: object = r.get("text")
    if r.get("event") == "message":
        message = r.get("message")
        text = (message.get("content") if isinstance(message, dict)
                and message.get("role") == "user" else None)
    if not isinstance(text, str):
        return ""
    one = " ".join(text.split())
    return one if len(one) <= 60 else one[:59] + "…"


def _add(items: list[str], value: object) -> None:
    if isinstance(value, str) and value and value not in items:
        items.append(value)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def call_name(call: object) -> str:
    """The name a recorded tool call names (OpenAI's ``function.name`` or a flat ``name``)."""
    if isinstance(call, dict):
        fn = call.get("function")
        name = fn.get("name") if isinstance(fn, dict) else call.get("name")
        if isinstance(name, str):
            return name
    return "?"


def call_args(call: dict[str, Any]) -> Any:
    """The arguments of a recorded tool call, parsed from JSON when they are a string."""
    fn = call.get("function")
    raw = (fn if isinstance(fn, dict) else call).get("arguments", "{}")
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw  # invalid JSON from the model: kept verbatim
    return raw


class Logs:
    """The journal of one workspace, read once (docs/logs.md). Never writes."""

    def __init__(self, workspace: Path, env: Mapping[str, str] | None = None) -> None:
        self.workspace = Path(workspace)
        self.env = env  # whose journal key tells Lily's own sessions (None: the process's)
        self._foreign: dict[str, str] = {}
        self._key_problem = ""
        try:
            key = journal_auth.load_key(env)
        except LilyError as exc:
            key, self._key_problem = None, str(exc)
        self._key = key
        self.notes = Notes()
        self.by_session: dict[str, list[dict[str, Any]]] = {}
        if not journal_dir(self.workspace).is_dir():
            return
        for path in journal_files(self.workspace):
            for record in read_file(path, self.notes,
                                    lambda r, raw: journal_auth.mark(r, raw, key)):
                self.by_session.setdefault(record["session_id"], []).append(record)
        for records in self.by_session.values():  # several files: one time line
            records.sort(key=_t)

    def sessions(self) -> list[SessionSummary]:
        """Every session, newest activity first, each marked when it is foreign."""
        rows = [self.summary(sid) for sid in self.by_session]
        return sorted(rows, key=lambda s: (s.last, s.id), reverse=True)

    def summary(self, session_id: str) -> SessionSummary:
        """The list row of one session, with :attr:`SessionSummary.foreign` set."""
        row = summarize(session_id, self.by_session[session_id])
        row.foreign = self.foreign(session_id)
        return row

    def foreign(self, session_id: str) -> str:
        """Why Lily cannot prove it wrote session ``session_id`` for this user (``""``: it
        did): a foreign session is shown, searched, exported and replayed, marked, and never
        resumed (docs/logs.md#authenticity)."""
        if session_id not in self._foreign:
            records = self.by_session[session_id]
            if self._key_problem:
                self._foreign[session_id] = self._key_problem
            else:  # the marks the reader set (the chain is checked where a session is
                # used: show, export, replay, resume)
                checked = journal_auth.check_records(records, self._key, chain=False)
                self._foreign[session_id] = (checked.reason if isinstance(
                    checked, journal_auth.Foreign) else "")
        return self._foreign[session_id]

    def resolve(self, prefix: str) -> str:
        """The full id of the session ``prefix`` starts (or a label names); LogsError if
        none or several match."""
        if prefix in self.by_session:
            return prefix
        found = [sid for sid in self.by_session if sid.startswith(prefix)]
        if not found:
            found = [s.id for s in self.sessions() if s.label == prefix]
        if not found:
            raise LogsError(f"no session '{prefix}' in {journal_dir(self.workspace)} "
                            "(lily logs lists them)")
        if len(found) > 1:
            raise LogsError(f"'{prefix}' matches {len(found)} sessions "
                            f"({', '.join(sorted(f[:12] for f in found)[:5])}); "
                            "give more of the id")
        return found[0]

    def checked(self, session_id: str) -> list[dict[str, Any]]:
        """The records of one session once its hash chain holds (docs/logs.md#hash-chain):
        LogsError naming the record that breaks it; a journal from before the chain is
        read with one note saying it cannot be checked."""
        records = self.by_session[session_id]
        problem = verify_chain(records)
        if problem == UNCHAINED:
            self.notes.add(f"session {session_id[:12]}: {UNCHAINED}")
        elif problem is not None:
            raise LogsError(f"the journal of session {session_id[:12]} has been tampered with "
                            f"or damaged: {problem}; refusing to use it")
        return records

    def records(self, session_id: str) -> list[dict[str, Any]]:
        """The records of one session (a full id, see :meth:`resolve`), in time order."""
        return self.by_session[session_id]


@dataclass
class Call:
    """One tool call the model made, with its result once journaled."""

    id: str
    name: str
    args: Any
    result: str | None = None


@dataclass
class Turn:
    """One cell of a session: a command or prose, with what followed it."""

    kind: str  # command | prose | python | event
    text: str
    t: float
    ok: bool = True
    request: str | None = None  # the request a skill command sent the model
    answers: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    approvals: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    tokens_in: int | None = None
    tokens_out: int | None = None
    cut: bool = False
    asked: bool = False  # its request (the user message) has been seen
    interrupted: bool = False  # the user interrupted its request
    outputs: list[dict[str, Any]] = field(default_factory=list)  # a python cell's, as journaled

    @property
    def is_cell(self) -> bool:
        """Whether this turn was a cell the user ran (not a session event)."""
        return self.kind in ("command", "prose", "python")

    def as_dict(self) -> dict[str, Any]:
        """The turn as plain JSON data (``show --json``)."""
        return {"kind": self.kind, "text": self.text, "time": iso(self.t), "ok": self.ok,
                "request": self.request, "answers": self.answers,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.args,
                                "result": c.result} for c in self.calls],
                "approvals": self.approvals, "errors": self.errors, "reads": self.reads,
                "models": self.models, "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out, "cut": self.cut,
                "interrupted": self.interrupted, "outputs": self.outputs}


_QUIET = {"message", "command", "prose", "model_call", "file_read", "error", "interrupted",
          "python"}
_BETWEEN = {"model_call", "file_read", "error"}  # may come between a cell and its request


def turns(records: Iterable[dict[str, Any]]) -> list[Turn]:
    """A session's records as the cells that were run, in order, each with its answer,
    tool calls, approvals, errors and usage. Session events (reloads, model changes)
    become ``event`` turns."""
    out: list[Turn] = []
    cur: Turn | None = None
    calls: dict[str, Call] = {}
    prev: str | None = None
    for r in records:
        event = r.get("event")
        t = _t(r)
        if r.get("cut"):
            turn = Turn("event", f"{event or 'record'} cut at the journal cap "
                                 f"({r.get('bytes')} bytes)", t, cut=True)
            out.append(turn)
        elif event == "command":
            cur = Turn("command", str(r.get("command", "")), t, ok=bool(r.get("ok", True)))
            if isinstance(r.get("error"), str):  # a failed command's one line
                cur.errors.append(r["error"])
            out.append(cur)
        elif event == "python":  # a %%python cell: its source and a summary of its outputs
            cur = Turn("python", str(r.get("source", "")), t, ok=bool(r.get("ok", True)))
            if isinstance(r.get("error"), str):
                cur.errors.append(r["error"])
            cur.outputs = [o for o in r.get("outputs") or [] if isinstance(o, dict)]
            out.append(cur)
        elif event == "prose":
            cur = Turn("prose", str(r.get("text", "")), t)
            out.append(cur)
        elif event == "message" and isinstance(r.get("message"), dict):
            m = r["message"]
            role, content = m.get("role"), m.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            if role == "user":
                if cur is not None and cur.kind == "command" and prev == "command":
                    cur.request, cur.asked = text, True
                elif cur is not None and cur.kind == "prose" and not cur.asked:
                    cur.asked = True
                else:
                    cur = Turn("prose", text, t, asked=True)  # an older journal: no prose record
                    out.append(cur)
            else:
                if cur is None:
                    cur = Turn("prose", "", t)
                    out.append(cur)
                if role == "assistant":
                    if text and content is not None:
                        cur.answers.append(text)
                    for raw in m.get("tool_calls") or []:
                        if isinstance(raw, dict):
                            call = Call(str(raw.get("id", "")), call_name(raw), call_args(raw))
                            calls[call.id] = call
                            cur.calls.append(call)
                elif role == "tool":
                    answered = calls.get(str(m.get("tool_call_id")))
                    if answered is not None:
                        answered.result = text
        elif event == "model_call" and cur is not None:
            _add(cur.models, r.get("model"))
            usage = r.get("usage")
            if isinstance(usage, dict):
                cur.tokens_in = (cur.tokens_in or 0) + _int(usage.get("prompt_tokens"))
                cur.tokens_out = (cur.tokens_out or 0) + _int(usage.get("completion_tokens"))
        elif event == "file_read" and cur is not None:
            _add(cur.reads, r.get("path"))
        elif event == "error" and cur is not None:
            cur.errors.append(str(r.get("error", "")))
        elif event == "interrupted" and cur is not None:
            cur.interrupted = True
        elif isinstance(event, str) and event.startswith("action_") and event != "action_proposed":
            target = cur or Turn("event", "", t)
            target.approvals.append(f"{event[7:]}: {r.get('skill') or r.get('action_id')}")
        elif event == "action_proposed":
            action = r.get("action")
            what = (action.get("tool") or action.get("skill") if isinstance(action, dict)
                    else None) or "?"
            if cur is not None:
                cur.approvals.append(f"proposed: {what}")
        elif event not in _QUIET:
            out.append(Turn("event", _event_text(r), t))
        if not (event in _BETWEEN or (isinstance(event, str) and event.startswith("action_"))):
            prev = event  # what a request's user message follows
    return out


def _event_text(r: dict[str, Any]) -> str:
    event = str(r.get("event") or "record")
    if event == "session_created":
        model = (r.get("model_config") or {}).get("model") if isinstance(
            r.get("model_config"), dict) else None
        return (f"session created (agent {r.get('agent')}, model {model}, "
                f"snapshot {r.get('snapshot_version')})")
    if event == "model_changed" and isinstance(r.get("model_config"), dict):
        return f"model changed to {r['model_config'].get('model')}"
    if event == "skills_reloaded":
        return f"skills reloaded (snapshot {r.get('snapshot_version')})"
    if event == "agent_switched":
        return f"agent switched to {r.get('agent')}"
    if event == "session_ended":
        return f"session ended ({r.get('reason')})"
    if event == "journal_gap":
        lost = f", {r.get('lost')} lost" if r.get("lost") else ""
        return (f"journal gap: writes failed ({r.get('reason')}); the next "
                f"{r.get('late')} record(s) were written late{lost}")
    return event.replace("_", " ")


# -- usage and time filters -------------------------------------------------------

def usage(logs: Logs, by: str = "model") -> list[dict[str, Any]]:
    """Token totals grouped ``by`` model, session or day (UTC), largest first."""
    if by not in ("model", "session", "day"):
        raise LogsError(f"usage --by must be model, session or day, not '{by}'")
    totals: dict[str, dict[str, Any]] = {}
    for sid, records in logs.by_session.items():
        for r in records:
            if r.get("event") != "model_call":
                continue
            key = (str(r.get("model") or "?") if by == "model" else sid[:12] if by == "session"
                   else time.strftime("%Y-%m-%d", time.gmtime(_t(r))))
            row = totals.setdefault(key, {by: key, "calls": 0, "tokens_in": 0, "tokens_out": 0,
                                          "unreported": 0})
            row["calls"] += 1
            u = r.get("usage")
            if isinstance(u, dict):
                row["tokens_in"] += _int(u.get("prompt_tokens"))
                row["tokens_out"] += _int(u.get("completion_tokens"))
            else:
                row["unreported"] += 1
    key_order = (lambda row: row[by]) if by == "day" else (
        lambda row: -(row["tokens_in"] + row["tokens_out"]))
    return sorted(totals.values(), key=key_order)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> float:
    """Seconds in ``30d``, ``12h``, ``2w``, ``90m`` or ``45s``; LogsError otherwise."""
    m = _DURATION.match(text)
    if not m:
        raise LogsError(f"'{text}' is not a duration (like 30d, 12h, 2w, 90m)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def when(text: str, now: float | None = None) -> float:
    """A time for --since/--until: a duration ago (``7d``), an ISO date or date-time (UTC
    unless it says otherwise); LogsError otherwise."""
    from datetime import datetime
    now = time.time() if now is None else now
    if _DURATION.match(text):
        return now - duration(text)
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise LogsError(f"'{text}' is neither a date (2026-11-01), a date-time "
                        "(2026-11-01T09:30) nor a duration ago (7d)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
