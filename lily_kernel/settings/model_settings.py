"""The session's model configuration; changed only by ``/model``.

The API key is read from ``OPENAI_API_KEY`` when a request is made and is never
stored here, so it can never reach the journal.
"""
from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

from lily_kernel.errors import (
    ConfigError,
)

DEFAULT_MODEL = "gpt-4o-mini"
REASONING_EFFORTS = ("minimal", "low", "medium", "high")
VERBOSITIES = ("low", "medium", "high")
SECRET_KEYS = ("api_key", "key", "token", "openai_api_key")
# Environment variables that set the model configuration (OPENAI_API_KEY is read per request).
ENV_VARS = {"LILY_MODEL": "model", "OPENAI_BASE_URL": "base_url",
            "LILY_TEMPERATURE": "temperature", "LILY_REASONING_EFFORT": "reasoning_effort",
            "LILY_TIMEOUT": "timeout", "LILY_MAX_RETRIES": "max_retries",
            "LILY_CONTEXT_WINDOW": "context_window", "LILY_MAX_TOKENS": "max_tokens",
            "LILY_PROFILE": "profile", "LILY_VISION": "vision"}
DEFAULT_MAX_TOKENS = 4_096
# A local endpoint's default answer cap (ModelConfig.answer_tokens): what a notebook task's
# answer needs; a small model that runs away on a CPU costs ~20 tokens a second.
LOCAL_MAX_TOKENS = 1_024
# Temperature 0 by default: the most likely call and answer, the same each time. A small
# local model follows the tools far better with it (issue 30: Qwen2.5-Coder-1.5B, 22/24 at 0
# against 17-19/24 at 0.2, bench/README.md); "none" sends none (the server's default),
# "default" is this again.
DEFAULT_TEMPERATURE = 0.0
PROFILES = ("auto", "small", "full")  # agent/budget.profile_of: docs/agent.md#small-model-profile
NOT_NONE = ("model", "timeout", "max_retries", "profile")
CONFIG_FILE = "lily.toml"
MAX_TIMEOUT = 3600.0  # seconds: one request's whole deadline is at most an hour
MAX_RETRIES = 10


def user_config_path(env: Mapping[str, str] | None = None) -> Path:
    """The user's config file: ``$XDG_CONFIG_HOME/lily/lily.toml``, else
    ``~/.config/lily/lily.toml`` (docs/mcp.md#configuration)."""
    from pathlib import Path
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "lily" / CONFIG_FILE


def merged(user: Mapping[str, object], workspace: Mapping[str, object]) -> dict[str, Any]:
    """The user file's tables under the workspace's: defaults < user file < workspace
    ``lily.toml``, key by key inside each table."""
    out = dict(user)
    for key, value in workspace.items():
        below = out.get(key)
        out[key] = {**below, **value} if isinstance(below, dict) and isinstance(value, dict) \
            else value
    return out


def read_config_file(workspace: str | os.PathLike[str],
                     path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The workspace's ``lily.toml`` (or the file at ``path``) as a dict ({} when absent);
    ConfigError when unreadable."""
    import tomllib
    from pathlib import Path
    path = Path(workspace) / CONFIG_FILE if path is None else Path(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from None
    for table in ("model", "tools", "limits", "activitypub"):
        if not isinstance(data.get(table, {}), dict):
            raise ConfigError(f"{path}: [{table}] must be a table")
    outbox = data.get("activitypub", {}).get("outbox")
    if isinstance(outbox, str):
        from lily_kernel.settings.urls import plain_http_reason
        reason = plain_http_reason(outbox)
        if reason:
            raise ConfigError(f"{path}: [activitypub] {reason}")
    return data


@dataclass(frozen=True)
class ModelConfig:
    """The model settings of a session (``[model]`` in lily.toml, /model, the environment)."""
    model: str = DEFAULT_MODEL
    temperature: float | None = DEFAULT_TEMPERATURE  # None: not sent
    reasoning_effort: str | None = None
    verbosity: str | None = None
    base_url: str | None = None
    timeout: float = 60.0
    max_retries: int = 2
    # tokens; None: the built-in table of well-known models, else 8,192 (agent/budget.py)
    context_window: int | None = None
    max_tokens: int | None = None  # the answer's cap, sent to the endpoint; None: answer_tokens()
    profile: str = "auto"  # "small": fewer tools, shorter descriptions; auto: by the window
    # the model sees image outputs as image parts (tools/images.py); off: their text only;
    # None ("auto"): on for a model known to take images (KNOWN_VISION)
    vision: bool | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 file_values: Mapping[str, object] | None = None) -> ModelConfig:
        """Defaults < the workspace's lily.toml [model] table < the environment."""
        env = os.environ if env is None else env
        config = cls()
        if file_values:
            config = config.changed(**file_values)
        from_env = {key: env[var] for var, key in ENV_VARS.items() if env.get(var)}
        return config.changed(**from_env) if from_env else config

    @classmethod
    def from_sources(cls, env: Mapping[str, str], file_values: Mapping[str, object] | None
                     ) -> tuple[ModelConfig, list[str]]:
        """Like :meth:`from_env`, but a bad setting is skipped (and reported), not fatal:
        the other settings, e.g. the endpoint, still apply."""
        config, errors = cls(), []
        sources: list[tuple[str, str, object]] = [
            (f"lily.toml [model] {k}", k, v) for k, v in (file_values or {}).items()]
        sources += [(var, key, env[var]) for var, key in ENV_VARS.items() if env.get(var)]
        for where, key, raw in sources:
            try:
                config = config.changed(**{key: raw})
            except ConfigError as exc:
                errors.append(f"{where}: {exc}")
        return config, errors

    def sees_images(self) -> bool:
        """Whether image parts are sent: ``vision`` when set, else :func:`known_vision`."""
        return self.vision if self.vision is not None else known_vision(self.model)

    def answer_tokens(self) -> int:
        """The answer's cap: ``max_tokens`` when set, else :data:`LOCAL_MAX_TOKENS` for a
        local endpoint (:func:`is_local`) and :data:`DEFAULT_MAX_TOKENS` for any other."""
        if self.max_tokens is not None:
            return self.max_tokens
        return LOCAL_MAX_TOKENS if is_local(self.base_url) else DEFAULT_MAX_TOKENS

    def as_dict(self) -> dict[str, Any]:
        """The settings as shown and journaled: a base_url loses any user:password@."""
        from lily_kernel.redaction import redact_urls
        data = asdict(self)
        if data["base_url"]:
            data["base_url"] = redact_urls(data["base_url"])
        return data

    def as_shown(self) -> dict[str, Any]:
        """:meth:`as_dict` as ``/model`` shows it: ``vision`` auto says what it decided."""
        data = self.as_dict()
        if self.vision is None:
            data["vision"] = ("auto (on: a model known to take images)" if self.sees_images()
                              else "auto (off: not a model known to take images)")
        return data

    def changed(self, **values: object) -> ModelConfig:
        """A copy with ``values`` checked: text as typed after /model or found in the
        environment, TOML's numbers and strings as they are, numbers and None from Python
        (``lily.session().set_model(timeout=20)``)."""
        known = {f.name for f in fields(self)}
        parsed: dict[str, Any] = {}
        for key, raw in values.items():
            if key.lower() in SECRET_KEYS:
                raise ConfigError("API keys are not set with /model or lily.toml; set "
                                  "OPENAI_API_KEY in the kernel's environment")
            if key not in known:
                raise ConfigError(f"unknown model setting '{key}' "
                                  f"(known: {', '.join(sorted(known))})")
            parsed[key] = _parse(key, raw)
        return replace(self, **parsed)


# Models known to accept image parts (docs/agent.md#images): a name (its last path part,
# lower case) starting with one of these, or holding one of the markers, unless it holds
# one of the exceptions (text-only members of a family that sees).
KNOWN_VISION = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4-turbo", "gpt-5", "o1", "o3", "o4",
                "claude-3", "claude-sonnet-4", "claude-opus-4", "claude-haiku-4", "gemini",
                "pixtral", "llava", "bakllava", "moondream", "minicpm-v", "llama4", "llama-4",
                "mistral-small-3.1", "mistral-small-3.2", "mistral-medium-3")
VISION_MARKERS = ("vision", "-vl", "_vl", "llava")
NOT_VISION = ("o1-mini", "o3-mini", "audio", "realtime", "tts", "transcribe", "embedding")


def known_vision(model: str) -> bool:
    """Is ``model`` known to take images (:data:`KNOWN_VISION`)? Unknown models are not."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    if any(x in name for x in NOT_VISION):
        return False
    return name.startswith(KNOWN_VISION) or any(m in name for m in VISION_MARKERS)


def is_local(base_url: str | None) -> bool:
    """Is ``base_url`` a model on this machine: its host ``localhost`` (or a name under
    ``.localhost``) or a loopback address (127.0.0.0/8, ::1)?"""
    if not base_url:
        return False
    from urllib.parse import urlsplit

    from lily_kernel.settings.urls import is_loopback
    try:
        host = urlsplit(base_url).hostname or ""
    except ValueError:
        return False
    return is_loopback(host)


def _parse(key: str, raw: object) -> Any:
    """``raw`` checked as the value of setting ``key``, keeping its type: a number from TOML
    or Python stays a number; text (as typed after /model, or from the environment) is
    read as the setting's type; None or "none"/"default" means unset where that is allowed
    (``temperature=default`` is the default 0 again, ``none`` sends none)."""
    if key == "temperature" and isinstance(raw, str) and raw.lower() == "default":
        return DEFAULT_TEMPERATURE
    if key == "profile":
        if not isinstance(raw, str) or raw.lower() not in PROFILES:
            raise ConfigError(f"profile must be one of {', '.join(PROFILES)}, not "
                              f"'{str(raw)[:20]}'")
        return raw.lower()
    if key == "vision":
        if isinstance(raw, bool):
            return raw
        text = "auto" if raw is None else str(raw).strip().lower()
        if text in ("auto", "none", "default", ""):
            return None
        if text not in ("true", "false", "on", "off", "1", "0", "yes", "no"):
            raise ConfigError(f"vision must be true, false or auto, not '{str(raw)[:20]}'")
        return text in ("true", "on", "1", "yes")
    if raw is None or (isinstance(raw, str) and raw.lower() in ("", "none", "default")):
        if key in NOT_NONE:
            if raw is None:
                raise ConfigError(f"{key} cannot be None")
        else:
            return None
    if key in ("temperature", "timeout", "context_window", "max_tokens", "max_retries"):
        return _checked_number(key, raw)
    if isinstance(raw, bool) or not isinstance(raw, str | numbers.Real):
        raise ConfigError(f"{key} must be text or a number, not {raw!r}")
    raw = str(raw)  # a model named by a number (`model = 4` in TOML) is that text
    if key == "model":
        if not raw:
            raise ConfigError("model name must not be empty")
        return raw
    if key == "reasoning_effort" and raw not in REASONING_EFFORTS:
        raise ConfigError(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, not '{raw}'")
    if key == "verbosity" and raw not in VERBOSITIES:
        raise ConfigError(f"verbosity must be one of {', '.join(VERBOSITIES)}, not '{raw}'")
    if key == "base_url" and not raw.startswith(("http://", "https://")):
        raise ConfigError(f"base_url must start with http:// or https://, not '{raw}'")
    return raw


def _checked_number(key: str, raw: object) -> float | int:
    if isinstance(raw, bool) or not isinstance(raw, str | numbers.Real):
        raise ConfigError(f"{key} must be text or a number, not {raw!r}")
    if key == "temperature":
        value = _number(key, raw)
        if not 0 <= value <= 2:
            raise ConfigError(f"temperature must be between 0 and 2, not {raw}")
        return value
    if key == "timeout":
        value = _number(key, raw)
        if not 0 < value <= MAX_TIMEOUT:  # also refuses nan, which no socket accepts
            raise ConfigError(f"timeout must be a number of seconds above 0 and at most "
                              f"{MAX_TIMEOUT:g}, not {raw}")
        return value
    if key == "max_retries":
        text = str(raw)
        if not text.isdigit() or len(text) > 3 or int(text) > MAX_RETRIES:
            raise ConfigError(f"max_retries must be a whole number from 0 to {MAX_RETRIES}, "
                              f"not '{text[:20]}'")
        return int(text)
    digits = str(raw).replace("_", "").replace(",", "")  # context_window, max_tokens
    if not digits.isascii() or not digits.isdigit() or not 0 < int(digits) <= 100_000_000:
        raise ConfigError(f"{key} must be a positive whole number of tokens, not '{raw}'")
    return int(digits)


def _number(key: str, raw: str | numbers.Real) -> float:
    if not isinstance(raw, str):
        return float(raw)
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{key} must be a number, not '{raw}'") from None
