"""One cell's walk through the core, the same for every face (docs/architecture.md#one-cell).

A face parses nothing itself: it hands :class:`Runner` a command cell or a prose request
and renders what comes back, in order — a command's result; for a skill request, a
prose cell or a confirmed tool call, the agent's :class:`~.results.Answer` and, when
something waits for the user, its :class:`~.results.ActionCard`. Confirm and Cancel from
any face (a button, ``/confirm``, ``/cancel``) go through :meth:`Runner.decide`.

The runner also owns recovery: when a skill root cannot be loaded there is no session,
every command fails with one line saying so, and ``/reload_skills`` or ``/new`` tries
again (docs/loader.md#errors).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from lily_kernel.agent import loop
from lily_kernel.agent.pending import HeldCall, PendingItem, arguments_json, decline_waiting, short
from lily_kernel.commands import completion, router, sanitize
from lily_kernel.commands.results import (
    ActionCard,
    ActionDone,
    Answer,
    CompactRequest,
    Notice,
    ProposedCells,
    SkillRequest,
)
from lily_kernel.errors import CommandError, Interrupted, LoaderError
from lily_kernel.redaction import redact, redact_value
from lily_kernel.session.session import Session
from lily_kernel.tools import mentions
from lily_kernel.tools.gate import Route
from lily_kernel.tools.notebook_tools import ProposedCell

RECOVERING = ("reload_skills", "new")  # the commands that may start a session after a loader error
#: The answer of a request that ends in a card without text of its own (a face that shows
#: the card itself, as the ACP face's permission request does, may leave it out).
WAITING = "I would like to run the call below; it waits for your confirmation."


class Live(Protocol):
    """What a face shows while the model works: tokens, events; closed when the step ends."""

    def write(self, piece: str) -> None:
        """Show one more piece of the model's text."""
        ...

    def event(self, kind: str, data: dict[str, Any]) -> None:
        """Show one event of the step (a tool call, a status)."""
        ...

    def close(self, interrupted: bool = False) -> None:
        """The step ended; ``interrupted``: by the user, and what was shown stays, marked
        so (docs/jupyter-display.md#interrupting)."""
        ...



class Runner:
    """One notebook's Lily: its session, or why none could start, and the one way cells run.

    ``new_session`` makes a session (it may raise :class:`LoaderError`); ``live``, given to
    :meth:`command` and :meth:`ask`, makes the face's live display for one agent request.
    """

    def __init__(self, new_session: Callable[[], Session],
                 variables: completion.Variables | None = None) -> None:
        self._new_session = new_session
        self.variables = variables  # the notebook's variable names, where there is a notebook
        self._session: Session | None = None
        self.session_error: str | None = None
        self.start()

    def start(self) -> None:
        """Start a session (again); a loader error is kept in ``session_error``."""
        try:
            self._session, self.session_error = self._new_session(), None
        except LoaderError as exc:
            self._session, self.session_error = None, str(exc)

    @property
    def ready(self) -> bool:
        """Whether a session is running (completion and inspection need one)."""
        return self._session is not None

    @property
    def session(self) -> Session:
        """The running session; CommandError saying why when there is none."""
        if self._session is None:
            raise CommandError(f"Lily could not load its skills: {self.session_error}. "
                               "Fix it, then run /reload_skills.")
        return self._session

    # -- the cells ----------------------------------------------------------------------
    def command(self, cell: str, live: Callable[[], Live] | None = None) -> Iterator[Any]:
        """The results of a command cell, in the order a face shows them."""
        cmd = router.parse(cell)
        if cmd is None:
            raise CommandError("not a command: a command cell starts with '/'.")
        yield from self._resumed()
        if self._session is None and cmd.name in RECOVERING:
            self.start()
            if self.ready:
                yield Notice(f"Skills loaded: snapshot version 1, "
                             f"{len(self.session.snapshot.skills)} skills.")
                return
        try:
            result = router.execute(self.session, cmd)
        except KeyboardInterrupt:
            raise Interrupted("interrupted.") from None
        if isinstance(result, SkillRequest):
            self._check_variable(result)
            yield from self.ask(result.input, skill=result, live=live)
        elif isinstance(result, CompactRequest):
            yield from self.compact(live)
        elif isinstance(result, ActionDone) and result.tool_result is not None:
            yield result  # a confirmed tool call: its outcome, then the request goes on
            yield from self.resume(result, live)
        else:
            yield result

    def _resumed(self) -> Iterator[Notice]:
        """The line that says a conversation was resumed, before the session's first output
        (docs/session.md#resume)."""
        note = self._session.take_resume_note() if self._session is not None else None
        if note:
            yield Notice(note)

    def _check_variable(self, request: SkillRequest) -> None:
        """A skill whose argument is a notebook variable: a missing name fails here, in code,
        before the model is asked (docs/commands.md#variables-as-arguments)."""
        if self.variables is None or not completion.takes_variable(request.skill):
            return
        name = (request.input.split() or [""])[0]
        if name and name not in set(self.variables()):
            raise CommandError(f"no variable named '{name}' in this notebook; "
                               f"{request.skill.name} needs one (its argument is "
                               f"{request.skill.argument_hint}).")

    def ask(self, text: str, skill: SkillRequest | None = None,
            live: Callable[[], Live] | None = None) -> Iterator[Any]:
        """A prose request (or a skill request) to the agent: its answer, then any card.

        A tool call still waiting for its card's decision is declined first, and a notice
        says so (docs/notebook-tools.md#confirmation)."""
        session = self.session
        if skill is None:
            yield from self._resumed()
        waiting = session.pending
        if isinstance(waiting, HeldCall):
            decline_waiting(session)
            tool = sanitize.code_span(waiting.tool, table=False)
            yield Notice(f"Card `{short(waiting.id)}` ({tool}) was "
                         "declined: you asked something else, and the agent is told the user "
                         "declined the call.")
        attached: list[mentions.Attached] = []
        if skill is None:
            session.record_prose(text)
            attached = mentions.attach(session, text, self.variables() if self.variables else ())
            if attached:
                session.journal.append({"event": "attached", "session_id": session.session_id,
                                        "items": [f"@{a.mention}" for a in attached]})
        sent = mentions.with_attachments(text, attached)
        shown = mentions.attached_images(attached)
        yield from self._agent(lambda on_text, on_event: loop.run(
            session, sent, skill=skill, on_text=on_text, on_event=on_event, shown=shown), live,
            attached=tuple(f"@{a.mention}" for a in attached))

    def resume(self, done: ActionDone, live: Callable[[], Live] | None = None) -> Iterator[Any]:
        """After a held tool call ran: the same request goes on with its output."""
        session = self.session
        call, result = done.action, done.tool_result
        if not isinstance(call, HeldCall) or result is None:
            raise CommandError("only a confirmed tool call resumes a request.")
        yield from self._agent(lambda on_text, on_event: loop.resume(
            session, call, result, on_text=on_text, on_event=on_event), live)

    def compact(self, live: Callable[[], Live] | None = None) -> Iterator[Any]:
        """``/compact``: the model's summary of the turns that no longer fit, shown; or a
        notice that every turn still fits (docs/agent.md#compact)."""
        from lily_kernel.agent import compact
        session = self.session
        shown = live() if live is not None else None
        interrupted = False
        try:
            done = compact.compact(session, shown.write if shown else None)
        except KeyboardInterrupt:
            interrupted = True
            raise Interrupted("interrupted; the conversation is unchanged.") from None
        finally:
            if shown is not None and interrupted:
                shown.close(interrupted=True)  # the text shown so far stays, marked
            elif shown is not None:
                shown.close()
        if done is None:
            yield Notice("Nothing to compact: every earlier turn still fits the model's "
                         "context window.")
            return
        n = done.turns
        yield Answer(f"**Summary of {n} earlier turn{'s' if n != 1 else ''}**, sent from now on "
                     f"instead of them:\n\n{done.summary}", None, (),
                     session.model_config.model, done.usage)

    def decide(self, ref: str | None, ok: bool, always: bool = False,
               route: Route = Route.CONFIRM) -> ActionDone:
        """Confirm (``ok``) or cancel the card ``ref`` names (None: the one waiting), for any
        face: the same path as ``/confirm`` and ``/cancel`` (``router.decide``); ``route``:
        how the decision came (an ACP client's permission reply: :data:`Route.ACP`)."""
        return router.decide(self.session, ref, ok, always, route)

    def shown(self, card: ActionCard) -> None:
        """The face displayed ``card``: its item now waits for the user's decision
        (docs/typed-skills.md#confirmation). A card never shown leaves nothing waiting."""
        self.session.show(card.action.id)

    # -- the agent's part ------------------------------------------------------------------
    def _agent(self, step: Callable[..., Any], live: Callable[[], Live] | None,
               attached: tuple[str, ...] = ()) -> Iterator[Any]:
        shown = live() if live is not None else None
        interrupted = False
        try:
            reply = step(shown.write if shown else None, shown.event if shown else None)
        except KeyboardInterrupt:
            # the cell still fails (Run All stops there); the text shown so far stays
            interrupted = True
            self.session.record_interrupted()
            raise Interrupted("interrupted; the conversation keeps only completed steps.") from None
        except CommandError as exc:  # the request failed: the journal says why (lily logs)
            self.session.record_error(str(exc))
            raise
        finally:
            if shown is not None and interrupted:
                shown.close(interrupted=True)  # the text shown so far stays, marked
            elif shown is not None:
                shown.close()
        text = reply.text
        if not text.strip() and reply.proposal is not None:
            text = WAITING
        yield Answer(text, reply.skill, tuple(reply.tools_used),
                     self.session.model_config.model, reply.usage, reply.left_out,
                     tuple(reply.notes), attached, self.session.permissions.mode.value)
        cells = tuple(s.code for s in reply.shown if isinstance(s, ProposedCell))
        if cells:
            yield ProposedCells(cells)
        hub = self.session.mcp
        while hub is not None and hub.shown:  # images MCP tools returned (docs/mcp.md#tools)
            yield hub.shown.pop(0)
        if reply.proposal is not None:
            yield self.card(reply.proposal)

    def card(self, action: PendingItem) -> ActionCard:
        """The card of pending work, with the purpose it is shown under; a held call's
        arguments (and a write's diff) redacted here, once, for every face, shown in full
        (a call whose arguments a card cannot show whole is refused before it is held:
        docs/permissions.md#cards), hidden characters made visible."""
        session = self.session
        if isinstance(action, HeldCall):
            tool = session.tools.get(action.tool)
            words = " ".join((tool.description if tool else "").split())
            purpose = words.split(". ")[0].rstrip(".") + "." if words else ""
            env = session.environ
            code = action.args.get("code") if action.tool == "run_python" else None
            shown = [purpose, arguments_json(redact_value(action.args, env)),
                     None if action.change is None else redact(action.change, env),
                     code if isinstance(code, str) else None, action.reason,
                     action.tool, action.server]  # the name and server: render shows them
            found = dict.fromkeys(sanitize.hidden_in(action.args))  # JSON escapes C0 ones
            for i, part in enumerate(shown):
                if part is not None:
                    shown[i], marks = sanitize.visible(part)
                    found.update(dict.fromkeys(marks))
            warning = (f"Warning: this call holds {len(found)} kind(s) of invisible or "
                       f"direction-changing character, shown as {', '.join(list(found)[:6])}: "
                       "what you see may not read as it runs" if found else "")
            return ActionCard(action, shown[0] or "", shown[1] or "", shown[2], shown[3],
                              shown[4] or "", warning)  # render makes the name visible too
        skill = session.snapshot.get(action.skill)
        purpose = skill.typed.purpose if skill and skill.typed else ""
        return ActionCard(action, purpose)
