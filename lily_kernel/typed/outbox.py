"""The outbox: delivering an activity exactly once, locally or to an ActivityPub outbox.

:meth:`Outbox.deliver` records the activity in ``.lily/outbox.sqlite`` by id before the
first attempt, then stores it (the local outbox) or POSTs it (ActivityPub client-to-server)
with the same bytes and ``Idempotency-Key`` on every attempt; an id already delivered is
never sent again. The manual (retries, dedup guarantees and their limit, secrets):
docs/typed-skills.md#activities-and-delivery.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import email.utils
import http.client
import json
import os
import re
import sqlite3
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import IO, Any

from lily_kernel.redaction import redact
from lily_kernel.typed.activity import (
    CONTENT_TYPE,
    MAX_RETRY_AFTER,
    DispatchError,
    _check_activity_id,
    _now_iso,
    _one_line,
)

__all__ = ["LOCAL_TARGET", "Delivery", "Outbox"]

_MAX_BODY = 64 * 1024
_USER_AGENT = "lily-kernel (ActivityPub C2S client)"


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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: it would turn the POST into a GET, or carry the token elsewhere."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: Message, newurl: str) -> None:
        """No redirect request: the POST fails with the redirect's status."""
        return None


class _Attempt(Exception):
    """Internal: one failed attempt. ``retry_after`` is the server's wish, if any."""

    def __init__(self, reason: str, *, retryable: bool, http_status: int | None = None,
                 retry_after: float | None = None, uncertain: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.uncertain = uncertain  # the request was sent whole; the server may have acted
        self.http_status = http_status
        self.retry_after = retry_after


def _redact(text: str, token: str | None) -> str:
    """Through the one redaction (docs/limits-and-secrets.md#secrets), the token in hand too."""
    return redact(text, also=(token,) if token else ())


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    import ipaddress
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def plain_http_reason(url: str) -> str | None:
    """Why ``url`` may not be an outbox (the token would cross the network in clear text), or
    None: an outbox is ``https`` unless it is on this machine (docs/trust-boundary.md#workspace-trust)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return None  # _check_url says what is wrong with it
    if parts.scheme == "http" and not is_loopback(host):
        return (f"outbox URL must use https unless it is on this machine (localhost, "
                f"127.0.0.1, ::1), not http://{host}")
    return None


def _check_url(url: Any) -> str:
    if not isinstance(url, str) or not url:
        raise DispatchError(f"outbox URL must be an http(s) URL, got {url!r}")
    if any(c.isspace() or ord(c) < 0x20 for c in url):
        raise DispatchError("outbox URL must not contain spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018
    except ValueError:
        raise DispatchError("outbox URL is not a valid URL (bad host or port)") from None
    if parts.scheme not in ("http", "https"):
        raise DispatchError(f"outbox URL must use http or https, not {parts.scheme or 'no scheme'!r}")
    if not host:
        raise DispatchError("outbox URL has no host")
    reason = plain_http_reason(url)
    if reason:
        raise DispatchError(reason)
    if parts.username is not None or parts.password is not None:
        # Never echo it: the user info may be a password. Credentials go in `token`.
        raise DispatchError("outbox URL must not contain user info (user:password@); "
                            "pass the token separately")
    return url


def _check_token(token: Any) -> None:
    if token is None:
        return
    if not isinstance(token, str) or not token:
        raise DispatchError("token must be a non-empty string")
    if not all(0x21 <= ord(c) <= 0x7E for c in token):
        # Never echo the token: say what is wrong with it, not what it is.
        raise DispatchError("token contains spaces, control or non-ASCII characters; "
                            "it cannot be sent in an HTTP header")


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(int(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return max(0.0, (when - _dt.datetime.now(_dt.UTC)).total_seconds())


def _server_message(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("error_description", "error", "message", "detail"):
            if isinstance(data.get(key), str) and data[key].strip():
                text = data[key]
                break
    if "<" in text and ">" in text:  # an HTML error page: keep its text only
        text = re.sub(r"<[^>]*>", " ", text)
    return _one_line(text, 200)


def _describe_oserror(exc: BaseException, timeout: float) -> tuple[str, bool]:
    """(reason, retryable) for a transport-level failure."""
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        inner = exc.reason
        if isinstance(inner, BaseException):
            return _describe_oserror(inner, timeout)
        return f"connection failed: {inner}", True
    if isinstance(exc, TimeoutError):
        return f"timed out after {timeout:g} s", True
    if isinstance(exc, ssl.SSLError):
        return f"TLS error: {getattr(exc, 'reason', None) or exc}", False
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused", True
    if isinstance(exc, http.client.RemoteDisconnected):
        return "server closed the connection without answering", True
    if isinstance(exc, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        return "connection reset", True
    if isinstance(exc, http.client.HTTPException):
        return f"bad HTTP answer: {type(exc).__name__}", True
    if isinstance(exc, OSError):
        return f"network error: {exc.strerror or exc}", True
    return f"{type(exc).__name__}: {exc}", False


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
        fields["updated"] = _now_iso()
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
        activity_id = _check_activity_id(activity.get("id"))
        if not isinstance(activity.get("type"), str) or not activity["type"]:
            raise DispatchError("activity has no 'type'")
        try:
            body = json.dumps(activity, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            canonical = json.dumps(activity, sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise DispatchError(f"activity is not JSON-serialisable: {exc}") from None
        if url is not None:
            _check_url(url)
            _check_token(token)
        elif token is not None:
            _check_token(token)
        if timeout <= 0 or retries < 0 or backoff < 0:
            raise DispatchError("timeout must be > 0, retries and backoff >= 0")
        target = LOCAL_TARGET if url is None else url

        # Longest this call may hold its claim: every attempt, wait and backoff, plus slack.
        budget = (retries + 1) * (timeout + MAX_RETRY_AFTER) + backoff * (2 ** (retries + 1)) + 30.0
        now = time.time()
        stamp = _now_iso()
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
            reason = _redact(_one_line(f"interrupted: {type(exc).__name__}: {exc}"), token)
            with contextlib.suppress(Exception):
                self._update(activity_id, status="failed", lease_until=None, last_error=reason)
            raise

    def _post(self, activity_id: str, body: bytes, url: str, target: str, token: str | None,
              timeout: float, retries: int, backoff: float) -> Delivery:
        headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE,
                   "Idempotency-Key": activity_id, "User-Agent": _USER_AGENT}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        opener = urllib.request.build_opener(_NoRedirect())
        total = retries + 1
        last: _Attempt | None = None
        maybe = False  # an attempt sent the whole request and got no answer
        for n in range(1, total + 1):
            with self._connect() as conn:
                conn.execute("UPDATE activities SET attempts = attempts + 1, updated = ? WHERE id = ?",
                             (_now_iso(), activity_id))
            try:
                status, location = self._attempt(opener, url, body, headers, timeout, token)
            except _Attempt as failure:
                last = failure
                maybe = maybe or failure.uncertain
                self._update(activity_id, http_status=failure.http_status,
                             last_error=_redact(failure.reason, token))
                if not failure.retryable:
                    self._update(activity_id, status="failed", lease_until=None)
                    raise DispatchError(_redact(f"{target} refused activity {activity_id}: "
                                                f"{failure.reason}", token), maybe) from None
                if n == total:
                    break
                delay = backoff * (2 ** (n - 1))
                if failure.retry_after is not None:
                    if failure.retry_after > MAX_RETRY_AFTER:
                        self._update(activity_id, status="failed", lease_until=None)
                        raise DispatchError(_redact(
                            f"could not deliver {activity_id} to {target} after {n} attempt"
                            f"{'s' if n != 1 else ''}: {failure.reason}; the server asks to retry "
                            f"after {failure.retry_after:.0f} s, try again later", token),
                            maybe) from None
                    delay = max(delay, failure.retry_after)
                time.sleep(delay)
                continue
            self._update(activity_id, status="delivered", delivered_at=_now_iso(),
                         http_status=status, last_error=None, lease_until=None)
            detail = f"delivered to {target} (HTTP {status}) after {n} attempt{'s' if n != 1 else ''}"
            if location:
                detail += f"; server copy at {location}"
            return Delivery(activity_id, "delivered", target, n, status, _redact(detail, token))
        self._update(activity_id, status="failed", lease_until=None)
        reason = last.reason if last else "unknown error"
        raise DispatchError(_redact(f"could not deliver {activity_id} to {target} after {total} "
                                    f"attempt{'s' if total != 1 else ''}: {reason}", token), maybe)

    @staticmethod
    def _attempt(opener: urllib.request.OpenerDirector, url: str, body: bytes,
                 headers: dict[str, Any], timeout: float, token: str | None) -> tuple[int, str | None]:
        """One POST. Returns (status, Location) on 2xx; raises :class:`_Attempt` otherwise."""
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            response = opener.open(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            code = exc.code
            try:
                raw = exc.read(_MAX_BODY)
            except Exception:
                raw = b""
            finally:
                exc.close()
            message = _redact(_server_message(raw), token)
            phrase = http.client.responses.get(code, "")
            reason = f"HTTP {code}{' ' + phrase if phrase else ''}{': ' + message if message else ''}"
            if 300 <= code < 400:
                where = exc.headers.get("Location") if exc.headers else None
                raise _Attempt(f"HTTP {code} redirect{' to ' + where if where else ''}; "
                               "configure the final outbox URL (redirects are not followed)",
                               retryable=False, http_status=code) from None
            if code == 429 or 500 <= code < 600:
                retry_after = _parse_retry_after(exc.headers.get("Retry-After") if exc.headers else None)
                raise _Attempt(reason, retryable=True, http_status=code,
                               retry_after=retry_after) from None
            raise _Attempt(reason, retryable=False, http_status=code) from None
        except (urllib.error.URLError, ValueError) as exc:  # before or while sending
            reason, retryable = _describe_oserror(exc, timeout)
            raise _Attempt(_redact(reason, token), retryable=retryable) from None
        except (OSError, http.client.HTTPException) as exc:
            # urllib wraps failures of sending in URLError; this one came after the whole
            # request was sent (no answer in time, connection dropped): it may have been acted on
            reason, retryable = _describe_oserror(exc, timeout)
            raise _Attempt(_redact(reason, token), retryable=retryable, uncertain=True) from None
        with response:
            status = response.status
            location = response.headers.get("Location")
            with contextlib.suppress(Exception):  # the 2xx status is the answer; the body is courtesy
                response.read(_MAX_BODY)
        return status, location
