"""ActivityStreams activities for ``external`` skills, and their delivery.

An ``external`` typed skill ends in one side effect: an ActivityStreams 2.0 activity is
built (:func:`build_activity`) and dispatched (:meth:`Outbox.deliver`): recorded in
``.lily/outbox.sqlite`` by id before the first attempt, then stored locally or POSTed to
the configured outbox with the same bytes and ``Idempotency-Key`` on every attempt, never
twice once delivered. Standard library only. The manual (activity shapes, retries, dedup
guarantees and their limit, secrets): docs/typed-skills.md#activities-and-delivery.
"""
from __future__ import annotations

import datetime
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Sequence
from typing import Any

from lily_kernel.errors import DispatchError

__all__ = [
    "AS_CONTEXT",
    "AS_PUBLIC",
    "CONTENT_TYPE",
    "MAX_RETRY_AFTER",
    "SUPPORTED_TYPES",
    "build_activity",
    "new_activity_id",
]

AS_CONTEXT = "https://www.w3.org/ns/activitystreams"
AS_PUBLIC = "https://www.w3.org/ns/activitystreams#Public"
CONTENT_TYPE = "application/activity+json"
SUPPORTED_TYPES = ("Create", "Follow", "Like", "Announce", "Undo", "Update", "Delete",
                   "Add", "Remove", "Block", "Accept", "Reject")
#: Longest ``Retry-After`` (seconds) a single deliver() call will wait for.
MAX_RETRY_AFTER = 5.0


def one_line(text: str, limit: int = 200) -> str:
    """``text`` on one line (runs of whitespace made one space), cut to ``limit`` with "…"."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- building

def now_iso() -> str:
    """Now, in UTC, as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_activity_id(base: str | None = None) -> str:
    """A fresh, unique activity id: ``{base}/activities/{uuid4}``, else ``urn:uuid:{uuid4}``."""
    u = uuid.uuid4()
    if base:
        return f"{base.rstrip('/')}/activities/{u}"
    return f"urn:uuid:{u}"


def _check_https_uri(value: Any, field: str, *, allow_public: bool = False) -> str:
    if not isinstance(value, str) or not value:
        raise DispatchError(f"{field} must be an absolute https URI, got {value!r}")
    if allow_public and value == AS_PUBLIC:
        return value
    bad = next((c for c in value if c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F), None)
    if bad is not None:
        raise DispatchError(f"{field} must be an absolute https URI without spaces, got {value!r}")
    try:
        parts = urllib.parse.urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise DispatchError(f"{field} is not a valid URI: {value!r}") from None
    if parts.scheme != "https" or not host:
        raise DispatchError(f"{field} must be an absolute https URI (https://host/...), got {value!r}")
    if parts.username is not None or parts.password is not None:
        raise DispatchError(f"{field} must not contain user info, got {value!r}")
    if parts.path and not parts.path.startswith("/"):
        raise DispatchError(f"{field} must be an absolute https URI, got {value!r}")
    return value


def _check_published(value: Any) -> str:
    if not isinstance(value, str):
        raise DispatchError(f"published must be an ISO 8601 UTC timestamp, got {value!r}")
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise DispatchError(f"published must be an ISO 8601 UTC timestamp, got {value!r}") from None
    if parsed.tzinfo is None:
        raise DispatchError(f"published must carry a time zone (e.g. ...Z), got {value!r}")
    return value


def check_activity_id(value: Any) -> str:
    """``value`` if it is a usable activity id (an ``https`` or ``urn`` URI without spaces),
    else :class:`DispatchError`."""
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        raise DispatchError(f"activity id must be a non-empty URI without spaces, got {value!r}")
    scheme = urllib.parse.urlsplit(value).scheme
    if scheme not in ("https", "urn"):
        raise DispatchError(f"activity id must be an https URI or a urn:uuid, got {value!r}")
    if scheme == "https":
        _check_https_uri(value, "activity id")
    return value


def _object_id_for(activity_id: str) -> str:
    if activity_id.startswith("urn:"):
        return f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, activity_id + '#object')}"
    return f"{activity_id}/object"


def build_activity(activity_type: str, *, actor: str, to: Sequence[str],
                   object: dict[str, Any] | str | None = None,
                   content: str | None = None, summary: str | None = None,
                   activity_id: str | None = None, published: str | None = None) -> dict[str, Any]:
    """Build a well-formed ActivityStreams 2.0 activity; raise :class:`DispatchError` naming a bad field."""
    if activity_type not in SUPPORTED_TYPES:
        raise DispatchError(f"type {activity_type!r} is not supported; use one of: "
                            + ", ".join(SUPPORTED_TYPES))
    _check_https_uri(actor, "actor")
    if isinstance(to, str) or not isinstance(to, (list, tuple)):  # bytes: not a list either
        raise DispatchError(f"to must be a list of https URIs, got {to!r}")
    recipients = [_check_https_uri(r, f"to[{i}]", allow_public=True) for i, r in enumerate(to)]
    if content is not None and not isinstance(content, str):
        raise DispatchError(f"content must be a string, got {type(content).__name__}")
    if summary is not None and not isinstance(summary, str):
        raise DispatchError(f"summary must be a string, got {type(summary).__name__}")
    published = now_iso() if published is None else _check_published(published)
    activity_id = new_activity_id(actor) if activity_id is None else check_activity_id(activity_id)

    if object is None:
        if activity_type != "Create" or content is None:
            need = "object (or content)" if activity_type == "Create" else "object"
            raise DispatchError(f"{activity_type} needs {need}")
        obj: dict[str, Any] | str
        note: dict[str, Any] = {"type": "Note", "id": _object_id_for(activity_id),
                                "attributedTo": actor, "to": list(recipients), "content": content,
                                "published": published}
        if summary is not None:
            note["summary"] = summary
            summary = None
        content = None
        obj = note
    elif isinstance(object, str):
        obj = _check_https_uri(object, "object")
    elif isinstance(object, dict):
        if not isinstance(object.get("type"), str) or not object["type"]:
            raise DispatchError("object must have a 'type' (e.g. 'Note')")
        try:
            obj = json.loads(json.dumps(object))  # a private, JSON-clean copy
        except (TypeError, ValueError) as exc:
            raise DispatchError(f"object is not JSON-serialisable: {exc}") from None
    else:
        raise DispatchError(f"object must be a URI string or a dict, got {type(object).__name__}")
    if activity_type == "Create" and content is not None:
        raise DispatchError("Create takes either object or content, not both")

    activity: dict[str, Any] = {"@context": AS_CONTEXT, "id": activity_id, "type": activity_type,
                      "actor": actor, "to": recipients, "published": published}
    if summary is not None:
        activity["summary"] = summary
    if content is not None:
        activity["content"] = content
    activity["object"] = obj
    return activity
