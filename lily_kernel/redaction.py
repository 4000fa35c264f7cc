"""Redaction: the one place that keeps secrets off the screen and off the disk.

Three kinds of secret are removed from any text Lily shows or records (errors, the journal,
``/model`` output, the kernel's input history): the ``user:password@`` part of every URL,
the credentials of an ``Authorization`` header or after ``Bearer``, and the live values
of the secret environment variables (``OPENAI_API_KEY``, ``LILY_OUTBOX_TOKEN``) and of the
values Lily expanded from ``${VAR}`` into an MCP server's configuration (:func:`add_secret`),
all replaced by ``***``; so is the value a cell gives a secret-looking variable with ``%env``,
``%set_env`` or ``os.environ[...] =`` (before that value is live). Every pass is linear in
the length of the text, whatever it holds. See docs/limits-and-secrets.md#secrets.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

SECRET_ENV = ("OPENAI_API_KEY", "LILY_OUTBOX_TOKEN")
#: Values shorter than this are not treated as secrets (a one-letter "key" would mask text).
MIN_SECRET_LEN = 8
MASK = "***"
# Values registered at run time (an MCP server's expanded ``${VAR}``s, docs/mcp.md#secrets).
_ADDED: set[str] = set()

# After "://", the authority's userinfo runs to its last "@" before a path, query, fragment,
# blank or quote. The match starts at a literal "://" and the class excludes "/", so the
# regions scanned for two matches never overlap: one linear pass (no scheme prefix like
# \w+:// that would be retried from every letter of a long word).
_USERINFO = re.compile(r"://([^/?#\s\"'<>\\]*)@")
# Credentials after an HTTP auth scheme (an endpoint echoing "Authorization: Basic ..." holds
# the base64 of a URL's user:password). Starts at a literal word, one pass.
# Only in an Authorization header, or after "Bearer": "Basic understanding" stays as it is.
_AUTH = re.compile(r"\b(Authorization\W{0,4}(?:Basic|Bearer|Token|Digest)\s+|Bearer\s+)"
                   r"[A-Za-z0-9+/=._~-]{8,}", re.IGNORECASE)


#: A variable name that looks like it holds a secret (API_KEY, GITHUB_TOKEN, db_password).
SECRET_NAME = re.compile(r"key|token|secret|passw|credential", re.IGNORECASE)
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
# A secret-looking variable set in a cell, masked before IPython stores the cell (In, _ih,
# history.sqlite): `%env NAME=value`, `%set_env NAME value`, their transformed form
# `run_line_magic('env', 'NAME=value')`, `os.environ['NAME'] = value`,
# `os.environ.setdefault('NAME', value)` and `os.putenv('NAME', value)` (quotes may be
# JSON-escaped: the same code inside a tool call's arguments). Only the value is masked,
# never the rest of the line (docs/permissions.md#cards): a magic's value runs to the end of
# its line (a real line break or a JSON-escaped one), a Python value is masked only when it
# is a string literal, inside its quotes. Each head starts at a literal word and each value
# ends at its line's end at the latest: one linear pass.
_ENV_HEAD = re.compile(
    r"(?P<h1>%(?:set_)?env[ \t]+(?P<n1>" + _NAME + r")(?:[ \t]*=[ \t]*|[ \t]+))"
    r"|(?P<h2>run_line_magic\(\s*\\?['\"](?:set_)?env\\?['\"]\s*,\s*\\?['\"](?P<n2>"
    + _NAME + r")(?:[ \t]*=[ \t]*|[ \t]+))"
    r"|(?P<h3>environ[ \t]*\[[ \t]*\\?(?P<q3>['\"])(?P<n3>" + _NAME
    + r")\\?(?P=q3)[ \t]*\][ \t]*=(?!=)[ \t]*)"
    r"|(?P<h4>(?:setdefault|putenv)\([ \t]*\\?(?P<q4>['\"])(?P<n4>" + _NAME
    + r")\\?(?P=q4)[ \t]*,[ \t]*)")
_LINE_END = re.compile(r"\n|\\n")
_MAGIC_END = re.compile(r"\n|\\n|\\?['\"]")
_LITERAL = re.compile(r"[rRbBfFuU]{0,2}\\?(['\"])")
_CLOSE = {q: re.compile(r"\n|\\n|\\?" + q) for q in ("'", '"')}


def _value_end(text: str, m: re.Match[str]) -> tuple[int, int]:
    """Where the value the head ``m`` sets starts and ends (equal: nothing to mask)."""
    start = m.end()
    if m.group("h1") is not None:
        found = _LINE_END.search(text, start)
    elif m.group("h2") is not None:
        found = _MAGIC_END.search(text, start)
    else:
        literal = _LITERAL.match(text, start)
        if literal is None:  # not a string literal: an expression, which holds no secret
            return start, start
        start = literal.end()
        found = _CLOSE[literal.group(1)].search(text, start)
    return start, (found.start() if found else len(text))


def mask_env_assignments(text: str) -> str:
    """``text`` with the value of every secret-looking variable it sets masked: the
    ``%env``/``%set_env``/``os.environ[...] =`` forms, before the value is live. Only the
    value: what follows it on the line is kept."""
    if "env" not in text:
        return text
    out: list[str] = []
    pos = 0
    while (m := _ENV_HEAD.search(text, pos)) is not None:
        name = m.group("n1") or m.group("n2") or m.group("n3") or m.group("n4")
        if not SECRET_NAME.search(name):
            out.append(text[pos:m.end()])
            pos = m.end()
            continue
        start, end = _value_end(text, m)
        out += [text[pos:start], MASK if end > start else ""]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def redact_urls(text: str) -> str:
    """``text`` with the userinfo of every URL replaced by ``***``."""
    if "@" not in text or "://" not in text:
        return text
    return _USERINFO.sub("://" + MASK + "@", text)


def add_secret(value: object) -> None:
    """Treat ``value`` as a live secret from now on, for the life of the process (a value
    Lily expanded from ``${VAR}`` into an MCP server's configuration); short values are
    ignored, like short variables."""
    if isinstance(value, str) and len(value) >= MIN_SECRET_LEN:
        _ADDED.add(value)


def live_secrets(env: Mapping[str, str] | None = None) -> list[str]:
    """The current values of the secret environment variables (long enough to be secrets),
    then the values registered with :func:`add_secret`, longest first."""
    env = os.environ if env is None else env
    values = []
    for name in SECRET_ENV:
        value = env.get(name) or ""
        if len(value) >= MIN_SECRET_LEN:
            values.append(value)
    if _ADDED:
        values += sorted(_ADDED, key=len, reverse=True)
    return values


def redact(text: object, env: Mapping[str, str] | None = None, also: Iterable[str] = ()) -> str:
    """``text`` without URL userinfo or the live values of the secret variables; ``also``
    names further secrets in hand (e.g. the outbox token a caller was given), masked
    whatever their length."""
    text = mask_env_assignments(redact_urls(text if isinstance(text, str) else str(text)))
    if "uthorization" in text or "earer" in text or "EARER" in text:
        text = _AUTH.sub(lambda m: m.group(1) + MASK, text)
    for value in (*(v for v in also if v), *live_secrets(env)):
        if value in text:
            text = text.replace(value, MASK)
    return text


def redact_value(value: Any, env: Mapping[str, str] | None = None) -> Any:
    """``value`` (JSON-like data: a tool call's arguments) with every string in it, keys
    included, passed through :func:`redact` one by one: a mask can never break the data's
    structure, nor run from one string into the next, as a mask over its JSON text could
    (an ACP turn ended in JSON-RPC -32603; docs/limits-and-secrets.md#secrets)."""
    if isinstance(value, str):
        return redact(value, env)
    if isinstance(value, Mapping):
        return {redact_value(k, env) if isinstance(k, str) else k: redact_value(v, env)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v, env) for v in value]
    return value

