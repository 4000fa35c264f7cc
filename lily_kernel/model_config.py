"""The session's model configuration; changed only by ``/model``.

The API key is read from ``OPENAI_API_KEY`` when a request is made and is never
stored here, so it can never reach the journal.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Mapping

DEFAULT_MODEL = "gpt-4o-mini"
REASONING_EFFORTS = ("minimal", "low", "medium", "high")
VERBOSITIES = ("low", "medium", "high")
SECRET_KEYS = ("api_key", "key", "token", "openai_api_key")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ModelConfig:
    model: str = DEFAULT_MODEL
    temperature: float | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    base_url: str | None = None
    timeout: float = 60.0
    max_retries: int = 2

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "ModelConfig":
        env = os.environ if env is None else env
        return cls(model=env.get("LILY_MODEL") or DEFAULT_MODEL,
                   base_url=env.get("OPENAI_BASE_URL") or None)

    def as_dict(self) -> dict:
        return asdict(self)

    def changed(self, **values: str) -> "ModelConfig":
        """A copy with ``values`` (strings, as typed after /model) parsed and checked."""
        known = {f.name for f in fields(self)}
        parsed: dict = {}
        for key, raw in values.items():
            if key.lower() in SECRET_KEYS:
                raise ConfigError("API keys are not set with /model; set OPENAI_API_KEY "
                                  "in the kernel's environment")
            if key not in known:
                raise ConfigError(f"unknown model setting '{key}' "
                                  f"(known: {', '.join(sorted(known))})")
            parsed[key] = _parse(key, raw)
        return replace(self, **parsed)


def _parse(key: str, raw: str):
    if raw.lower() in ("", "none", "default") and key not in ("model", "timeout", "max_retries"):
        return None
    if key == "model":
        if not raw:
            raise ConfigError("model name must not be empty")
        return raw
    if key == "temperature":
        value = _number(key, raw)
        if not 0 <= value <= 2:
            raise ConfigError(f"temperature must be between 0 and 2, not {raw}")
        return value
    if key == "timeout":
        value = _number(key, raw)
        if value <= 0:
            raise ConfigError(f"timeout must be a positive number of seconds, not {raw}")
        return value
    if key == "max_retries":
        if not raw.isdigit():
            raise ConfigError(f"max_retries must be a whole number ≥ 0, not '{raw}'")
        return int(raw)
    if key == "reasoning_effort" and raw not in REASONING_EFFORTS:
        raise ConfigError(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, not '{raw}'")
    if key == "verbosity" and raw not in VERBOSITIES:
        raise ConfigError(f"verbosity must be one of {', '.join(VERBOSITIES)}, not '{raw}'")
    if key == "base_url" and not raw.startswith(("http://", "https://")):
        raise ConfigError(f"base_url must start with http:// or https://, not '{raw}'")
    return raw


def _number(key: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{key} must be a number, not '{raw}'") from None
