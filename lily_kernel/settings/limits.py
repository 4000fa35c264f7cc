"""Caps on what the model can move through Lily: bytes read and written, characters kept.

Set in ``lily.toml``'s ``[limits]`` table; the defaults below hold otherwise. A bad
value is a configuration error naming the key (the session fails closed, like any
unreadable lily.toml), never a silent fallback to "no limit". See docs/trust-boundary.md.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from lily_kernel.errors import ConfigError

#: Upper bounds: a cap set past these is a configuration error, not "practically no cap"
#: (docs/trust-boundary.md#caps).
MAXIMA: dict[str, int] = {
    "read_bytes": 64 * 1024 * 1024, "write_bytes": 64 * 1024 * 1024,
    "answer_chars": 10_000_000, "tool_result_chars": 10_000_000,
    "journal_record_bytes": 64 * 1024 * 1024, "tool_calls_per_step": 256,
    "conversation_chars": 100_000_000,
}


@dataclass(frozen=True)
class Limits:
    """The caps of ``[limits]`` in lily.toml (docs/limits-and-secrets.md#caps)."""
    read_bytes: int = 256 * 1024          # bytes one `read` returns (it reads at most this + 1)
    write_bytes: int = 1024 * 1024        # bytes one `write` accepts
    answer_chars: int = 100_000           # characters of one model answer kept in the conversation
    tool_result_chars: int = 50_000       # characters of one tool result kept in the conversation
    journal_record_bytes: int = 1024 * 1024  # bytes of one journal record
    tool_calls_per_step: int = 16         # tool calls run per model step; the rest are not run
    conversation_chars: int = 2_000_000   # characters of the conversation a request may grow to

    @classmethod
    def from_table(cls, table: Mapping[str, object] | None) -> Limits:
        """The ``[limits]`` table of lily.toml; ConfigError naming the key when a value is bad."""
        values: dict[str, int] = {}
        known = {f.name for f in fields(cls)}
        for key, raw in (table or {}).items():
            if key not in known:
                raise ConfigError(f"[limits] {key}: unknown limit (known: {', '.join(sorted(known))})")
            if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
                raise ConfigError(f"[limits] {key} must be a positive whole number, not {raw!r}")
            if raw > MAXIMA[key]:
                raise ConfigError(f"[limits] {key} must be at most {MAXIMA[key]:,}, not {raw:,}")
            values[key] = raw
        return cls(**values)
