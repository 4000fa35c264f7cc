"""One ACP session's turns over the core's runner, on the main thread (docs/front-ends.md#acp).

Each ACP session is one Lily :class:`~lily_kernel.session.session.Session` driven by a
:class:`~lily_kernel.commands.runner.Runner`, as a notebook is: a prompt whose own text is
a ``/`` command goes to :meth:`Runner.command` (deterministic, never the model), prose to
:meth:`Runner.ask`. What the runner yields is sent as ACP updates
(:mod:`lily_kernel.acp.acp_updates`): the answer streamed as agent message chunks,
each tool call a ``tool_call`` and its updates, a card as
``session/request_permission`` whose answer goes to :meth:`Runner.decide` — the same path
as the notebook's buttons — and, after "run once" or "always", the request goes on.

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
from acp.schema import AvailableCommand, PermissionOption, ToolCallUpdate

from lily_kernel import redaction
from lily_kernel.acp import acp_updates as updates
from lily_kernel.acp import notebook_server
from lily_kernel.acp.notebook_server import NotebookLink, Server
from lily_kernel.acp.prompt_text import read_prompt
from lily_kernel.agent.pending import HeldCall
from lily_kernel.commands import render, sanitize
from lily_kernel.commands.results import ActionCard, ActionDone, Answer, ProposedCells
from lily_kernel.commands.runner import WAITING, Runner
from lily_kernel.commands.table import BUILTIN_NAMES
from lily_kernel.errors import CommandError, Interrupted, LilyError, error_line
from lily_kernel.session.journal import journal_path
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


@dataclass
class AcpSession:
    """One ACP session: its id, Lily's runner (which owns the Lily session), what the client
    was last told of the commands, and the live text of the request running now."""

    id: str
    workspace: Path
    runner: Runner
    link: NotebookLink | None = None  # the notebook tools through a Jupyter server
    commands: tuple[tuple[str, str], ...] = ()
    live: _Live | None = None
    started: set[str] = field(default_factory=set)  # tool calls the client was shown
    said: bool = False  # this turn's message has text already (the next part starts a paragraph)

    def message(self, client: Client, text: str, new_part: bool = True) -> None:
        """Send ``text`` (inert Markdown) as this turn's message continues; a new part
        (another result, another model step) starts a paragraph of its own."""
        if not text:
            return
        if new_part and self.said:
            text = "\n\n" + text.lstrip("\n")
        client.send(self.id, helpers.update_agent_message_text(text))
        self.said = True


def mcp_tables(servers: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The MCP servers of ``session/new`` as ``[mcp.servers]`` tables (stdio and HTTP; an
    SSE server is left out: Lily does not declare ``mcpCapabilities.sse``). Their
    environment and header values are registered as secrets, so no output shows them."""
    tables: dict[str, dict[str, Any]] = {}
    for server in servers:
        name = str(getattr(server, "name", "") or "")
        if not name:
            continue
        if getattr(server, "command", None):
            env = {e.name: e.value for e in getattr(server, "env", None) or []}
            tables[name] = {"command": server.command, "args": list(server.args or []),
                            "env": env}
            secrets: Iterable[str] = env.values()
        elif getattr(server, "type", None) == "http":
            headers = {h.name: h.value for h in server.headers or []}
            tables[name] = {"url": server.url, "headers": headers}
            secrets = headers.values()
        else:
            continue
        for value in secrets:
            redaction.add_secret(value)
    return tables


class Turns:
    """The ACP sessions of this process and how one prompt runs."""

    def __init__(self, client: Client, env: Mapping[str, str] | None = None) -> None:
        self.client = client
        self.env = env
        self.sessions: dict[str, AcpSession] = {}
        self._server: Server | bool | None = False  # False: not looked for yet

    def _link(self, workspace: Path) -> NotebookLink | None:
        """The notebook tools' way to a notebook, when a Jupyter server started us."""
        if self._server is False:
            self._server = notebook_server.find_server()
        server = self._server
        return NotebookLink(server, workspace) if isinstance(server, Server) else None

    # -- sessions -----------------------------------------------------------------------
    def new(self, cwd: str, servers: Sequence[Any] = ()) -> str:
        """A new session in ``cwd`` (the client's folder is the workspace); its id."""
        session_id = uuid.uuid4().hex
        workspace = Path(cwd)
        tables = mcp_tables(servers)
        label = f"acp-{session_id}"
        link = self._link(workspace)
        runner = Runner(lambda: Session(workspace, label=label, env=self.env,
                                        reserved_commands=BUILTIN_NAMES, client_mcp=tables,
                                        add_tools=link.add_tools if link else None))
        self.sessions[session_id] = AcpSession(session_id, workspace, runner, link)
        return session_id

    def load(self, cwd: str, session_id: str, servers: Sequence[Any] = ()) -> None:
        """``session/load``: the ACP session ``session_id`` taken up from its journal in
        ``cwd``, as a notebook's kernel resumes after a restart (docs/session.md#resume: the
        conversation and /model settings, never a waiting card nor an --always grant); what
        the model sees of it is replayed to the client as user and agent messages."""
        state = self.sessions.get(session_id)
        if state is None:
            workspace = Path(cwd)
            label = f"acp-{session_id}"
            if not journal_path(workspace, label).is_file():
                raise CommandError(f"no journal of ACP session '{session_id}' in {workspace}; "
                                   "start a new session.")
            tables = mcp_tables(servers)
            link = self._link(workspace)
            runner = Runner(lambda: Session(workspace, label=label, env=self.env,
                                            reserved_commands=BUILTIN_NAMES, client_mcp=tables,
                                            resume=True,
                                            add_tools=link.add_tools if link else None))
            state = self.sessions[session_id] = AcpSession(session_id, workspace, runner, link)
        if not state.runner.ready:
            return
        for message in state.runner.session.conversation:
            text = _message_text(message.get("content"))
            if not text.strip():
                continue
            if message.get("role") == "user":
                self.client.send(session_id, helpers.update_user_message_text(
                    sanitize.markdown(text)))
            elif message.get("role") == "assistant":
                self.client.send(session_id, helpers.update_agent_message_text(
                    sanitize.markdown(text)))

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
        try:
            if prompt.is_command:
                self._show(state, runner.command(prompt.text.strip(), live=self._live(state)))
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
        self.advertise(session_id)  # /reload_skills, /new and /trust change the skills
        return "end_turn"

    def _live(self, state: AcpSession) -> Any:
        def make() -> _Live:
            state.live = _Live(self, state)
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
        call = updates.card_tool_call(session, card, old)
        if call.tool_call_id not in state.started:
            self.client.send(state.id, helpers.start_tool_call(
                call.tool_call_id, call.title or "", kind=call.kind, status="pending",
                content=call.content, raw_input=call.raw_input))
            state.started.add(call.tool_call_id)
        choice = self.client.ask_permission(state.id, call, updates.permission_options(card))
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


def _message_text(content: Any) -> str:
    """A conversation message's text: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, dict) and p.get("type") == "text")
    return ""


class _Live:
    """The live view of one agent request: streamed text and tool calls."""

    def __init__(self, turns: Turns, state: AcpSession) -> None:
        self.turns, self.state = turns, state
        self.step = updates.StreamedText()

    def _send(self, update: Any) -> None:
        self.turns.client.send(self.state.id, update)

    def write(self, piece: str) -> None:
        first = not self.step.sent
        rest = self.step.feed(piece)
        self.state.message(self.turns.client, rest, new_part=first)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        session, started = self.state.runner.session, self.state.started
        if kind == "waiting":  # a new model step: the last one's text ends here
            if self.step.raw.strip():
                first = not self.step.sent
                self.state.message(self.turns.client, self.step.finish(), new_part=first)
            self.step = updates.StreamedText()
        elif kind == "skill":
            self._send(helpers.update_agent_thought_text(f"using skill {data['name']}"))
        elif kind in ("tool_start", "tool") and "id" in data:
            call_id, name = str(data["id"]), str(data["name"])
            given = data.get("args")
            args: dict[str, Any] = given if isinstance(given, dict) else {}
            if call_id not in started:
                waiting = bool(data.get("waiting"))
                old = updates.old_text(session, args) if name in FILE_WRITES else None
                self._send(updates.tool_started(session, call_id, name, args,
                                                "pending" if waiting else "in_progress", old))
                started.add(call_id)
            if kind == "tool" and not data.get("waiting"):
                self._send(updates.tool_finished(session, call_id, bool(data.get("ok")),
                                                 data.get("result")))

    def close(self, interrupted: bool = False) -> None:
        """The request ended; an interrupted one's text stays as it was sent."""
