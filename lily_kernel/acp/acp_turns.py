"""One ACP session's turns over the core's runner, on the main thread (docs/front-ends.md#acp).

Each ACP session is one Lily :class:`~lily_kernel.session.session.Session` driven by a
:class:`~lily_kernel.commands.runner.Runner`, as a notebook is: a prompt whose own text is
a ``/`` command goes to :meth:`Runner.command` (deterministic, never the model), prose to
:meth:`Runner.ask`. What the runner yields is sent as ACP updates
(:mod:`lily_kernel.acp.acp_updates`): the answer streamed as agent message chunks, each
tool call a ``tool_call``, a card as ``session/request_permission`` whose answer goes to
:meth:`Runner.decide` (as the notebook's buttons) before the request goes on.

Everything here runs on the process's main thread, so ``session/cancel`` interrupts it the
way ■ interrupts a kernel (:mod:`lily_kernel.acp.acp_server`): a ``KeyboardInterrupt``
that the runner turns into :class:`~lily_kernel.errors.Interrupted`.
"""
from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from acp import helpers
from acp.schema import (
    AvailableCommand,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    PermissionOption,
    ToolCallUpdate,
)

from lily_kernel.acp import acp_sessions, client_files, notebook_server
from lily_kernel.acp import acp_settings as settings
from lily_kernel.acp import acp_updates as updates
from lily_kernel.acp.acp_clients import ClientProfile
from lily_kernel.acp.acp_live import Live
from lily_kernel.acp.acp_plan import PlanTracker
from lily_kernel.acp.notebook_server import NotebookLink, Server
from lily_kernel.acp.prompt_text import read_prompt
from lily_kernel.agent.model_client import REASONING
from lily_kernel.agent.pending import HeldCall
from lily_kernel.commands import render, sanitize
from lily_kernel.commands.results import ActionCard, ActionDone, Answer, ProposedCells
from lily_kernel.commands.runner import WAITING, Runner
from lily_kernel.commands.table import BUILTIN_NAMES
from lily_kernel.errors import CommandError, Interrupted, LilyError, error_line
from lily_kernel.session.resume import CHAT_CONVERSATION, NOTEBOOK_CONVERSATION
from lily_kernel.session.session import Session
from lily_kernel.tools.gate import Refused, Route
from lily_kernel.tools.tool_registry import FILE_WRITES

StopReason = Literal["end_turn", "cancelled"]
#: What ``/help`` adds in ``lily acp``: where the notebook tools work, or why they are not offered.
NO_NOTEBOOK = ("*Lily's notebook tools* (`list_variables`, `inspect_variable`, `last_error`, "
               "`read_cells`, `run_python`, `propose_cell`) *are not offered here: no Jupyter "
               "server started `lily acp` (as jupyter-ai does), so there is no notebook kernel "
               "to reach. The tools of an MCP server your client passes in are listed by* "
               "`/mcp` *(docs/front-ends.md#what-works-where).*")
THROUGH_SERVER = ("*Lily's notebook tools* (`list_variables`, `inspect_variable`, "
                  "`last_error`, `read_cells`, `run_python`) *work through the Jupyter server "
                  "that started `lily acp`, in the kernel of the notebook attached to your "
                  "message, else of the one running in this chat's folder; `run_python` asks "
                  "first; a proposed cell is shown here for you to copy "
                  "(docs/front-ends.md#what-works-where).*")


class Client(Protocol):
    """What the turns need of the ACP connection, called from the main thread."""

    def send(self, session_id: str, update: Any) -> None:
        """Send one ``session/update`` and wait until it is written."""
        ...

    def ask_permission(self, session_id: str, tool_call: ToolCallUpdate,
                       options: list[PermissionOption]) -> str | None:
        """``session/request_permission``: the option chosen, None when cancelled."""
        ...

    def read_text(self, session_id: str, path: str) -> str:
        """``fs/read_text_file``."""
        ...

    def write_text(self, session_id: str, path: str, content: str) -> None:
        """``fs/write_text_file``."""
        ...


@dataclass
class AcpSession:
    """One ACP session: its id, Lily's runner (which owns the Lily session), what the client
    was last told of the commands, and the live text of the request running now."""

    id: str
    workspace: Path
    runner: Runner
    link: NotebookLink | None = None  # the notebook tools through a Jupyter server
    commands: tuple[tuple[str, str], ...] = ()
    live: Live | None = None
    started: set[str] = field(default_factory=set)  # tool calls the client was shown
    said: bool = False  # this turn's message has text already (the next part starts a paragraph)
    meter: settings.UsageMeter = field(default_factory=settings.UsageMeter)
    told: tuple[str, str] = ("", "")  # the mode and the config options the client was told
    chosen: set[str] = field(default_factory=set)  # what the client's controls have set
    plan: PlanTracker = field(default_factory=PlanTracker)

    def message(self, client: Client, text: str, new_part: bool = True) -> None:
        """Send ``text`` (inert Markdown) as this turn's message continues; a new part
        (another result, another model step) starts a paragraph of its own."""
        if not text:
            return
        if new_part and self.said:
            text = "\n\n" + text.lstrip("\n")
        client.send(self.id, helpers.update_agent_message_text(text))
        self.said = True


class Turns:
    """The ACP sessions of this process and how one prompt runs."""

    def __init__(self, client: Client, env: Mapping[str, str] | None = None) -> None:
        self.client = client
        self.env = env
        self.sessions: dict[str, AcpSession] = {}
        self.profile = ClientProfile()  # set by initialize
        self._server: Server | bool | None = False  # False: not looked for yet

    def _link(self, workspace: Path) -> NotebookLink | None:
        """The notebook tools' way to a notebook, when a Jupyter server started us."""
        if self._server is False:
            self._server = notebook_server.find_server()
        server = self._server
        return NotebookLink(server, workspace) if isinstance(server, Server) else None

    # -- sessions -----------------------------------------------------------------------
    def new(self, cwd: str, servers: Sequence[Any] = (), session_id: str | None = None,
            resume: bool = False) -> str:
        """A new session in ``cwd`` (the client's folder is the workspace); its id. With
        ``resume``, session ``session_id`` taken up from its journal there."""
        session_id = session_id or uuid.uuid4().hex
        workspace, tables = Path(cwd), acp_sessions.mcp_tables(servers)
        label, link = acp_sessions.label(session_id), self._link(workspace)
        runner = Runner(lambda: Session(workspace, label=label, env=self.env,
                                        reserved_commands=BUILTIN_NAMES, client_mcp=tables,
                                        resume=resume,
                                        add_tools=link.add_tools if link else None))
        self.sessions[session_id] = AcpSession(session_id, workspace, runner, link)
        if runner.ready:  # an editor's buffers: what the model reads and writes
            runner.session.files_through = client_files.through_client(*self._fs(session_id))
        return session_id

    def _fs(self, session_id: str) -> tuple[Any, Any]:
        """The client's file methods Lily uses: those it offers, unless it is jupyter-ai
        (whose methods are the disk Lily reads itself, without its boundary)."""
        p, client = self.profile, self.client
        if p.jupyter_ai:
            return None, None
        return ((lambda path: client.read_text(session_id, path)) if p.fs_read else None,
                (lambda path, text: client.write_text(session_id, path, text))
                if p.fs_write else None)

    def load(self, cwd: str, session_id: str, servers: Sequence[Any] = (),
             replay: bool = True) -> None:
        """``session/load`` (without ``replay``: ``session/resume``): session ``session_id``
        taken up from its journal in ``cwd`` as a kernel resumes (docs/session.md#resume),
        only if Lily wrote it for this user (else it starts fresh, told in one ``Error:``
        line); its turns replayed to a client that does not keep the chat itself."""
        state = self.sessions.get(session_id)
        if state is None:
            acp_sessions.loadable(Path(cwd), session_id)  # CommandError: not taken up
            state = self.get(self.new(cwd, servers, session_id, resume=True))
        if not state.runner.ready:
            return
        session = state.runner.session
        note = session.resume_note
        if note is not None and note.startswith("Error:"):  # a foreign journal: said now, once
            self.client.send(session_id, helpers.update_agent_message_text(
                sanitize.md_text(session.take_resume_note() or note)))
        elif note:  # the first output's note: a chat, not a notebook
            session.resume_note = note.replace(NOTEBOOK_CONVERSATION, CHAT_CONVERSATION)
        if self.profile.keeps_history or not replay:  # jupyter-ai's .chat holds it
            return
        for message in session.conversation:
            text = _message_text(message.get("content"))
            role = message.get("role")
            if text.strip() and role in ("user", "assistant"):
                send = (helpers.update_user_message_text if role == "user"
                        else helpers.update_agent_message_text)
                self.client.send(session_id, send(sanitize.markdown(text)))

    def end(self, session_id: str) -> None:
        """``session/close``: the session's end journaled, a waiting card declined, and the
        session gone from this process (``session/load`` can take it up again)."""
        state = self.sessions.pop(session_id, None)
        if state is not None and state.runner.ready:
            self._after_cancel(state)
            state.runner.session.end("session/close")

    def get(self, session_id: str) -> AcpSession:
        """The session ``session_id`` names; CommandError when there is none."""
        state = self.sessions.get(session_id)
        if state is None:
            raise CommandError(f"no ACP session '{session_id}' in this process.")
        return state

    def advertise(self, session_id: str) -> None:
        """Tell the client the commands (built-ins and skill aliases) when they changed."""
        state = self.get(session_id)
        commands = self._commands(state)
        said = updates.command_names(commands)
        if said != state.commands:
            self.client.send(state.id, helpers.update_available_commands(commands))
            state.commands = said

    def settings(self, session_id: str) -> tuple[Any, Any]:
        """The session's modes and config options (None, None while no session could
        start), as ``session/new`` and ``session/load`` return them; the client is told."""
        state = self.get(session_id)
        if not state.runner.ready:
            return None, None
        session = state.runner.session
        modes, options = settings.modes(session), settings.config_options(session)
        state.told = (modes.current_mode_id, _dump(options))
        return modes, options

    def set_mode(self, session_id: str, mode_id: str) -> None:
        """``session/set_mode``: ``/mode MODE_ID`` (CommandError with its reason)."""
        settings.set_mode(self.get(session_id).runner.session, mode_id)
        self.get(session_id).told = (mode_id, self.get(session_id).told[1])
        self.get(session_id).chosen.add(settings.MODE)

    def set_option(self, session_id: str, config_id: str, value: str | bool) -> list[Any]:
        """``session/set_config_option``: ``/model KEY=VALUE``; the options' new state."""
        state = self.get(session_id)
        settings.set_option(state.runner.session, config_id, value)
        state.chosen.add(config_id)
        options = settings.config_options(state.runner.session)
        state.told = (state.told[0], _dump(options))
        return options

    def _tell_settings(self, state: AcpSession) -> None:
        """After a command (``/mode``, ``/model``, ``/new``): the mode or the options that
        changed, as ``current_mode_update`` and ``config_option_update``."""
        if not state.runner.ready:
            return
        session = state.runner.session
        mode = session.permissions.mode.value
        if mode != state.told[0]:
            self.client.send(state.id, CurrentModeUpdate(session_update="current_mode_update",
                                                         current_mode_id=mode))
        options = settings.config_options(session)
        if _dump(options) != state.told[1]:
            self.client.send(state.id, ConfigOptionUpdate(
                session_update="config_option_update", config_options=options))
        state.told = (mode, _dump(options))

    def _tell_usage(self, state: AcpSession, answer: Answer | None = None) -> None:
        """A ``usage_update`` after a model step (and at the request's end)."""
        update = state.meter.update(state.runner.session, answer)
        if update is not None:
            self.client.send(state.id, update)

    def _commands(self, state: AcpSession) -> list[AvailableCommand]:
        runner = state.runner
        return updates.available_commands(runner.session if runner.ready else None)

    def close(self, reason: str) -> None:
        """Journal every session's end (the client went away or the process stops)."""
        for state in self.sessions.values():
            if state.runner.ready:
                state.runner.session.end(reason)

    # -- one prompt -------------------------------------------------------------------------
    def turn(self, session_id: str, blocks: Sequence[Any]) -> StopReason:
        """Run one prompt: a command or a request to the agent; what stopped the turn."""
        state = self.get(session_id)
        prompt = read_prompt(blocks)
        if state.link is not None:  # the notebook tools look at this message's attachments
            state.link.attachments = prompt.attachments
        self.advertise(session_id)
        runner = state.runner
        state.live, state.started, state.said = None, set(), False
        thinking = REASONING.set(lambda piece: state.live.think(piece) if state.live else None)
        try:
            if prompt.is_command:
                before = settings.current(runner.session) if runner.ready else {}
                try:
                    self._show(state, runner.command(prompt.text.strip(),
                                                     live=self._live(state)))
                finally:
                    self._tell_settings(state)
                if self.profile.jupyter_ai and runner.ready:  # its controls resend their choice
                    self._say(state, settings.controls_note(state.chosen, before, runner.session))
                if prompt.text.split() == ["/help"]:
                    self._say(state, NO_NOTEBOOK if state.link is None else THROUGH_SERVER)
            elif (text := prompt.request(state.workspace)).strip():
                self._show(state, runner.ask(text, live=self._live(state)))
            else:
                self._say(state, "Say what you need, or type `/help`.")
        except (Interrupted, KeyboardInterrupt):
            self._after_cancel(state)
            return "cancelled"
        except LilyError as exc:
            self._say(state, sanitize.md_text(error_line(exc)))
        finally:
            REASONING.reset(thinking)
        self.advertise(session_id)  # /reload_skills, /new and /trust change the skills
        return "end_turn"

    def _live(self, state: AcpSession) -> Any:
        def make() -> Live:
            state.live = Live(self.client, state, lambda: self._tell_usage(state))
            return state.live
        return make

    def _show(self, state: AcpSession, results: Iterable[Any]) -> None:
        for result in results:
            if isinstance(result, Answer) and result.text == WAITING:
                continue  # the permission request that follows says it, with the call
            if isinstance(result, Answer):
                live = state.live
                if live is not None:
                    first = not live.step.sent  # nothing of this step shown yet
                    state.message(self.client, live.step.finish(result.text), new_part=first)
                else:
                    self._say(state, sanitize.markdown(result.text.rstrip()))
                state.message(self.client, updates.footer(result), new_part=False)
                self._tell_usage(state, result)
                if (plan := state.plan.read(result.text)) is not None:
                    self.client.send(state.id, plan)
            elif isinstance(result, ActionCard):
                self._ask(state, result)
            elif isinstance(result, ActionDone):
                self._say(state, render.markdown(result))
            elif isinstance(result, ProposedCells):
                cells = "\n\n".join(sanitize.code_block(code, "python") for code in result.cells)
                self._say(state, "Proposed cells (run them in a notebook):\n\n" + cells)
            else:
                self._say(state, render.markdown(result))

    def _ask(self, state: AcpSession, card: ActionCard) -> None:
        """A card as a permission request; the answer decided as a button would."""
        runner, session = state.runner, state.runner.session
        runner.shown(card)
        action = card.action
        held = isinstance(action, HeldCall)
        old = (updates.old_text(session, action.args)
               if isinstance(action, HeldCall) and action.tool in FILE_WRITES else None)
        call = updates.card_tool_call(session, card, old, self.profile)
        shown = updates.displayed(self.profile, call)
        if not shown:  # the client would show buttons over code it does not display
            call = updates.unshowable(call)
        if call.tool_call_id not in state.started:
            self.client.send(state.id, helpers.start_tool_call(
                call.tool_call_id, call.title or "", kind=call.kind, status="pending",
                content=call.content, raw_input=call.raw_input))
            state.started.add(call.tool_call_id)
        else:  # shown as it started: now with what the request shows (jupyter-ai keeps these)
            self.client.send(state.id, helpers.update_tool_call(
                call.tool_call_id, title=call.title, content=call.content,
                raw_input=call.raw_input))
        choice = self.client.ask_permission(state.id, call, updates.permission_options(card, shown))
        if choice is None:  # the client cancelled the turn: nothing runs (_after_cancel)
            self.client.send(state.id, updates.tool_finished(session, call.tool_call_id,
                                                             False, None))
            raise Interrupted("cancelled by the client.")
        ok = choice in (updates.ONCE, updates.ALWAYS)
        done = runner.decide(action.id, ok, choice == updates.ALWAYS, Route.ACP)
        ran = ok and not isinstance(done.outcome, Refused)  # decided again: it may not run
        self.client.send(state.id, updates.tool_finished(
            session, call.tool_call_id, ran, done.tool_result if held else None))
        if done.tool_result is not None:
            self._show(state, runner.resume(done, live=self._live(state)))
        else:
            self._say(state, render.markdown(done))

    def _after_cancel(self, state: AcpSession) -> None:
        """A cancelled turn leaves no card waiting: the client dropped its buttons."""
        runner = state.runner
        if runner.ready and runner.session.pending is not None:
            with contextlib.suppress(LilyError):  # an uncertain delivery stays for /confirm
                runner.decide(None, False)

    def _say(self, state: AcpSession, text: str) -> None:
        """One part of the message: Markdown that is inert already (rendered or sanitised)."""
        state.message(self.client, text)


def _dump(options: list[Any]) -> str:
    return repr([o.model_dump() for o in options])


def _message_text(content: Any) -> str:
    """A conversation message's text: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, dict) and p.get("type") == "text")
    return ""
