"""The HTTP side of delivering an activity: which outbox URLs and tokens may be used, one
POST to an ActivityPub outbox (httpx2, Lily's one HTTP library: proxies from the environment
honoured, no redirect followed), and how its failure reads.

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
import http.client as http_client
import json
import re
import ssl
import urllib.parse
from datetime import UTC, datetime
from typing import Any

import httpx2

from lily_kernel.errors import AttemptFailed, DispatchError
from lily_kernel.redaction import redact
from lily_kernel.settings.urls import is_loopback, plain_http_reason
from lily_kernel.typed.activity import CONTENT_TYPE, one_line

__all__ = [
    "check_token",
    "check_url",
    "client",
    "is_loopback",
    "plain_http_reason",
    "post_headers",
    "post_once",
    "redacted",
]

_MAX_BODY = 64 * 1024  # most bytes of a server's answer read for a message
_USER_AGENT = "lily-kernel (ActivityPub C2S client)"


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


def _describe_transport(exc: httpx2.TransportError, timeout: float) -> tuple[str, bool, bool]:
    """(reason, retryable, uncertain) for a failure below HTTP: ``uncertain`` when the whole
    request may have reached the server (the failure came while waiting for its answer)."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, ssl.SSLError) or (isinstance(exc, httpx2.ConnectError) and "SSL" in str(exc)):
        return f"TLS error: {getattr(cause, 'reason', None) or exc}", False, False
    if isinstance(exc, httpx2.ConnectTimeout | httpx2.PoolTimeout):
        return f"timed out after {timeout:g} s", True, False
    if isinstance(exc, httpx2.ProxyError):
        return f"proxy refused the connection: {exc}", True, False
    if isinstance(exc, httpx2.ConnectError):
        text = str(exc).lower()
        return ("connection refused" if "refused" in text else f"connection failed: {exc}"), True, False
    if isinstance(exc, httpx2.WriteError | httpx2.WriteTimeout):
        return "connection reset while sending", True, False
    if isinstance(exc, httpx2.ReadTimeout):
        return f"timed out after {timeout:g} s", True, True
    if isinstance(exc, httpx2.RemoteProtocolError):
        return "server closed the connection without answering", True, True
    if isinstance(exc, httpx2.ReadError):
        return "connection reset", True, True
    if isinstance(exc, httpx2.UnsupportedProtocol):
        return f"unsupported URL: {exc}", False, False
    return f"network error: {type(exc).__name__}: {exc}", True, True


def client(timeout: float) -> httpx2.Client:
    """The HTTP client of one delivery: it follows no redirect (it would turn the POST into a
    GET, or carry the token elsewhere) and honours ``HTTP(S)_PROXY``/``ALL_PROXY``/``NO_PROXY``
    as httpx2 does by default."""
    return httpx2.Client(follow_redirects=False, timeout=timeout, trust_env=True)


def post_once(http: httpx2.Client, url: str, body: bytes,
              headers: dict[str, Any], timeout: float, token: str | None) -> tuple[int, str | None]:
    """One POST. Returns (status, Location) on 2xx; raises :class:`AttemptFailed` otherwise."""
    try:
        with http.stream("POST", url, content=body, headers=headers, timeout=timeout) as response:
            code = response.status_code
            location = response.headers.get("Location")
            raw = b""
            with contextlib.suppress(httpx2.HTTPError):  # the status is the answer; the body courtesy
                for chunk in response.iter_bytes():
                    raw += chunk
                    if len(raw) >= _MAX_BODY:
                        break
    except httpx2.TransportError as exc:
        reason, retryable, uncertain = _describe_transport(exc, timeout)
        raise AttemptFailed(redacted(reason, token), retryable=retryable,
                            uncertain=uncertain) from None
    except (httpx2.InvalidURL, ValueError) as exc:
        raise AttemptFailed(redacted(f"bad URL: {exc}", token), retryable=False) from None
    if 200 <= code < 300:
        return code, location
    message = redacted(_server_message(raw[:_MAX_BODY]), token)
    phrase = http_client.responses.get(code, "")
    reason = f"HTTP {code}{' ' + phrase if phrase else ''}{': ' + message if message else ''}"
    if 300 <= code < 400:
        raise AttemptFailed(f"HTTP {code} redirect{' to ' + location if location else ''}; "
                            "configure the final outbox URL (redirects are not followed)",
                            retryable=False, http_status=code)
    if code == 429 or 500 <= code < 600:
        raise AttemptFailed(reason, retryable=True, http_status=code,
                            retry_after=_parse_retry_after(response.headers.get("Retry-After")))
    raise AttemptFailed(reason, retryable=False, http_status=code)
