"""Image outputs for a model that sees images (``[model] vision = true``, issue 34 §1).

A face offers the PNG/JPEG outputs of ``run_python`` and of the cells ``read_cells``
returns (:func:`offer`); after a step's tool results, the loop takes them (:func:`take`)
and, for a model with vision, adds one user message of image parts right after the tool
results (tool messages are text only in the OpenAI chat format). The message holds each
image by its SHA-256 (``lily-image:sha256:…``), so the conversation and the journal keep
the hash, never the bytes; the request carries the image itself (:func:`prepared`) while
this process still has it (the last :data:`KEPT`), else a line saying it is gone. Bounded:
at most :data:`MAX_IMAGES` per step, each at most :data:`MAX_BYTES`. An endpoint that
refuses image parts is asked again without them, and from then on
(agent/model_client.py). Docs: docs/agent.md#images.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

MIMES = ("image/png", "image/jpeg")
MAX_IMAGES = 4  # per step
MAX_BYTES = 1_500_000  # one image, decoded
KEPT = 32  # images this process keeps for the requests that still send them
SCHEME = "lily-image:sha256:"

_STORE: OrderedDict[str, str] = OrderedDict()  # sha256 -> data URL
_OFFERED: list[str] = []


def offer(mime: str, data: str | bytes) -> str | None:
    """Offer one image output (base64 text as Jupyter keeps it, or raw bytes); its hash,
    or None when it is not a PNG/JPEG or too large."""
    digest = keep(mime, data)
    if digest is not None:
        offer_kept((digest,))
    return digest


def keep(mime: str, data: str | bytes) -> str | None:
    """Keep one image output without offering it (a cell's plot, offered only when a tool
    or a mention returns that cell: :func:`offer_kept`); its hash, or None as for
    :func:`offer`."""
    if mime not in MIMES:
        return None
    try:
        raw = data if isinstance(data, bytes) else base64.b64decode(
            "".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw or len(raw) > MAX_BYTES:
        return None
    digest = hashlib.sha256(raw).hexdigest()
    _STORE[digest] = f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}"
    _STORE.move_to_end(digest)
    while len(_STORE) > KEPT:
        _STORE.popitem(last=False)
    return digest


def offer_kept(hashes: Iterable[str]) -> None:
    """Offer images kept earlier (:func:`keep`) that this process still has."""
    for digest in hashes:
        if digest in _STORE and digest not in _OFFERED:
            _OFFERED.append(digest)


def keep_bundle(bundle: Mapping[str, Any]) -> str | None:
    """Keep the image of a display's MIME bundle, if it has one; its hash."""
    for mime in MIMES:
        value = bundle.get(mime)
        if isinstance(value, str | bytes):
            return keep(mime, value)
    return None


def offer_bundle(bundle: Mapping[str, Any]) -> None:
    """Offer the image of a display's MIME bundle, if it has one."""
    digest = keep_bundle(bundle)
    if digest is not None:
        offer_kept((digest,))


def take() -> list[str]:
    """The hashes offered since the last call (at most :data:`MAX_IMAGES`); clears them."""
    taken = _OFFERED[:MAX_IMAGES]
    _OFFERED.clear()
    return taken


def message(hashes: list[str]) -> dict[str, Any]:
    """The user message that shows the model the images of the tool results before it."""
    n = len(hashes)
    text = (f"[The image output{'s' if n != 1 else ''} of the tool results above "
            f"({n}), as images.]")
    return {"role": "user", "content": [
        {"type": "text", "text": text},
        *({"type": "image_url", "image_url": {"url": SCHEME + h}} for h in hashes)]}


def with_images(text: str, hashes: list[str]) -> str | list[dict[str, Any]]:
    """A user request's content: its text, then the images its ``@`` mentions showed
    (tools/mentions.py), each by hash as in :func:`message`."""
    if not hashes:
        return text
    return [{"type": "text", "text": text},
            *({"type": "image_url", "image_url": {"url": SCHEME + h}} for h in hashes)]


def has_images(messages: list[dict[str, Any]]) -> bool:
    """Whether any message holds an image part. Asked before every model call, over the
    whole conversation: a plain loop, no generator per message (bench/README.md, issue 40)."""
    for m in messages:
        content = m.get("content")
        if content.__class__ is list and any(
                isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            return True
    return False


def prepared(messages: list[dict[str, Any]], send: bool) -> list[dict[str, Any]]:
    """The messages as sent: each image part's hash becomes its data URL when ``send``
    (and this process still has it); otherwise the parts go and the message is text."""
    if not has_images(messages):
        return messages
    out = []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            out.append(m)
            continue
        parts: list[Any] = []
        dropped = 0
        for part in content:
            url = part.get("image_url", {}).get("url", "") if isinstance(part, dict) else ""
            if not url.startswith(SCHEME):
                parts.append(part)
            elif send and url[len(SCHEME):] in _STORE:
                parts.append({"type": "image_url",
                              "image_url": {"url": _STORE[url[len(SCHEME):]]}})
            else:
                dropped += 1
        if any(p.get("type") == "image_url" for p in parts if isinstance(p, dict)):
            out.append({**m, "content": parts})
            continue
        text = " ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
        why = "not sent: this model does not take images" if not send else "no longer kept"
        out.append({**m, "content": f"{text} ({dropped} image{'s' if dropped != 1 else ''} "
                                    f"{why}; their text is in the results.)"})
    return out
