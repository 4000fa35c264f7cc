"""Talking to an OpenAI-compatible Chat Completions endpoint through ``openai``.

One streaming call per loop step: text deltas go to ``on_text`` as they
arrive, tool-call deltas are assembled, and every endpoint fault becomes a
:class:`ModelError` with one readable line. The API key is read from the
environment at call time and never stored in the session.
"""
from __future__ import annotations

import contextvars
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lily_kernel.agent.hygiene import AnswerStopped
from lily_kernel.errors import ContextExceeded, JSONInputError, ModelError
from lily_kernel.settings.model_settings import ModelConfig
from lily_kernel.tools import images

if TYPE_CHECKING:  # openai is imported on first use: it costs ~0.3 s
    import openai


log = logging.getLogger(__name__)

NO_KEY = "lily-no-key"  # for endpoints that need none (vLLM, Ollama, llama.cpp server)


@dataclass
class ToolCall:
    """One tool call the model asked for."""
    id: str
    name: str
    arguments: str  # JSON text, as the model sent it

    def parsed(self) -> dict[str, Any]:
        """The call's arguments as a JSON object; ToolError when they are not one."""
        from lily_kernel import safejson
        try:  # bounded depth, digits and text: docs/limits-and-secrets.md#bad-input
            value = safejson.loads(self.arguments or "{}")
        except JSONInputError as exc:
            raise ModelError(f"the model sent invalid JSON arguments for tool '{self.name}': "
                             f"{exc}") from None
        if not isinstance(value, dict):
            raise ModelError(f"the model sent arguments for tool '{self.name}' that are not "
                             "a JSON object")
        return value


@dataclass
class Turn:
    """One model answer: its text, its tool calls and why it ended."""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None  # {"prompt_tokens", "completion_tokens"} when the endpoint reports it
    notes: list[str] = field(default_factory=list)  # for the footer: budget.tools_dropped

    def message(self) -> dict[str, Any]:
        """The answer as an assistant message of the conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in self.tool_calls]
        return msg


def not_configured(env: Mapping[str, str], config: ModelConfig) -> str | None:
    """Why no model can be called, or None."""
    if env.get("OPENAI_API_KEY") or config.base_url:
        return None
    if env.get("OPENAI_BASE_URL"):  # set by %env after the session read its environment
        return ("no model is configured for this session: OPENAI_BASE_URL was set after it "
                "started, and a session reads it when it starts; run /new to start one that "
                "uses it (or /model base_url=<url> to use an endpoint now).")
    return ("no model is configured: set OPENAI_API_KEY (for OpenAI) or OPENAI_BASE_URL "
            "(for any other OpenAI-compatible endpoint) in the kernel's environment, "
            "or run /model base_url=<url>; /commands work without a model.")


class ClientCache:
    """One ``openai.OpenAI`` client per (endpoint, key, timeout, retries), built lazily."""

    def __init__(self, refusal: Callable[[str], str | None] | None = None) -> None:
        self._key: tuple[Any, ...] | None = None
        self._client: openai.OpenAI | None = None
        # why an endpoint may not be asked (the administrator's allowlist), asked by
        # complete() before every request to the client's own URL
        self.refusal = refusal

    def get(self, config: ModelConfig, env: Mapping[str, str]) -> openai.OpenAI:
        """The client for ``config`` (a new one when the endpoint, key or limits changed)."""
        from lily_kernel.agent.deadline import env_proxies
        api_key = env.get("OPENAI_API_KEY") or NO_KEY
        proxies = env_proxies()  # HTTP(S)_PROXY, ALL_PROXY, NO_PROXY as httpx reads them
        key = (config.base_url, api_key, config.timeout, config.max_retries,
               tuple(sorted(proxies.items(), key=lambda kv: kv[0])))
        if self._client is None or key != self._key:
            import openai  # imported on first use: it costs ~0.3 s

            from lily_kernel.agent.deadline import DeadlineTransport
            # enforces the whole request's deadline; routes through the proxies; keeps a
            # request at its origin (docs/limits-and-secrets.md#network)
            transport = DeadlineTransport(proxies)
            client = openai.OpenAI(api_key=api_key, base_url=config.base_url or None,
                                   timeout=config.timeout, max_retries=config.max_retries,
                                   http_client=openai.DefaultHttpxClient(transport=transport))
            client._lily_deadline = transport  # type: ignore[attr-defined]  # read by complete()
            client._lily_refusal = self.refusal  # type: ignore[attr-defined]  # read by complete()
            self._client, self._key = client, key
        return self._client


# Optional parts of a request that an endpoint may refuse (HTTP 400 naming one): it is
# asked again without that one, and from then on (``stream_options`` for usage; a default
# ``temperature``, which OpenAI's reasoning models refuse; ``images``, the image parts of
# ``[model] vision``, which a text-only model refuses: tools/images.py; ``response_format``,
# the small profile's required call: tools/offering.call_format).
OPTIONAL_PARAMS = ("stream_options", "temperature", "images", "response_format")
# Per endpoint (base URL), the optional parameters it refused: never sent to it again.
_REFUSED: dict[str, set[str]] = {}
# The completion cap's name per endpoint, once one refused the other (HTTP 400 naming it).
_CAP_PARAM: dict[str, str] = {}
CAP_PARAMS = ("max_completion_tokens", "max_tokens")

# Context-length errors: llama.cpp's and OpenAI's (and those that copy them).
_LLAMA_CPP = re.compile(r"request \((\d+) tokens\) exceeds the available context size "
                        r"\((\d+) tokens\)")
_OPENAI_MAX = re.compile(r"maximum context length is (\d+) tokens")
_OPENAI_ASKED = re.compile(r"(?:resulted in|you requested) (\d+) tokens")
_OPENAI_MESSAGES = re.compile(r"\((\d+) in the messages")


def context_exceeded(message: str) -> ContextExceeded | None:
    """A context-length error read from an endpoint's message, or None."""
    found = _LLAMA_CPP.search(message)
    if found:
        return ContextExceeded(message, int(found.group(2)), int(found.group(1)))
    found = _OPENAI_MAX.search(message)
    if found:
        asked = _OPENAI_MESSAGES.search(message) or _OPENAI_ASKED.search(message)
        return ContextExceeded(message, int(found.group(1)),
                               int(asked.group(1)) if asked else None)
    return None


def cap_param(config: ModelConfig, where: str) -> str:
    """How the completion cap is named for this endpoint: ``max_completion_tokens`` for
    OpenAI's own API, ``max_tokens`` (understood by llama.cpp, vLLM, Ollama, LiteLLM) for
    others, or the other one once an endpoint refused it."""
    if where in _CAP_PARAM:
        return _CAP_PARAM[where]
    openai_api = not config.base_url or "api.openai.com" in config.base_url
    return CAP_PARAMS[0] if openai_api else CAP_PARAMS[1]


def endpoint_key(config: ModelConfig) -> str:
    """The endpoint as :func:`complete` knows it (the client's base URL): what the refused
    parameters are remembered under."""
    return (config.base_url or "https://api.openai.com/v1").rstrip("/")


def refused(where: str) -> frozenset[str]:
    """The optional parameters the endpoint ``where`` refused (never sent to it again)."""
    return frozenset(_REFUSED.get(where, ()))


def request_args(config: ModelConfig, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 usage: bool = True, max_tokens: int | None = None,
                 cap: str = CAP_PARAMS[1], omit: frozenset[str] = frozenset(),
                 response_format: dict[str, Any] | None = None) -> dict[str, Any]:
    """The keyword arguments of one chat-completions request (what :func:`request_body` sends);
    ``omit``: optional parameters the endpoint refused; ``response_format``: sent unless
    refused (the small profile's required call)."""
    args: dict[str, Any] = {"model": config.model, "messages": messages, "stream": True}
    if usage and "stream_options" not in omit:  # token usage in a last chunk, when sent
        args["stream_options"] = {"include_usage": True}
    if max_tokens is not None:
        args[cap] = max_tokens
    if tools:
        args["tools"] = tools
    if response_format is not None and "response_format" not in omit:
        args["response_format"] = response_format
    for name in ("temperature", "reasoning_effort", "verbosity"):
        value = getattr(config, name)
        if value is not None and name not in omit:
            args[name] = value
    return args


def sent_settings(config: ModelConfig, max_tokens: int) -> list[tuple[str, str]]:
    """What a request to ``config``'s endpoint sends besides the conversation, as ``/model``
    shows it: each setting's value, or why it is not sent."""
    where = endpoint_key(config)
    omit = refused(where)
    args = request_args(config, [], [], True, max_tokens, cap_param(config, where), omit)
    out = []
    for name, value in args.items():
        if name in ("model", "messages", "stream"):
            continue
        out.append((name, json.dumps(value) if isinstance(value, dict) else
                    f"{value:,}" if isinstance(value, int) else f"{value}"))
    for name in sorted(omit):
        out.append((name, "not sent (the endpoint refused it)"))
    if config.temperature is None and "temperature" not in omit:
        out.append(("temperature", "not sent (the server's default)"))
    return out


def _dumps(value: object) -> bytes:
    """JSON as ``openai`` sends it (httpx's defaults: compact, UTF-8, no NaN)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode()


def request_body(config: ModelConfig, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]], usage: bool = True,
                 max_tokens: int | None = None, cap: str = CAP_PARAMS[1],
                 omit: frozenset[str] = frozenset(),
                 response_format: dict[str, Any] | None = None) -> bytes:
    """The JSON body of one chat-completions request: :func:`request_args` as bytes, posted
    as they are, so ``openai`` does not walk every message of the history with its
    per-request transform of typed parameters (plain JSON data needs none)."""
    return _dumps(request_args(config, messages, tools, usage, max_tokens, cap, omit,
                               response_format))


def cut_marker(cap: int) -> str:
    """The visible end of an answer cut at the ``[limits] answer_chars`` cap."""
    return (f"\n\n*[… cut: Lily kept the first {cap:,} characters of this answer "
            "(lily.toml [limits] answer_chars); the rest was not kept …]*")


def complete(client: openai.OpenAI, config: ModelConfig, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
             on_text: Callable[[str], None] | None = None, max_chars: int | None = None,
             max_tokens: int | None = None, response_format: dict[str, Any] | None = None
             ) -> Turn:
    """One streamed completion, assembled into a :class:`Turn`.

    ``config.timeout`` is the whole request's deadline, retries included; past it the
    request ends with a :class:`ModelError` (docs/limits-and-secrets.md#deadline). An answer
    longer than ``max_chars`` is cut there: Lily stops reading the stream and keeps the head
    with a visible marker (tool calls of a cut answer are dropped). Usage is asked for with
    ``stream_options``; an endpoint that rejects that parameter (HTTP 400 naming it) is
    asked again without it, and from then on; so are image parts (``[model] vision``,
    tools/images.py: HTTP 400 naming an image or the content). ``max_tokens`` (the answer's cap) is sent
    as :func:`cap_param` names it; an endpoint that refuses that name is asked with the
    other one, and from then on; so is ``response_format`` (the small profile's required
    call). A prompt longer than the endpoint's window is a :class:`ContextExceeded`.
    """
    from lily_kernel.agent.deadline import deadline
    refusal = getattr(client, "_lily_refusal", None)
    url = str(client.base_url).rstrip("/")
    problem = refusal(url) if refusal is not None else None
    # the administrator's allowlist, on every request (docs/permissions.md)
    if problem and refusal is not None and refusal(url + "/") is not None:
        raise ModelError(f"{problem}; nothing was sent")
    transport = getattr(client, "_lily_deadline", None)
    where = _where(client)
    log.debug("model request to %s: %s, %d messages, %d tools", where, config.model,
              len(messages), len(tools))
    try:
        with deadline(transport, config.timeout):
            for _ in range(len(OPTIONAL_PARAMS) + 1):  # one refusal of each, at most
                cap = cap_param(config, where)
                sent = images.prepared(messages, config.sees_images() and "images" not in refused(where))
                try:
                    return _complete(client, config, sent, tools, on_text, max_chars,
                                     refused(where), max_tokens, cap, response_format)
                except _Refused as no:
                    if no.param in OPTIONAL_PARAMS:
                        log.info("%s refused %s: asked without it from now on", where, no.param)
                        _REFUSED.setdefault(where, set()).add(no.param)
                    else:
                        _CAP_PARAM[where] = CAP_PARAMS[1 - CAP_PARAMS.index(cap)]
            return _complete(client, config, images.prepared(messages, False), tools, on_text,
                             max_chars, frozenset(OPTIONAL_PARAMS), max_tokens,
                             cap_param(config, where))
    except Exception:
        if transport is not None and transport.expired:
            raise ModelError(_late(config, client)) from None
        raise


def _late(config: ModelConfig, client: openai.OpenAI) -> str:
    return (f"the model endpoint did not answer within {config.timeout:g} s "
            f"({_tries(config.max_retries)}): {_where(client)}; [model] timeout is the whole "
            "request's deadline, and nothing was done with a partial answer")


class _Refused(Exception):
    """The endpoint answered HTTP 400 naming an optional parameter Lily sent."""

    def __init__(self, param: str) -> None:
        super().__init__(param)
        self.param = param


#: Where the ``reasoning_content`` deltas of a model that sends them go while a face shows
#: them (``lily acp``: thought chunks); unset, they are dropped as before.
REASONING: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "lily_reasoning", default=None)


def _complete(client: openai.OpenAI, config: ModelConfig, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
              on_text: Callable[[str], None] | None, max_chars: int | None,
              omit: frozenset[str] = frozenset(), max_tokens: int | None = None,
              cap_name: str = CAP_PARAMS[1], response_format: dict[str, Any] | None = None
              ) -> Turn:
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    turn = Turn()
    parts: list[str] = []
    size = 0  # characters kept so far (text and tool-call arguments)
    cap = max_chars if max_chars is not None else float("inf")
    calls: dict[int, dict[str, str]] = {}
    stream = None
    try:
        body = request_body(config, messages, tools, True, max_tokens, cap_name, omit,
                            response_format)
        stream = client.post("/chat/completions", cast_to=ChatCompletion, content=body,
                             stream=True, stream_cls=openai.Stream[ChatCompletionChunk])
        for chunk in stream:
            reported = getattr(chunk, "usage", None)
            if reported is not None and getattr(reported, "prompt_tokens", None) is not None:
                turn.usage = {"prompt_tokens": int(reported.prompt_tokens or 0),
                              "completion_tokens": int(reported.completion_tokens or 0)}
            if not getattr(chunk, "choices", None):
                continue
            choice = chunk.choices[0]
            delta: Any = choice.delta  # None in a malformed chunk (chunks are not validated)
            thought = getattr(delta, "reasoning_content", None) if delta is not None else None
            if thought and (sink := REASONING.get()) is not None:
                sink(str(thought))  # shown by a face that asks (lily acp), never kept
            if delta is not None and delta.content:
                piece = delta.content
                if size + len(piece) > cap:  # keep the head, stop reading the rest
                    piece = piece[:int(cap - size)]
                    parts.append(piece)
                    if on_text is not None and piece:
                        on_text(piece)
                    stream.close()
                    turn.content = "".join(parts) + cut_marker(int(cap))
                    turn.finish_reason = "cut"
                    return turn
                parts.append(piece)
                size += len(piece)
                if on_text is not None:
                    on_text(piece)
            for tc in (delta.tool_calls or []) if delta is not None else []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                if tc.id:
                    slot["id"] = tc.id
                if tc.function is not None:
                    slot["name"] += tc.function.name or ""
                    slot["arguments"] += tc.function.arguments or ""
                    size += len(tc.function.name or "") + len(tc.function.arguments or "")
                    if size > cap:
                        stream.close()
                        raise ModelError(f"the model's tool call was longer than {int(cap):,} "
                                         "characters (lily.toml [limits] answer_chars); nothing "
                                         "was done with it")
            if choice.finish_reason:
                turn.finish_reason = choice.finish_reason
    except AnswerStopped:  # the loop's guard stopped a runaway answer (agent/hygiene.py)
        if stream is not None:
            stream.close()  # the server stops generating when the connection closes
        turn.content, turn.finish_reason = "".join(parts), "stopped"
        return turn
    except openai.APITimeoutError:
        raise ModelError(_late(config, client)) from None
    except openai.APIConnectionError as exc:
        cause = exc.__cause__ or exc
        if stream is not None:  # the endpoint answered, then the stream broke off
            raise ModelError(f"the model's response ended early (the connection closed "
                             f"mid-stream: {_first_line(cause)}); nothing was done with the "
                             "partial answer") from None
        raise ModelError(f"cannot reach the model endpoint at {_where(client)}: "
                         f"{_first_line(cause)}") from None
    except openai.RateLimitError as exc:
        # the server's own reason (a proxy such as LiteLLM says which deployment is cooling
        # down and for how long), through _api_message like every endpoint message
        raise ModelError(f"the model endpoint is rate limiting (HTTP 429"
                         f"{_after_retries(config.max_retries)}): {_api_message(exc)}; "
                         "try again later") from None
    except openai.AuthenticationError:
        raise ModelError("the model endpoint refused the API key (HTTP 401): "
                         "check OPENAI_API_KEY") from None
    except openai.NotFoundError as exc:
        raise ModelError(f"the endpoint has no model '{config.model}' (HTTP 404: "
                         f"{_api_message(exc)}); choose one with /model NAME") from None
    except openai.BadRequestError as exc:
        said = _api_message(exc)
        sent = request_args(config, [], [], True, None, cap_name, omit, response_format)
        for param in OPTIONAL_PARAMS:
            if param in sent and param in said:
                raise _Refused(param) from None
        if max_tokens is not None and cap_name in said and "context" not in said:
            raise _Refused(cap_name) from None
        exceeded = context_exceeded(said)
        if exceeded is not None:
            raise exceeded from None
        if images.has_images(messages) and any(w in said.lower() for w in ("image", "content")):
            raise _Refused("images") from None
        raise ModelError(f"the model endpoint rejected the request (HTTP 400): "
                         f"{_api_message(exc)}") from None
    except openai.APIStatusError as exc:
        from lily_kernel.agent.deadline import REDIRECT_HEADER, origin
        elsewhere = exc.response.headers.get(REDIRECT_HEADER)
        if elsewhere:
            raise ModelError(f"the model endpoint {origin(exc.request.url)} redirected the "
                             f"request to {elsewhere[:200]}, another origin (HTTP "
                             f"{exc.status_code}); Lily does not follow it, so the conversation "
                             "and the API key stay where they were sent: set [model] base_url "
                             "or OPENAI_BASE_URL to the endpoint itself") from None
        if exc.status_code >= 500:
            raise ModelError(f"the model endpoint failed (HTTP {exc.status_code}"
                             f"{_after_retries(config.max_retries)}): {_api_message(exc)}"
                             ) from None
        raise ModelError(f"the model endpoint rejected the request (HTTP {exc.status_code}): "
                         f"{_api_message(exc)}") from None
    except (openai.APIError, ValueError, AttributeError, TypeError) as exc:
        raise ModelError(f"the model endpoint sent a malformed response: {_first_line(exc)}") from None
    turn.content = "".join(parts)
    turn.tool_calls = [ToolCall(c["id"] or f"call_{i}", c["name"], c["arguments"])
                       for i, c in sorted(calls.items())]
    if turn.finish_reason is None:
        raise ModelError("the model's response ended early (the stream was cut before it "
                         "finished); nothing was done with the partial answer")
    for call in turn.tool_calls:
        if not call.name:
            raise ModelError("the model sent a tool call without a tool name")
    return turn


def _after_retries(retries: int) -> str:
    """", still after 2 retries" (nothing when retries are off: max_retries = 0)."""
    if retries <= 0:
        return ""
    return f", still after {retries} {'retry' if retries == 1 else 'retries'}"


def _tries(retries: int) -> str:
    return "tried once" if retries <= 0 else f"tried {retries + 1} times"


def _where(client: openai.OpenAI) -> str:
    return str(getattr(client, "base_url", "") or "the endpoint").rstrip("/")


def _api_message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return _first_line(err["message"])
    return _first_line(getattr(exc, "message", exc))


def _first_line(value: object) -> str:
    text = str(value).strip()
    return (text.splitlines() or [""])[0][:300]
