"""Config Registry: persistent dotted-path settings, changed only within a skill's Config ACL.

The write layer for ``internal`` typed skills: a scope built from the skill's *declared*
ACL refuses any path outside it (:class:`AclError`), whatever the model asks; writes are
checked first, then made in one transaction with an append-only audit row per change.
One SQLite file per workspace (``.lily/config.sqlite``, WAL, ``synchronous=FULL``). The
rules, storage and limits: docs/typed-skills.md#config-registry.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lily_kernel.errors import AclError, ConfigError

__all__ = [
    "PATH_RE",
    "AclError",
    "AuditEntry",
    "ConfigError",
    "ConfigRegistry",
    "ScopedConfig",
    "covers",
]

PATH_RE = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)*")
"""A dotted config path; use with ``fullmatch`` (``$`` would let a trailing newline in)."""

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 10_000  # how long a writer waits for another process's transaction

_PRIMITIVES = (str, int, float, bool, type(None))

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS settings (
        path  TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL                 -- JSON text of a primitive
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS audit (
        id    INTEGER PRIMARY KEY AUTOINCREMENT,
        t     REAL NOT NULL,                -- time.time() of the transaction
        skill TEXT NOT NULL,
        path  TEXT NOT NULL,
        old   TEXT,                         -- JSON text; SQL NULL: the path had no value
        new   TEXT NOT NULL                 -- JSON text
    )""",
    "CREATE INDEX IF NOT EXISTS audit_path ON audit(path, id)",
    """CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
        BEGIN SELECT RAISE(ABORT, 'the config audit trail is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
        BEGIN SELECT RAISE(ABORT, 'the config audit trail is append-only'); END""",
)


def covers(prefix: str, path: str) -> bool:
    """True if ``prefix`` is ``path`` or a whole-segment prefix of it.

    ``covers('messaging.rcs', 'messaging.rcs.read_receipts')`` is True,
    ``covers('messaging.rcs', 'messaging.rcs_evil')`` is False. The empty prefix covers
    every path; it is used by :meth:`ConfigRegistry.items` and never accepted in an ACL.
    """
    if prefix == "":
        return True
    return path == prefix or path.startswith(prefix + ".")


def _check_path(path: Any, what: str = "config path") -> str:
    if not isinstance(path, str) or not PATH_RE.fullmatch(path):
        raise ConfigError(
            f"invalid {what} {path!r}: expected dotted segments of [a-z0-9_]+, "
            "e.g. 'messaging.rcs.read_receipts'"
        )
    return path


def _check_prefix(prefix: Any) -> str:
    return "" if prefix == "" else _check_path(prefix, "config path prefix")


def _encode(path: str, value: Any) -> str:
    # type() rather than isinstance(): an Enum, a numpy scalar or a str subclass would
    # round-trip as something else.
    if type(value) not in _PRIMITIVES:
        raise ConfigError(
            f"invalid value for {path!r}: {type(value).__name__} {value!r:.80}; "
            "config values are JSON primitives (str, int, float, bool, None)"
        )
    if type(value) is float and not math.isfinite(value):
        raise ConfigError(f"invalid value for {path!r}: {value!r} is not a finite number")
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _decode(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _under(prefix: str) -> tuple[str, tuple[str, ...]]:
    """SQL condition and parameters for "path is covered by prefix".

    Valid paths only hold ``[a-z0-9_.]``, so every path strictly under ``p`` sorts in
    ``['p.', 'p/')`` (``/`` is the byte after ``.``). LIKE is avoided: ``_`` is its wildcard.
    """
    if prefix == "":
        return "1", ()
    return "(path = ? OR (path > ? AND path < ?))", (prefix, prefix + ".", prefix + "/")


@dataclass(frozen=True)
class AuditEntry:
    """One changed path in one transaction. ``old`` is None when the path had no value."""

    id: int
    t: float
    skill: str
    path: str
    old: Any
    new: Any


class ConfigRegistry:
    """The settings of one workspace, in one SQLite file."""

    def __init__(self, path: str | os.PathLike[str], shared: bool = False) -> None:
        """``shared``: the workspace is on a volume other hosts write too (NFS, a shared
        Kubernetes volume): a rollback journal instead of WAL, whose shared memory works
        only among the processes of one host (docs/deploy.md#shared-workspace)."""
        self.path = Path(path)
        self.shared = shared
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None

    @classmethod
    def for_workspace(cls, workspace: str | os.PathLike[str],
                      shared: bool = False) -> ConfigRegistry:
        """The registry of ``workspace`` (``.lily/config.sqlite``)."""
        return cls(Path(workspace) / ".lily" / "config.sqlite", shared=shared)

    def __repr__(self) -> str:
        return f"ConfigRegistry({str(self.path)!r})"

    def __enter__(self) -> ConfigRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connection -------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        """The open connection (caller holds ``self._lock``); opens it on first use."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # Never reuse a connection inherited through fork(): SQLite forbids it. It is
        # dropped, not closed, so the parent's locks and WAL are left alone.
        self._conn = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(self.path),
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,  # autocommit; write() issues BEGIN IMMEDIATE itself
            check_same_thread=False,  # every use goes through self._lock instead
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute(f"PRAGMA journal_mode = {'DELETE' if self.shared else 'WAL'}")
            # FULL: in WAL mode, NORMAL already survives a killed process, but a power cut
            # could lose the last commits; settings change rarely, so a sync per commit is
            # cheap and a confirmed change is then never silently undone.
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise ConfigError(
                        f"{self.path} has config schema version {version}; "
                        f"this Lily understands up to {SCHEMA_VERSION}"
                    )
                if version < SCHEMA_VERSION:
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except BaseException:
            conn.close()
            raise
        self._conn, self._pid = conn, os.getpid()
        return conn

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """SQLite failures as one ConfigError naming the file; a damaged file is left as it
        is, never recreated over (docs/limits-and-secrets.md#bad-input)."""
        try:
            yield
        except sqlite3.OperationalError as exc:  # busy, locked, read-only, no space
            raise ConfigError(f"the Config Registry {self.path} cannot be used: {exc}") from None
        except sqlite3.DatabaseError as exc:  # not a database, malformed image
            self.close()
            raise ConfigError(
                f"the Config Registry {self.path} is damaged ({exc}); Lily changed nothing. "
                "Move the file aside (e.g. rename it to config.sqlite.damaged) to start an "
                "empty registry, or restore it from a backup") from None

    def close(self) -> None:
        """Close the connection; the next use opens it again."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                conn.close()

    # -- unscoped reads (owner / inspection) -------------------------------------------

    def get(self, path: str, default: Any = None) -> Any:
        """The value at ``path``, or ``default`` if it has none. Unscoped: owner only."""
        _check_path(path)
        with self._lock, self._guard():
            row = self._connection().execute(
                "SELECT value FROM settings WHERE path = ?", (path,)
            ).fetchone()
        return default if row is None else _decode(row[0])

    def items(self, prefix: str = "") -> dict[str, Any]:
        """Every stored path covered by ``prefix`` (whole segments) and its value, sorted."""
        where, params = _under(_check_prefix(prefix))
        with self._lock, self._guard():
            rows = self._connection().execute(
                f"SELECT path, value FROM settings WHERE {where} ORDER BY path", params
            ).fetchall()
        return {path: _decode(value) for path, value in rows}

    def audit(self, prefix: str = "") -> list[AuditEntry]:
        """Audit entries for paths covered by ``prefix``, oldest first."""
        where, params = _under(_check_prefix(prefix))
        with self._lock, self._guard():
            rows = self._connection().execute(
                f"SELECT id, t, skill, path, old, new FROM audit WHERE {where} ORDER BY id",
                params,
            ).fetchall()
        return [AuditEntry(i, t, s, p, _decode(o), _decode(n)) for i, t, s, p, o, n in rows]

    # -- scoped access ----------------------------------------------------------------

    def scoped(self, skill: str, read: Iterable[str] = (), write: Iterable[str] = ()) -> ScopedConfig:
        """A view for ``skill`` limited to its declared Config ACL."""
        return ScopedConfig(self, skill, read, write)

    def _write(self, skill: str, encoded: list[tuple[str, str]]) -> list[AuditEntry]:
        """Store already-checked changes in one transaction; audit the ones that change."""
        entries: list[AuditEntry] = []
        with self._lock, self._guard():
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                now = time.time()
                for path, new in encoded:
                    row = conn.execute("SELECT value FROM settings WHERE path = ?", (path,)).fetchone()
                    old = None if row is None else row[0]
                    if old == new:
                        continue
                    conn.execute(
                        "INSERT INTO settings(path, value) VALUES (?, ?) "
                        "ON CONFLICT(path) DO UPDATE SET value = excluded.value",
                        (path, new),
                    )
                    cur = conn.execute(
                        "INSERT INTO audit(t, skill, path, old, new) VALUES (?, ?, ?, ?, ?)",
                        (now, skill, path, old, new),
                    )
                    entries.append(AuditEntry(cur.lastrowid or 0, now, skill, path, _decode(old), _decode(new)))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return entries


def _acl(entries: Iterable[str] | str, which: str, skill: str) -> tuple[str, ...]:
    # A lone string is one path, not an iterable of one-letter paths ('a' would cover 'a.x').
    items = (entries,) if isinstance(entries, str) else tuple(entries)
    out: list[str] = []
    for entry in items:
        _check_path(entry, f"{which} ACL entry of skill {skill!r}:")
        if entry not in out:
            out.append(entry)
    return tuple(out)


class ScopedConfig:
    """The Config Registry as one skill sees it: only the paths its ACL grants."""

    __slots__ = ("_read", "_registry", "_skill", "_write")

    def __init__(self, registry: ConfigRegistry, skill: str,
                 read: Iterable[str] | str = (), write: Iterable[str] | str = ()) -> None:
        if not isinstance(skill, str) or not skill.strip():  # type: ignore[redundant-expr]  # untrusted
            raise ConfigError(f"invalid skill name {skill!r}")
        self._registry = registry
        self._skill = skill
        self._read = _acl(read, "read", skill)
        self._write = _acl(write, "write", skill)

    skill = property(lambda self: self._skill)
    read_acl = property(lambda self: self._read, doc="Paths granted for reading only.")
    write_acl = property(lambda self: self._write, doc="Paths granted for writing (and reading).")

    def __repr__(self) -> str:
        return f"ScopedConfig(skill={self._skill!r}, read={list(self._read)}, write={list(self._write)})"

    def can_read(self, path: str) -> bool:
        """Whether the skill may read ``path``."""
        return any(covers(p, path) for p in self._read + self._write)

    def can_write(self, path: str) -> bool:
        """Whether the skill may write ``path``."""
        return any(covers(p, path) for p in self._write)

    def _acl_text(self) -> str:
        return f"read ACL {list(self._read)}, write ACL {list(self._write)}"

    def read(self, path: str, default: Any = None) -> Any:
        """The value at ``path`` (``default`` if none); AclError if the ACL does not grant it."""
        _check_path(path)
        if not self.can_read(path):
            raise AclError(f"skill {self._skill!r} may not read {path!r} ({self._acl_text()})")
        return self._registry.get(path, default)

    def read_all(self) -> dict[str, Any]:
        """Every stored path this skill may read, sorted by path."""
        return {p: v for p, v in self._registry.items().items() if self.can_read(p)}

    def write(self, changes: Mapping[str, Any]) -> list[AuditEntry]:
        """Apply ``changes`` ({path: value}) all together or not at all.

        Every path and value is checked before anything is written: a bad one raises
        :class:`ConfigError`, paths outside the write ACL raise :class:`AclError` naming
        all of them. Then one transaction writes every change and returns the audit
        entries, one per path whose value actually changed.
        """
        if not isinstance(changes, Mapping):
            raise ConfigError(f"config changes must be a mapping of path to value, not {type(changes).__name__}")
        encoded = [(_check_path(path), _encode(path, value)) for path, value in changes.items()]
        refused = [path for path, _ in encoded if not self.can_write(path)]
        if refused:
            listed = ", ".join(repr(p) for p in refused)
            raise AclError(
                f"skill {self._skill!r} may not write {listed} "
                f"(write ACL {list(self._write)}); nothing was written"
            )
        if not encoded:
            return []
        return self._registry._write(self._skill, encoded)
