"""What an OpenAI-compatible endpoint says of itself: its models and their context windows
(docs/agent.md#the-endpoints-models).

``GET /v1/models`` lists the models (vLLM adds each one's ``max_model_len``); llama.cpp's
server answers ``GET /props`` with the loaded model's ``n_ctx``; Ollama answers
``POST /api/show`` with the model's ``<architecture>.context_length``. Each is asked at
most once per endpoint and model in a session, with a short timeout, and only of an
endpoint the user configured (``base_url``): a hosted default is never probed.
A failed probe is not an error: the window then comes from the table, then a guess.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lily_kernel.agent import tools_dropped

if TYPE_CHECKING:
    from lily_kernel.session.session import Session

PROBE_TIMEOUT = 3.0  # seconds for each question to the endpoint
MAX_MODELS = 200  # models kept from a listing
MAX_ANSWER = 1_000_000  # bytes of one answer read; a longer one counts as silence
MAX_NAME = 256  # characters of a model name the endpoint lists, to be taken or shown


@dataclass(frozen=True)
class EndpointInfo:
    """The endpoint's own word: the models it lists (None: it lists none) and the context
    windows it states, by model."""

    models: tuple[str, ...] | None = None
    windows: dict[str, int] = field(default_factory=dict)
    #: llama.cpp's chat template lacks tools (True), has them (False), or unknown (None):
    #: agent/tools_dropped.py reads it when an answer's count looks short
    lacks_tools: bool | None = None

    def window(self, model: str) -> int | None:
        """The context window the endpoint states for ``model``, or None."""
        return self.windows.get(model)


def probe(base_url: str, api_key: str | None, model: str) -> EndpointInfo:
    """Ask the endpoint at ``base_url`` for its models and ``model``'s window."""
    import httpx2
    # identity: no compressed answer is ever inflated (a gzip bomb), as for model requests
    headers = {"Accept-Encoding": "identity",
               **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    base = base_url.rstrip("/")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    models: tuple[str, ...] | None = None
    windows: dict[str, int] = {}
    lacks: list[bool | None] = [None]
    with httpx2.Client(headers=headers, timeout=PROBE_TIMEOUT, follow_redirects=False) as http:
        try:
            listing = _json(http, "GET", f"{base}/models")
        except httpx2.TransportError:  # unreachable or silent: ask nothing more
            return EndpointInfo()
        if isinstance(listing, dict) and isinstance(listing.get("data"), list):
            entries = [e for e in listing["data"] if isinstance(e, dict)
                       and isinstance(e.get("id"), str)][:MAX_MODELS]
            models = tuple(e["id"] for e in entries)
            for entry in entries:  # vLLM
                size = _positive(entry.get("max_model_len"))
                if size:
                    windows[entry["id"]] = size
        with contextlib.suppress(httpx2.TransportError):
            _windows_of(http, root, model, windows, lacks)
    return EndpointInfo(models, windows, lacks[0])


def _windows_of(http: Any, root: str, model: str, windows: dict[str, int],
                lacks: list[bool | None]) -> None:
    """``model``'s window as llama.cpp or Ollama states it, into ``windows`` (and whether
    llama.cpp's chat template lacks tools, into ``lacks``)."""
    if model in windows:
        return
    props = _json(http, "GET", f"{root}/props")  # llama.cpp: the one loaded model
    lacks[0] = tools_dropped.template_lacks_tools(props if isinstance(props, dict) else None)
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    size = _positive(settings.get("n_ctx") if isinstance(settings, dict) else None) or \
        _positive(props.get("n_ctx") if isinstance(props, dict) else None)
    if size:
        windows[model] = size
    else:
        shown = _json(http, "POST", f"{root}/api/show", {"model": model})  # Ollama
        info = shown.get("model_info") if isinstance(shown, dict) else None
        if isinstance(info, dict):
            size = next((_positive(v) for k, v in sorted(info.items())
                         if isinstance(k, str) and k.endswith(".context_length")), None)
            if size:
                windows[model] = size


def _json(http: Any, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    """The JSON answer to one question, or None when it has none (not an error here); a
    transport failure (no connection, no answer in time) is raised for the caller."""
    with http.stream(method, url, json=body) as response:
        if response.status_code != 200:
            return None
        raw = b""
        for chunk in response.iter_raw():
            raw += chunk
            if len(raw) > MAX_ANSWER:
                return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _positive(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 100_000_000:
        return None
    return value


def of_session(session: Session) -> EndpointInfo | None:
    """What the session's configured endpoint says of itself (asked once per endpoint and
    model), or None when no ``base_url`` is configured."""
    config = session.model_config
    if not config.base_url:
        return None
    key = (config.base_url, config.model)
    if key not in session.endpoints:
        session.endpoints[key] = probe(config.base_url, session.environ.get("OPENAI_API_KEY"),
                                       config.model)
    info: EndpointInfo = session.endpoints[key]
    return info


def template_lacks_tools(session: Session) -> bool | None:
    """Whether the configured endpoint's chat template lacks tools, as its ``/props`` said
    (None: unknown, or no ``base_url``)."""
    info = of_session(session)
    return info.lacks_tools if info else None


def settle_model(session: Session) -> str | None:
    """With a ``base_url`` and no model named, take the model the endpoint serves when it
    lists exactly one (llama.cpp, a single-model vLLM); when it lists several, none of them
    the one in use, return the problem naming them (the request's error, a ``/model`` note).
    docs/agent.md#the-endpoints-models"""
    config = session.model_config
    if not config.base_url or session.model_named or session.served_model:
        return None
    info = of_session(session)
    # a name the endpoint gives is taken, or shown in one line, only when printable and short
    models = [m for m in info.models if m.isprintable() and len(m) <= MAX_NAME] \
        if info and info.models else []
    if not models or config.model in models:
        return None
    if len(models) == 1:
        session.take_served_model(models[0])
        return None
    from lily_kernel.redaction import redact_urls
    shown = ", ".join(models[:20]) + (f" and {len(models) - 20} more" if len(models) > 20 else "")
    return (f"no model is named and the endpoint at {redact_urls(config.base_url)} serves "
            f"{len(models)}: {shown}; choose one with /model NAME (or LILY_MODEL, or "
            "[model] model in lily.toml)")


def withheld_endpoint(session: Session) -> str | None:
    """Why an untrusted workspace's ``[model] base_url`` is not used, and the step that uses
    it (``/trust``), or None (docs/trust-boundary.md#workspace-trust)."""
    for item in session.withheld:
        if (item.table, item.key) == ("model", "base_url"):
            return (f"this workspace's lily.toml names the endpoint {item.describe()}, not used "
                    f"until you trust the workspace (it would receive {item.secret}): /trust "
                    "shows what the workspace ships, then /trust --yes uses its endpoint")
    return None


def explained(session: Session, problem: str) -> str:
    """Why no request can be made, with the step that fixes it when the workspace's own
    endpoint is withheld (``/trust``) or other settings are."""
    withheld = None if session.config_error else withheld_endpoint(session)
    if withheld:
        return f"no model is configured: {withheld}."
    note = session.untrusted_note
    return f"{problem} {note}" if note else problem


def model_note(session: Session) -> str | None:
    """``/model``'s line on where the model name came from, when the endpoint chose it or
    must be asked to (several models, none named)."""
    problem = settle_model(session) or withheld_endpoint(session)
    if problem:
        return problem[0].upper() + problem[1:] + "."
    if session.served_model:
        return (f"No model was named, so Lily uses {session.served_model}, the one model the "
                "endpoint serves (with its context window); /model NAME picks another.")
    return None


def prepare(session: Session) -> None:
    """Before a request: :func:`settle_model` (AgentError naming the endpoint's models when
    it serves several and none is named), then :func:`learn_window`."""
    problem = settle_model(session)
    if problem:
        from lily_kernel.errors import AgentError
        raise AgentError(problem)
    learn_window(session)


def learn_window(session: Session) -> None:
    """Before a request: unless a window is set, take the one the endpoint states (it comes
    before the built-in table, docs/agent.md#context-budget)."""
    if session.model_config.context_window is not None:
        return
    info = of_session(session)
    window = info.window(session.model_config.model) if info else None
    if window:
        session.learn_context_window(window)
        session.window_source = "endpoint"
