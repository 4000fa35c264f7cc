"""Full-text search over the journal: an SQLite FTS5 index kept in ``.lily/`` (docs/logs.md#search).

The JSONL journal stays the source of truth; the index is a cache rebuilt from it. Each
search first brings the index up to date: per journal file it remembers the inode and the
byte offset it has read to, reads only the complete lines appended since, and reindexes
a file from the start when it was replaced or shrank (``lily logs rm``/``prune``). A line a
writer has not finished yet is left for the next search, so kernels appending while a
search runs lose nothing. Deleting the index file is always safe. When ``.lily/`` cannot be
written the search builds the index in memory and says so in one note.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lily_kernel.errors import LogsError
from lily_kernel.session.logs import (
    Notes,
    call_args,
    call_name,
    iso,
    journal_dir,
    journal_files,
    parse_lines,
)

INDEX_NAME = "logs-index.sqlite"
SCHEMA = 1
_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS files(path TEXT PRIMARY KEY, ino INTEGER, offset INTEGER,
                                 lines INTEGER);
CREATE TABLE IF NOT EXISTS models(session TEXT, model TEXT, PRIMARY KEY(session, model));
CREATE TABLE IF NOT EXISTS calls(id TEXT PRIMARY KEY, name TEXT);
CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(
    text, session UNINDEXED, t UNINDEXED, kind UNINDEXED, tool UNINDEXED, file UNINDEXED,
    tokenize = 'unicode61');
"""


def index_path(workspace: Path) -> Path:
    """Where the search index of ``workspace`` is kept."""
    return Path(workspace) / ".lily" / INDEX_NAME


@dataclass(frozen=True)
class Hit:
    """One search result: where and when, and a snippet with the match in [brackets]."""

    session: str
    t: float
    kind: str
    tool: str
    snippet: str
    file: str = ""  # the journal file it is in, relative to the journal folder

    def as_dict(self) -> dict[str, Any]:
        """The hit as plain JSON data (``--json``)."""
        return {"session": self.session, "time": iso(self.t), "kind": self.kind,
                "tool": self.tool or None, "snippet": self.snippet}


class Index:
    """The FTS5 index of one workspace's journal."""

    def __init__(self, workspace: Path, notes: Notes | None = None) -> None:
        self.workspace = Path(workspace)
        self.notes = notes if notes is not None else Notes()
        self.db = self._open()

    def _open(self) -> sqlite3.Connection:
        path = index_path(self.workspace)
        if path.parent.is_dir():
            try:
                db = sqlite3.connect(path, timeout=30, isolation_level=None)
                db.execute("PRAGMA journal_mode = WAL")
                self._prepare(db)
                return db
            except sqlite3.Error as exc:
                self.notes.add(f"search index {path} unusable ({exc}); searching without it")
        db = sqlite3.connect(":memory:", isolation_level=None)
        self._prepare(db)
        return db

    @staticmethod
    def _prepare(db: sqlite3.Connection) -> None:
        db.executescript(_SCHEMA_SQL)
        row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None or row[0] != str(SCHEMA):  # an index of another layout: start over
            db.executescript("DELETE FROM files; DELETE FROM models; DELETE FROM calls; "
                             "DELETE FROM docs;")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    # -- keeping it current -------------------------------------------------------------
    def refresh(self) -> int:
        """Index what was appended since the last search; the number of records added."""
        added = 0
        db = self.db
        db.execute("BEGIN IMMEDIATE")  # one refresher at a time; readers go on (WAL)
        try:
            seen: set[str] = set()
            folder = journal_dir(self.workspace)
            for path in journal_files(self.workspace):
                key = str(path.relative_to(folder))
                seen.add(key)
                added += self._refresh_file(path, key)
            for (key,) in db.execute("SELECT path FROM files").fetchall():
                if key not in seen:  # removed (lily logs rm emptied it)
                    db.execute("DELETE FROM docs WHERE file = ?", (key,))
                    db.execute("DELETE FROM files WHERE path = ?", (key,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return added

    def _refresh_file(self, path: Path, key: str) -> int:
        db = self.db
        try:
            st = path.stat()
        except OSError:
            return 0
        row = db.execute("SELECT ino, offset, lines FROM files WHERE path = ?", (key,)).fetchone()
        offset, lines = 0, 0
        if row is not None and row[0] == st.st_ino and st.st_size >= row[1]:
            offset, lines = row[1], row[2]
        elif row is not None:  # replaced or cut: read it again from the start
            db.execute("DELETE FROM docs WHERE file = ?", (key,))
        if st.st_size == offset and row is not None:
            return 0
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except OSError as exc:
            self.notes.add(f"{path.name}: cannot be read: {exc.strerror or exc}")
            return 0
        end = data.rfind(b"\n") + 1  # complete lines only: a writer may be mid-line
        added = 0
        rows: list[tuple[str, str, float, str, str, str]] = []
        for _, record in parse_lines(data[:end], path, lines + 1, self.notes):
            rows.extend(self._docs(record, key))
            added += 1
        db.executemany("INSERT INTO docs(text, session, t, kind, tool, file) "
                       "VALUES (?, ?, ?, ?, ?, ?)", rows)
        db.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)",
                   (key, st.st_ino, offset + end, lines + data[:end].count(b"\n")))
        return added

    def _docs(self, r: dict[str, Any], key: str) -> list[tuple[str, str, float, str, str, str]]:
        sid = r["session_id"]
        t = float(r["t"]) if isinstance(r.get("t"), (int, float)) else 0.0
        event = r.get("event")
        out: list[tuple[str, str, float, str, str, str]] = []

        def doc(text: object, kind: str, tool: str = "") -> None:
            if isinstance(text, str) and text.strip():
                out.append((text, sid, t, kind, tool, key))

        if event == "command":
            doc(r.get("command"), "command")
        elif event == "prose":
            doc(r.get("text"), "prose")
        elif event == "error":
            doc(r.get("error"), "error")
        elif event in ("session_created", "model_changed", "model_call"):
            config = r.get("model_config")
            model = config.get("model") if isinstance(config, dict) else r.get("model")
            if isinstance(model, str) and model:
                self.db.execute("INSERT OR IGNORE INTO models VALUES (?, ?)", (sid, model))
        elif event == "message" and isinstance(r.get("message"), dict):
            m = r["message"]
            role = m.get("role")
            if role == "assistant":
                doc(m.get("content"), "answer")
                for call in m.get("tool_calls") or []:
                    if not isinstance(call, dict):
                        continue
                    name = call_name(call)
                    self.db.execute("INSERT OR REPLACE INTO calls VALUES (?, ?)",
                                    (str(call.get("id")), name))
                    args = call_args(call)
                    doc(f"{name} {args if isinstance(args, str) else json.dumps(args)}",
                        "tool_call", name)
            elif role == "tool":
                row = self.db.execute("SELECT name FROM calls WHERE id = ?",
                                      (str(m.get("tool_call_id")),)).fetchone()
                doc(m.get("content"), "tool_result", row[0] if row else "")
            elif role == "user":
                doc(m.get("content"), "request")
        elif r.get("cut"):
            doc(r.get("head"), "cut")
        return out

    # -- searching --------------------------------------------------------------------
    def search(self, text: str, *, tool: str | None = None, model: str | None = None,
               since: float | None = None, until: float | None = None,
               limit: int = 20) -> list[Hit]:
        """Records matching every word of ``text`` (newest first), filtered."""
        words = text.split()
        if not words:
            raise LogsError("-q needs some text to search for")
        query = " ".join('"' + w.replace('"', '""') + '"' for w in words)
        where = "docs MATCH ?"
        params: list[Any] = [query]
        if tool:
            where += " AND tool = ?"
            params.append(tool)
        if model:
            where += " AND session IN (SELECT session FROM models WHERE model = ?)"
            params.append(model)
        if since is not None:
            where += " AND t >= ?"
            params.append(since)
        if until is not None:
            where += " AND t <= ?"
            params.append(until)
        try:
            # the newest matches first, then snippets for those only (a snippet costs)
            ids = [r[0] for r in self.db.execute(
                f"SELECT rowid FROM docs WHERE {where} ORDER BY t DESC LIMIT ?",
                [*params, limit])]
            marks = ",".join("?" * len(ids))
            rows = self.db.execute(
                "SELECT session, t, kind, tool, snippet(docs, 0, '[', ']', '…', 12), file "
                "FROM docs "
                f"WHERE docs MATCH ? AND rowid IN ({marks}) ORDER BY t DESC",
                [query, *ids]).fetchall() if ids else []
        except sqlite3.Error as exc:
            raise LogsError(f"search failed: {exc}") from None
        return [Hit(r[0], float(r[1]), r[2], r[3], " ".join(r[4].split()), r[5]) for r in rows]


def search(workspace: Path, text: str, notes: Notes | None = None,
           **filters: Any) -> list[Hit]:
    """Bring the index of ``workspace`` up to date, then search it (see :meth:`Index.search`)."""
    index = Index(workspace, notes)
    try:
        index.refresh()
        return index.search(text, **filters)
    finally:
        index.close()


def forget(workspace: Path) -> None:
    """Delete the index (it is rebuilt from the journal on the next search)."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(str(index_path(workspace)) + suffix)
