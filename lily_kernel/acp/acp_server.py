"""``lily acp``: the ACP agent over stdio, with the official SDK (docs/front-ends.md#acp).

Two threads. The SDK's connection runs on an asyncio loop in a thread of its own; the
core's work (sessions, commands, the agent loop) runs on the main thread, one job at a
time (:class:`MainThread`). ``session/cancel`` sends SIGINT to the main thread, so a turn
is interrupted exactly as ■ interrupts a kernel cell: a blocked read of the model's stream
wakes, the loop keeps only completed steps, and the turn ends ``cancelled``.

stdout carries the protocol alone: at start its file descriptor is kept for the SDK and
descriptor 1 is pointed at stderr, so a stray ``print`` (a tool, a library) cannot corrupt
a message; stdin is kept the same way and descriptor 0 reads from ``/dev/null``.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar, cast

from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.interfaces import Agent
from acp.interfaces import Client as AcpClient
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    CloseSessionResponse,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionListCapabilities,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    ToolCallUpdate,
    Usage,
)

from lily_kernel import __version__
from lily_kernel.acp import acp_sessions
from lily_kernel.acp import acp_settings as settings
from lily_kernel.acp.acp_clients import profile_of
from lily_kernel.acp.acp_turns import StopReason, Turns
from lily_kernel.acp.main_thread import MainThread, Terminated
from lily_kernel.errors import LilyError

log = logging.getLogger(__name__)
T = TypeVar("T")


class Connection:
    """The turns' view of the connection: calls made from the main thread, run on the
    connection's loop, waited for."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.conn: AcpClient | None = None

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            raise

    def send(self, session_id: str, update: Any) -> None:
        """One ``session/update``, written before this returns."""
        assert self.conn is not None
        self._wait(self.conn.session_update(session_id=session_id, update=update))

    def read_text(self, session_id: str, path: str) -> str:
        """``fs/read_text_file``: the client's text of the file (its buffer, if open)."""
        assert self.conn is not None
        return self._wait(self.conn.read_text_file(path=path, session_id=session_id)).content

    def write_text(self, session_id: str, path: str, content: str) -> None:
        """``fs/write_text_file``: the client writes the file (its buffer, if open)."""
        assert self.conn is not None
        self._wait(self.conn.write_text_file(content=content, path=path,
                                             session_id=session_id))

    def ask_permission(self, session_id: str, tool_call: ToolCallUpdate,
                       options: list[PermissionOption]) -> str | None:
        """``session/request_permission``: the option chosen, None when cancelled."""
        assert self.conn is not None
        answer = self._wait(self.conn.request_permission(
            session_id=session_id, tool_call=tool_call, options=options))
        outcome = answer.outcome
        return outcome.option_id if isinstance(outcome, AllowedOutcome) else None


class LilyAgent:
    """The ACP methods Lily answers; each hands the core's part to the main thread."""

    def __init__(self, main: MainThread, connection: Connection, turns: Turns) -> None:
        self.main, self.connection, self.turns = main, connection, turns

    def on_connect(self, conn: AcpClient) -> None:
        """The SDK hands over the connection to the client."""
        self.connection.conn = conn

    async def _on_main(self, fn: Callable[[], T], session_id: str | None = None) -> T:
        try:
            return await asyncio.wrap_future(self.main.submit(fn, session_id))
        except LilyError as exc:  # one sentence for the client, as an Error: line
            raise RequestError.invalid_params({"message": str(exc)}) from None

    async def initialize(self, protocol_version: int, client_capabilities: Any = None,
                         client_info: Any = None, **kwargs: Any) -> InitializeResponse:
        """What Lily offers: session loading from the journal, stdio and HTTP MCP servers,
        text prompts with resource links (docs/front-ends.md#what-works-where). What the
        client is and displays is kept for the session's requests (acp_clients.py)."""
        self.turns.profile = profile_of(client_capabilities, client_info)
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                session_capabilities=SessionCapabilities(
                    list=SessionListCapabilities(), resume=SessionResumeCapabilities(),
                    close=SessionCloseCapabilities()),
                prompt_capabilities=PromptCapabilities(image=False, audio=False,
                                                       embedded_context=False),
                mcp_capabilities=McpCapabilities(http=True, sse=False)),
            agent_info=Implementation(name="lily", title="Lily", version=__version__),
            auth_methods=[])

    async def new_session(self, cwd: str, additional_directories: list[str] | None = None,
                          mcp_servers: list[Any] | None = None,
                          **kwargs: Any) -> NewSessionResponse:
        """A Lily session in ``cwd``, the client's MCP servers joining as the user's own."""
        session_id = await self._on_main(lambda: self.turns.new(cwd, mcp_servers or []))
        modes, options = await self._on_main(lambda: self.turns.settings(session_id))
        # The commands follow the response: a client files updates under a session it
        # knows, and jupyter-ai knows this one only once session/new has returned.
        asyncio.get_running_loop().call_later(0.2, self._advertise, session_id)
        return NewSessionResponse(session_id=session_id, modes=modes, config_options=options)

    async def load_session(self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None,
                           additional_directories: list[str] | None = None,
                           **kwargs: Any) -> LoadSessionResponse:
        """A session taken up from its journal, its conversation replayed to the client."""
        # not tied to the session's jobs: a cancel stops a prompt, never a load
        await self._on_main(lambda: self.turns.load(cwd, session_id, mcp_servers or []))
        modes, options = await self._on_main(lambda: self.turns.settings(session_id))
        asyncio.get_running_loop().call_later(0.2, self._advertise, session_id)
        return LoadSessionResponse(modes=modes, config_options=options)

    async def set_session_mode(self, session_id: str, mode_id: str,
                               **kwargs: Any) -> SetSessionModeResponse:
        """``session/set_mode``: as ``/mode MODE_ID`` (a refusal is the request's error)."""
        await self._on_main(lambda: self.turns.set_mode(session_id, mode_id))
        return SetSessionModeResponse()

    async def set_config_option(self, config_id: str, session_id: str, value: str | bool,
                                **kwargs: Any) -> SetSessionConfigOptionResponse:
        """``session/set_config_option``: as ``/model KEY=VALUE``; the options' new state."""
        options = await self._on_main(
            lambda: self.turns.set_option(session_id, config_id, value))
        return SetSessionConfigOptionResponse(config_options=options)

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None,
                            **kwargs: Any) -> ListSessionsResponse:
        """``session/list``: the ACP sessions journaled in ``cwd`` (the process's folder when
        none is given) that ``session/load`` would take up: id, title, last activity."""
        folder = Path(cwd) if cwd else Path.cwd()
        return ListSessionsResponse(
            sessions=await self._on_main(lambda: acp_sessions.listing(folder, self.turns.env)))

    async def resume_session(self, session_id: str, cwd: str,
                             mcp_servers: list[Any] | None = None,
                             additional_directories: list[str] | None = None,
                             **kwargs: Any) -> ResumeSessionResponse:
        """``session/resume``: as ``session/load`` (the same journal rule), no replay."""
        await self._on_main(
            lambda: self.turns.load(cwd, session_id, mcp_servers or [], replay=False))
        modes, options = await self._on_main(lambda: self.turns.settings(session_id))
        asyncio.get_running_loop().call_later(0.2, self._advertise, session_id)
        return ResumeSessionResponse(modes=modes, config_options=options)

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        """``session/close``: the session's end journaled; it leaves this process."""
        self.main.interrupt(session_id)  # a running turn stops first, as on cancel
        await self._on_main(lambda: self.turns.end(session_id))
        return CloseSessionResponse()

    def _advertise(self, session_id: str) -> None:
        future = self.main.submit(lambda: self.turns.advertise(session_id))
        future.add_done_callback(_log_failure)

    async def prompt(self, prompt: list[Any], session_id: str,
                     **kwargs: Any) -> PromptResponse:
        """One turn: a command, or a request to the agent (docs/front-ends.md#acp); with the
        session's token totals (jupyter-ai's context meter shows them as session tokens)."""
        stop: StopReason = await self._on_main(lambda: self.turns.turn(session_id, prompt),
                                               session_id)

        def totals() -> Usage | None:  # after the turn, on the main thread as every read
            state = self.turns.sessions.get(session_id)  # gone after session/close
            ready = state is not None and state.runner.ready
            return settings.session_usage(state.runner.session) if state and ready else None

        usage = await self._on_main(totals)
        return PromptResponse(stop_reason=stop, usage=usage)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """``session/cancel``: interrupt the session's running turn, like ■."""
        self.main.interrupt(session_id)


def _log_failure(future: concurrent.futures.Future[Any]) -> None:
    if future.exception() is not None:
        log.warning("could not send the commands: %s", future.exception())


class _WriteProtocol(asyncio.Protocol):
    """A pipe writer's protocol with the flow control a StreamWriter awaits."""

    def __init__(self) -> None:
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        self._waiter = None

    async def _drain_helper(self) -> None:
        if self._paused:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter


async def _streams(read_fd: int, write_fd: int
                   ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=50 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                 os.fdopen(read_fd, "rb", buffering=0))
    protocol = _WriteProtocol()
    transport, _ = await loop.connect_write_pipe(lambda: protocol,
                                                 os.fdopen(write_fd, "wb", buffering=0))
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


def _keep_stdio() -> tuple[int, int]:
    """The protocol's own copies of stdin and stdout; 0 and 1 no longer reach them."""
    read_fd, write_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return read_fd, write_fd


def serve() -> int:
    """Serve ACP on stdin/stdout until the client closes them; the exit code."""
    read_fd, write_fd = _keep_stdio()
    main = MainThread()
    loop = asyncio.new_event_loop()
    connection = Connection(loop)
    turns = Turns(connection)
    agent = LilyAgent(main, connection, turns)

    async def listen() -> None:
        reader, writer = await _streams(read_fd, write_fd)
        # LilyAgent answers the methods it offers; the SDK's router skips the others.
        # session/resume and session/close are "unstable" in SDK 0.11 (stable in the
        # protocol since): the flag routes them (tests/acp_face/test_acp_sessions.py)
        await run_agent(cast("Agent", agent), writer, reader, use_unstable_protocol=True)

    def io() -> None:
        try:
            loop.run_until_complete(listen())
        except Exception:  # the client is gone either way
            log.exception("the ACP connection failed")
        finally:
            main.stop()

    thread = threading.Thread(target=io, name="lily-acp-io", daemon=True)
    thread.start()
    reason = "acp closed"
    try:
        main.serve()
    except KeyboardInterrupt:
        reason = "SIGINT"
    except Terminated:
        reason = "SIGTERM"
    finally:
        turns.close(reason)
    return 0
