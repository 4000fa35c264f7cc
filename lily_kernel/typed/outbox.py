"""The outbox: delivering an activity exactly once, locally or to an ActivityPub outbox.

:meth:`Outbox.deliver` records the activity in ``.lily/outbox.sqlite`` by id before the
first attempt, then stores it (the local outbox) or POSTs it (ActivityPub client-to-server)
with the same bytes and ``Idempotency-Key`` on every attempt; an id already delivered is
never sent again. This module is the record and the retry policy; the HTTP side (which
URLs and tokens may be used, one POST, how its failure reads) is
:mod:`lily_kernel.typed.outbox_http`. The manual (retries, dedup guarantees and their
limit, secrets): docs/typed-skills.md#activities-and-delivery.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lily_kernel.errors import AttemptFailed, DispatchError
from lily_kernel.typed.activity import (
    MAX_RETRY_AFTER,
    check_activity_id,
    now_iso,
    one_line,
)
from lily_kernel.typed.outbox_http import (
    check_token,
    check_url,
    client,
    post_headers,
    post_once,
    redacted,
)

__all__ = ["LOCAL_TARGET", "Delivery", "Outbox"]


@dataclass(frozen=True)
class Delivery:
    """The outcome of one :meth:`Outbox.deliver` call.

    ``status`` is ``"stored"`` (local outbox), ``"delivered"`` (a 2xx answer) or
    ``"duplicate"`` (already stored/delivered earlier: nothing sent). ``attempts``
    counts the attempts made by *this* call (the store keeps the running total).
    """
    activity_id: str
    status: str
    target: str
    attempts: int
    http_status: int | None
    detail: str


LOCAL_TARGET = "local outbox"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS activities (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    activity     TEXT NOT NULL,
    status       TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    target       TEXT NOT NULL,
    created      TEXT NOT NULL,
    updated      TEXT NOT NULL,
    delivered_at TEXT,
    http_status  INTEGER,
    last_error   TEXT,
    lease_until  REAL
);
"""


class Outbox:
    """A SQLite record of every activity a skill dispatched, and the deliverer."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        with self._connect() as conn:
            conn.executescript(_SCHEMA)
        if new:
            with contextlib.suppress(OSError):
                os.chmod(self.path, 0o600)  # activities may be private messages

    @classmethod
    def for_workspace(cls, workspace: str | os.PathLike[str]) -> Outbox:
        """The workspace's outbox: ``<workspace>/.lily/outbox.sqlite``."""
        return cls(Path(workspace) / ".lily" / "outbox.sqlite")

    # -- store ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        conn.row_factory = sqlite3.Row
        try:
            yield conn
        finally:
            conn.close()

    def _update(self, activity_id: str, **fields: Any) -> None:
        fields["updated"] = now_iso()
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._connect() as conn:
            conn.execute(f"UPDATE activities SET {cols} WHERE id = ?", [*fields.values(), activity_id])

    @staticmethod
    def _row(row: sqlite3.Row) -> dict[str, Any]:
        return {"activity": json.loads(row["activity"]), "status": row["status"],
                "attempts": row["attempts"], "target": row["target"], "created": row["created"],
                "delivered_at": row["delivered_at"], "http_status": row["http_status"],
                "last_error": row["last_error"]}

    def get(self, activity_id: str) -> dict[str, Any] | None:
        """The record of one activity, or None.

        Keys: activity, status (stored | sending | delivered | failed), attempts (total),
        target, created, delivered_at, plus http_status and last_error.
        """
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM activities WHERE id = ?", (activity_id,)).fetchone()
        return None if row is None else self._row(row)

    def list(self) -> list[dict[str, Any]]:
        """Every record, oldest first."""
        with self._connect() as conn:
            rows = conn.execute("SELECT * FROM activities ORDER BY seq").fetchall()
        return [self._row(r) for r in rows]

    # -- delivery ---------------------------------------------------------------------

    def deliver(self, activity: dict[str, Any], *, url: str | None = None, token: str | None = None,
                timeout: float = 10.0, retries: int = 2, backoff: float = 0.2) -> Delivery:
        """Record ``activity`` and deliver it once: locally, or by POST to ``url``.

        Returns a :class:`Delivery`; raises :class:`DispatchError` (one line, no token)
        when the activity is malformed, the URL refused, the server rejects it, or the
        retries are spent (the record then says ``"failed"``; calling again retries).
        """
        if not isinstance(activity, dict):
            raise DispatchError(f"activity must be a dict, got {type(activity).__name__}")
        activity_id = check_activity_id(activity.get("id"))
        if not isinstance(activity.get("type"), str) or not activity["type"]:
            raise DispatchError("activity has no 'type'")
        try:
            body = json.dumps(activity, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            canonical = json.dumps(activity, sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise DispatchError(f"activity is not JSON-serialisable: {exc}") from None
        if url is not None:
            check_url(url)
            check_token(token)
        elif token is not None:
            check_token(token)
        if timeout <= 0 or retries < 0 or backoff < 0:
            raise DispatchError("timeout must be > 0, retries and backoff >= 0")
        target = LOCAL_TARGET if url is None else url

        # Longest this call may hold its claim: every attempt, wait and backoff, plus slack.
        budget = (retries + 1) * (timeout + MAX_RETRY_AFTER) + backoff * (2 ** (retries + 1)) + 30.0
        now = time.time()
        stamp = now_iso()
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT * FROM activities WHERE id = ?", (activity_id,)).fetchone()
                if row is not None:
                    if row["status"] in ("delivered", "stored"):
                        conn.execute("COMMIT")
                        when = row["delivered_at"] or row["created"]
                        note = "" if json.dumps(json.loads(row["activity"]), sort_keys=True,
                                                ensure_ascii=False) == canonical \
                            else " (the recorded activity differs from this one)"
                        return Delivery(activity_id, "duplicate", row["target"], 0, None,
                                        f"already {row['status']} ({row['target']}, {when}); "
                                        f"nothing sent{note}")
                    if row["status"] == "sending" and (row["lease_until"] or 0) > now:
                        raise DispatchError(f"activity {activity_id} is already being delivered "
                                            f"to {row['target']}; nothing sent")
                    if json.dumps(json.loads(row["activity"]), sort_keys=True,
                                  ensure_ascii=False) != canonical:
                        raise DispatchError(f"activity {activity_id} was recorded earlier with a "
                                            "different body; give the new activity a new id")
                if url is None:
                    status, attempts, lease, delivered_at = "stored", 1, None, stamp
                else:
                    status, attempts, lease, delivered_at = "sending", 0, now + budget, None
                if row is None:
                    conn.execute(
                        "INSERT INTO activities (id, activity, status, attempts, target, created,"
                        " updated, delivered_at, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (activity_id, body.decode("utf-8"), status, attempts, target, stamp, stamp,
                         delivered_at, lease))
                else:
                    conn.execute(
                        "UPDATE activities SET status = ?, attempts = attempts + ?, target = ?,"
                        " updated = ?, delivered_at = ?, lease_until = ?, last_error = NULL"
                        " WHERE id = ?",
                        (status, attempts, target, stamp, delivered_at, lease, activity_id))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        if url is None:
            return Delivery(activity_id, "stored", LOCAL_TARGET, 1, None,
                            f"stored in the local outbox ({self.path})")
        # The body sent is the one recorded; on a retry of a failed record it is byte-identical.
        if row is not None:
            body = row["activity"].encode("utf-8")
        try:
            return self._post(activity_id, body, url, target, token, timeout, retries, backoff)
        except DispatchError:
            raise
        except BaseException as exc:  # interrupted mid-delivery: free the claim, keep the count
            reason = redacted(one_line(f"interrupted: {type(exc).__name__}: {exc}"), token)
            with contextlib.suppress(Exception):
                self._update(activity_id, status="failed", lease_until=None, last_error=reason)
            raise

    def _post(self, activity_id: str, body: bytes, url: str, target: str, token: str | None,
              timeout: float, retries: int, backoff: float) -> Delivery:
        headers = post_headers(activity_id, token)
        total = retries + 1
        last: AttemptFailed | None = None
        maybe = False  # an attempt sent the whole request and got no answer
        with client(timeout) as http:
            for n in range(1, total + 1):
                with self._connect() as conn:
                    conn.execute("UPDATE activities SET attempts = attempts + 1, updated = ? WHERE id = ?",
                                 (now_iso(), activity_id))
                try:
                    status, location = post_once(http, url, body, headers, timeout, token)
                except AttemptFailed as failure:
                    last = failure
                    maybe = maybe or failure.uncertain
                    self._update(activity_id, http_status=failure.http_status,
                                 last_error=redacted(failure.reason, token))
                    if not failure.retryable:
                        self._update(activity_id, status="failed", lease_until=None)
                        raise DispatchError(redacted(f"{target} refused activity {activity_id}: "
                                                    f"{failure.reason}", token), maybe) from None
                    if n == total:
                        break
                    delay = backoff * (2 ** (n - 1))
                    if failure.retry_after is not None:
                        if failure.retry_after > MAX_RETRY_AFTER:
                            self._update(activity_id, status="failed", lease_until=None)
                            raise DispatchError(redacted(
                                f"could not deliver {activity_id} to {target} after {n} attempt"
                                f"{'s' if n != 1 else ''}: {failure.reason}; the server asks to retry "
                                f"after {failure.retry_after:.0f} s, try again later", token),
                                maybe) from None
                        delay = max(delay, failure.retry_after)
                    time.sleep(delay)
                    continue
                self._update(activity_id, status="delivered", delivered_at=now_iso(),
                             http_status=status, last_error=None, lease_until=None)
                detail = f"delivered to {target} (HTTP {status}) after {n} attempt{'s' if n != 1 else ''}"
                if location:
                    detail += f"; server copy at {location}"
                return Delivery(activity_id, "delivered", target, n, status, redacted(detail, token))
        self._update(activity_id, status="failed", lease_until=None)
        reason = last.reason if last else "unknown error"
        raise DispatchError(redacted(f"could not deliver {activity_id} to {target} after {total} "
                                    f"attempt{'s' if total != 1 else ''}: {reason}", token), maybe)
