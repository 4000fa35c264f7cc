"""Lily's permission modes and model settings as ACP session modes and config options, and
its token figures as ``usage_update`` (docs/front-ends.md#modes-settings-and-usage).

Nothing is decided here that ``/mode`` and ``/model`` do not decide: a client's
``session/set_mode`` runs ``/mode NAME`` and ``session/set_config_option`` runs ``/model
KEY=VALUE`` through the command router (journaled, refused with the same one line, e.g.
the administrator's cap); this module only describes the state for the client.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acp.schema import (
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
    Usage,
    UsageUpdate,
)

from lily_kernel.agent import budget
from lily_kernel.commands import router, sanitize
from lily_kernel.commands.policy import WHAT
from lily_kernel.commands.results import Answer
from lily_kernel.errors import CommandError
from lily_kernel.session.session import Session
from lily_kernel.settings.permissions import Mode

ConfigOption = SessionConfigOptionSelect | SessionConfigOptionBoolean
#: The config options' ids, each a ``/model`` key.
MODEL, TEMPERATURE, VISION = "model", "temperature", "vision"
#: The temperatures the picker offers (with the current one, when it is another).
TEMPERATURES = ("0", "0.2", "0.5", "0.7", "1")
_NAMES = {Mode.PLAN: "Plan", Mode.ASK: "Ask", Mode.EDITS: "Edits", Mode.AUTO: "Auto"}


def modes(session: Session) -> SessionModeState:
    """The four modes (id, name, the one line ``/mode`` says of it) and the current one."""
    return SessionModeState(
        current_mode_id=session.permissions.mode.value,
        available_modes=[SessionMode(id=m.value, name=_NAMES[m], description=WHAT[m])
                         for m in Mode])


def set_mode(session: Session, mode_id: str) -> None:
    """``session/set_mode``: exactly ``/mode MODE_ID`` (the administrator's cap refuses a
    mode above it with its reason, and the mode stays); CommandError otherwise."""
    if mode_id not in {m.value for m in Mode}:
        raise CommandError(f"no mode '{mode_id[:40]}'; the modes are "
                           f"{', '.join(m.value for m in Mode)}.")
    router.execute(session, router.Command("mode", mode_id, "", f"/mode {mode_id}"))


def _model_names(session: Session) -> list[str]:
    from lily_kernel.agent import endpoint_info
    info = endpoint_info.of_session(session)
    current = session.model_config.model
    listed = [m for m in (info.models or ()) if m and "=" not in m and not any(c.isspace() for c in m)] \
        if info else []
    return listed if current in listed else [current, *listed]


def _temperature(session: Session) -> str:
    value = session.model_config.temperature
    return "none" if value is None else f"{value:g}"


def config_options(session: Session) -> list[ConfigOption]:
    """The model (the endpoint's ``GET /v1/models``; the configured one alone when it lists
    none), the temperature and whether the model is sent images, with their values now."""
    names = _model_names(session)
    temperature = _temperature(session)
    temperatures = list(TEMPERATURES) if temperature in TEMPERATURES else \
        [temperature, *TEMPERATURES]
    return [
        SessionConfigOptionSelect(
            id=MODEL, name="Model", category="model", type="select",
            description="The endpoint's model for the next requests (/model NAME).",
            current_value=session.model_config.model,
            options=[SessionConfigSelectOption(value=n, name=n) for n in names]),
        SessionConfigOptionSelect(
            id=TEMPERATURE, name="Temperature", category="model_config", type="select",
            description="Sampling temperature (/model temperature=VALUE).",
            current_value=temperature,
            options=[SessionConfigSelectOption(value=t, name=t) for t in temperatures]),
        SessionConfigOptionBoolean(
            id=VISION, name="Vision", category="model_config", type="boolean",
            description="Send image outputs to the model as images (/model vision=on|off).",
            current_value=session.model_config.sees_images()),
    ]


def set_option(session: Session, config_id: str, value: str | bool) -> None:
    """``session/set_config_option``: exactly ``/model KEY=VALUE`` (``/model NAME`` for the
    model); a value the option does not list is refused in one line."""
    options = {o.id: o for o in config_options(session)}
    option = options.get(config_id)
    if option is None:
        raise CommandError(f"no setting '{config_id[:40]}'; the settings are "
                           f"{', '.join(options)}.")
    if isinstance(option, SessionConfigOptionBoolean):
        if not isinstance(value, bool):
            raise CommandError(f"{config_id} takes true or false.")
        text = "on" if value else "off"
    else:
        text = str(value)
        allowed = [o.value for o in option.options if isinstance(o, SessionConfigSelectOption)]
        if text not in allowed:
            raise CommandError(f"{config_id} has no value '{text[:40]}'; it takes "
                               f"{', '.join(allowed[:12])}.")
    args = text if config_id == MODEL else f"{config_id}={text}"
    router.execute(session, router.Command("model", args, "", f"/model {args}"))


MODE = "mode"  # the key of the mode among the client's choices (see ``controls_note``)


def current(session: Session) -> dict[str, str]:
    """The mode and each option's value now, as a client's controls set them (text)."""
    values = {o.id: str(o.current_value).lower() if isinstance(o.current_value, bool)
              else str(o.current_value) for o in config_options(session)}
    return {MODE: session.permissions.mode.value, **values}


def controls_note(chosen: set[str], before: dict[str, str], session: Session) -> str:
    """What to tell a jupyter-ai user after a typed ``/mode`` or ``/model`` changed the mode or
    an option the panel's control had set (``chosen``: the keys the client set): that panel
    keeps the choice made there and sends it again with the next message, which would set it
    back silently. Empty when the command changed none of those."""
    now = current(session)
    names = {MODE: "Mode", MODEL: "Model", TEMPERATURE: "Temperature", VISION: "Vision"}
    lines = [f"Note: the panel's **{names[key]}** control keeps the choice made there and sends "
             f"it again with your next message, which would set it back: choose "
             f"**{_NAMES[Mode(now[key])] if key == MODE else sanitize.md_text(now[key])}** "
             f"there too." for key in names if key in chosen and before.get(key) != now[key]]
    return "\n\n".join(lines)


def session_usage(session: Session) -> Usage | None:
    """The session's prompt and completion tokens so far, as the endpoint counted them (the
    prompt response's ``usage``); None before a model call was counted."""
    totals = session.usage
    if not int(totals["calls"]):
        return None
    prompt, completion = int(totals["prompt_tokens"]), int(totals["completion_tokens"])
    return Usage(input_tokens=prompt, output_tokens=completion,
                 total_tokens=prompt + completion)


@dataclass
class UsageMeter:
    """What the client was last told of the tokens: the calls counted then, and the totals."""

    calls: int = 0
    prompt: int = 0
    completion: int = 0

    def update(self, session: Session, answer: Answer | None = None) -> UsageUpdate | None:
        """A ``usage_update`` when a model call was counted since the last one (or the
        request ended): ``used`` the last calls' prompt and completion tokens, ``size`` the
        context window the budget fits to, and in ``_meta`` what the budget left out."""
        totals = session.usage
        calls = int(totals["calls"])
        if calls == self.calls and answer is None:
            return None
        used = (int(totals["prompt_tokens"]) - self.prompt
                + int(totals["completion_tokens"]) - self.completion) if calls > self.calls \
            else None
        self.calls, self.prompt, self.completion = (
            calls, int(totals["prompt_tokens"]), int(totals["completion_tokens"]))
        if used is None:
            if answer is None or not answer.usage:
                return None
            used = int(answer.usage.get("prompt_tokens", 0)) + int(
                answer.usage.get("completion_tokens", 0))
        meta: dict[str, Any] = {"lily": {"calls": calls,
                                         "promptTokens": self.prompt,
                                         "completionTokens": self.completion}}
        if answer is not None:
            turns, results = answer.left_out
            meta["lily"].update(turnsNotSent=turns, resultsShortened=results)
        return UsageUpdate(session_update="usage_update", used=max(used, 0),
                           size=budget.window_of(session.model_config), field_meta=meta)
