"""The HTTP side of delivering an activity: which outbox URLs and tokens may be used, one
POST to an ActivityPub outbox, and how its failure reads.

:func:`post_once` sends the recorded bytes once, never following a redirect, and returns
the 2xx status, or raises :class:`AttemptFailed` saying whether a retry may help, how long
the server asks to wait, and whether the server may have acted anyway. What is retried,
and how often, is :mod:`lily_kernel.typed.outbox`'s; the manual:
docs/typed-skills.md#activities-and-delivery. Every message passes the one redaction with
the token in hand (docs/limits-and-secrets.md#secrets).
"""
from __future__ import annotations

import contextlib
import email.utils
import http.client
import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from email.message import Message
from typing import IO, Any

from lily_kernel.redaction import redact
from lily_kernel.settings.urls import is_loopback, plain_http_reason
from lily_kernel.typed.activity import CONTENT_TYPE, DispatchError, one_line

__all__ = [
    "AttemptFailed",
    "check_token",
    "check_url",
    "is_loopback",
    "no_redirect_opener",
    "plain_http_reason",
    "post_headers",
    "post_once",
    "redacted",
]

_MAX_BODY = 64 * 1024  # most bytes of a server's answer read for a message
_USER_AGENT = "lily-kernel (ActivityPub C2S client)"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: it would turn the POST into a GET, or carry the token elsewhere."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: Message, newurl: str) -> None:
        """No redirect request: the POST fails with the redirect's status."""
        return None


class AttemptFailed(Exception):
    """One failed attempt. ``retryable``: another attempt may succeed; ``retry_after``: the
    server's wish, if any; ``uncertain``: the request was sent whole, so the server may have
    acted on it."""

    def __init__(self, reason: str, *, retryable: bool, http_status: int | None = None,
                 retry_after: float | None = None, uncertain: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.uncertain = uncertain
        self.http_status = http_status
        self.retry_after = retry_after


def redacted(text: str, token: str | None) -> str:
    """``text`` through the one redaction (docs/limits-and-secrets.md#secrets), the token in
    hand too."""
    return redact(text, also=(token,) if token else ())


def check_url(url: Any) -> str:
    """``url`` if it may be an outbox, else :class:`DispatchError` saying why (never echoing
    user info, which may be a password)."""
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


def check_token(token: Any) -> None:
    """Nothing if ``token`` is None or fits an HTTP header, else :class:`DispatchError`
    saying what is wrong with it (never what it is)."""
    if token is None:
        return
    if not isinstance(token, str) or not token:
        raise DispatchError("token must be a non-empty string")
    if not all(0x21 <= ord(c) <= 0x7E for c in token):
        # Never echo the token: say what is wrong with it, not what it is.
        raise DispatchError("token contains spaces, control or non-ASCII characters; "
                            "it cannot be sent in an HTTP header")


def post_headers(activity_id: str, token: str | None) -> dict[str, str]:
    """The headers of every attempt: the same ``Idempotency-Key`` (the activity's id) each time."""
    headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE,
               "Idempotency-Key": activity_id, "User-Agent": _USER_AGENT}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def no_redirect_opener() -> urllib.request.OpenerDirector:
    """A urllib opener that follows no redirect."""
    return urllib.request.build_opener(_NoRedirect())


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
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


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
    return one_line(text, 200)


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


def post_once(opener: urllib.request.OpenerDirector, url: str, body: bytes,
              headers: dict[str, Any], timeout: float, token: str | None) -> tuple[int, str | None]:
    """One POST. Returns (status, Location) on 2xx; raises :class:`AttemptFailed` otherwise."""
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
        message = redacted(_server_message(raw), token)
        phrase = http.client.responses.get(code, "")
        reason = f"HTTP {code}{' ' + phrase if phrase else ''}{': ' + message if message else ''}"
        if 300 <= code < 400:
            where = exc.headers.get("Location") if exc.headers else None
            raise AttemptFailed(f"HTTP {code} redirect{' to ' + where if where else ''}; "
                                "configure the final outbox URL (redirects are not followed)",
                                retryable=False, http_status=code) from None
        if code == 429 or 500 <= code < 600:
            retry_after = _parse_retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            raise AttemptFailed(reason, retryable=True, http_status=code,
                                retry_after=retry_after) from None
        raise AttemptFailed(reason, retryable=False, http_status=code) from None
    except (urllib.error.URLError, ValueError) as exc:  # before or while sending
        reason, retryable = _describe_oserror(exc, timeout)
        raise AttemptFailed(redacted(reason, token), retryable=retryable) from None
    except (OSError, http.client.HTTPException) as exc:
        # urllib wraps failures of sending in URLError; this one came after the whole
        # request was sent (no answer in time, connection dropped): it may have been acted on
        reason, retryable = _describe_oserror(exc, timeout)
        raise AttemptFailed(redacted(reason, token), retryable=retryable, uncertain=True) from None
    with response:
        status = response.status
        location = response.headers.get("Location")
        with contextlib.suppress(Exception):  # the 2xx status is the answer; the body is courtesy
            response.read(_MAX_BODY)
    return status, location
