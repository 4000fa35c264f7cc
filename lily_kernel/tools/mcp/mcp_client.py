"""MCP connections: the SDK's event loop in one background thread (docs/mcp.md#the-client).

The kernel is synchronous. Every MCP server of the process is driven by one asyncio loop
in one daemon thread; the kernel submits coroutines to it and waits on their futures
with a bound. A :class:`Server` owns one connection (a stdio child or a Streamable HTTP
endpoint): it starts, lists its tools, refreshes them on
``notifications/tools/list_changed``, calls a tool within its timeout, and stops. A fault
(a start that fails, a child that exits mid-call, a malformed message, a hang) ends in one
line in :attr:`Server.reason` or a :class:`~lily_kernel.errors.ToolError`, never a
traceback. This module imports the ``mcp`` SDK; it is itself imported only once a server
is configured.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from lily_kernel.errors import ToolError
from lily_kernel.redaction import redact
from lily_kernel.tools.mcp.mcp_config import ServerConfig
from lily_kernel.tools.mcp.mcp_skills import CHANGED, LIST_TIMEOUT, Skills

T = TypeVar("T")
START_TIMEOUT = 30.0  # seconds for a server to start and list its tools
MAX_TOOLS = 100  # per server; more are left out with one line (the model is offered <= 128)
#: The environment a stdio child inherits from the kernel; everything else it gets is its
#: own ``env`` table (docs/mcp.md#what-a-server-receives).
INHERITED = ("PATH", "HOME", "LANG", "TERM", "USER", "SHELL", "TMPDIR")
# Run in the child before the server's command: die with the kernel (PR_SET_DEATHSIG, also
# after kill -9), unless the kernel is already gone, then exec the server in place.
LAUNCHER = ("import ctypes,os,signal,sys\n"
            "ctypes.CDLL(None,use_errno=True).prctl(1,signal.SIGKILL,0,0,0)\n"
            "os.getppid()==int(sys.argv[1]) or os._exit(1)\n"
            "try:\n os.execvp(sys.argv[2],sys.argv[2:])\n"
            "except OSError as e:\n"
            " sys.stderr.write(f'cannot start {sys.argv[2]}: {e.strerror}\\n'); os._exit(127)\n")


log = logging.getLogger(__name__)


class _SdkRecords(logging.Handler):
    """The SDK's own records, routed into Lily's logging (docs/architecture.md#logging) at
    debug level: a server's fault reaches the user as one line from Lily, and its traceback
    stays in the log for whoever turns it on, instead of printing in the notebook."""

    def emit(self, record: logging.LogRecord) -> None:
        log.debug("mcp SDK (%s): %s", record.name, record.getMessage(), exc_info=record.exc_info)


logging.getLogger("mcp").addHandler(_SdkRecords())
logging.getLogger("mcp").propagate = False


# What the SDK's own HTTP client sets (its private create_mcp_http_client, which Lily does not
# import): 30 s to connect/write, 300 s to read an event stream; redirects are left to the
# SDK's transports (within the endpoint's origin). tests/mcp/test_mcp_sdk_contract.py
# compares these with the installed SDK's, so an SDK that changes them fails a test.
HTTP_TIMEOUT = 30.0
HTTP_READ_TIMEOUT = 300.0


def http_client(headers: dict[str, str]) -> Any:
    """The httpx2 client of one MCP server over HTTP: the SDK's defaults, and the proxy
    settings of the environment honoured (``HTTP(S)_PROXY``, ``NO_PROXY``), as httpx2 does."""
    import httpx2
    return httpx2.AsyncClient(headers=headers, trust_env=True,
                             timeout=httpx2.Timeout(HTTP_TIMEOUT, read=HTTP_READ_TIMEOUT))


class _Loop:
    """The one background thread that runs the SDK's asyncio loop."""

    _instance: _Loop | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="lily-mcp", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> _Loop:
        """The process's loop thread, started on first use."""
        with cls._lock:
            if cls._instance is None:
                cls._instance = _Loop()
            return cls._instance

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop; its future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


def child_environment(own: dict[str, str], env: dict[str, str] | None = None) -> dict[str, str]:
    """A stdio child's environment: PATH, HOME, LANG, LC_*, TERM, USER, SHELL, TMPDIR from
    the kernel, then the server's own ``env`` (never OPENAI_API_KEY, LILY_OUTBOX_TOKEN...)."""
    env = dict(os.environ) if env is None else env
    out = {k: v for k, v in env.items() if k in INHERITED or k.startswith("LC_")}
    out["PATH"] = with_environment_bin(out.get("PATH", ""))
    out.update(own)
    return out


def with_environment_bin(path: str) -> str:
    """``path`` with the kernel environment's ``bin/`` first (where ``pip install
    mcp-server-time`` put its command), so ``command = "mcp-server-time"`` runs although a
    kernel started by Jupyter does not have its environment activated (docs/mcp.md)."""
    import sysconfig
    parts = [p for p in path.split(os.pathsep) if p]
    for folder in reversed(dict.fromkeys([sysconfig.get_path("scripts"),
                                          os.path.dirname(sys.executable)])):
        if folder and folder not in parts:
            parts.insert(0, folder)
    return os.pathsep.join(parts)


async def negotiate(session: Any) -> None:
    """The SDK's own ``mode="auto"`` handshake: ``server/discover`` at the newest protocol
    (2026-07-28), falling back to ``initialize`` (2025-11-25) with an older server
    (docs/mcp.md#the-client)."""
    from mcp.client._probe import negotiate_auto
    await negotiate_auto(session)


def one_line(exc: BaseException) -> str:
    """An exception (or the first leaf of an exception group) as one redacted line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)) and text == type(exc).__name__:
        text = "timed out"
    return redact(" ".join(text.split()))[:300]


class Server:
    """One MCP server's connection, driven on the background loop."""

    def __init__(self, config: ServerConfig, workspace: str,
                 on_change: Callable[[], None] | None = None) -> None:
        self.config = config
        self.workspace = workspace
        self.state = "disabled" if config.disabled else "stopped"
        self.reason: str | None = config.error
        self.tools: list[Any] = []  # mcp.types.Tool, as listed
        self.note: str | None = None  # e.g. tools left out past MAX_TOOLS
        self.generation = 0  # bumped whenever the tool list changes
        self.skills = Skills()  # what it serves by the Skills extension, if it declares it
        self.protocol: str | None = None  # the negotiated protocol version
        self.extensions: tuple[str, ...] = ()  # the extensions it declared
        self._on_change = on_change
        self._session: Any = None
        self._stop: asyncio.Event | None = None
        self._inflight: set[asyncio.Task[Any]] = set()
        self._fault: str | None = None
        # the child's stderr, kept for /mcp; open for the server's life
        self._errlog = tempfile.TemporaryFile(  # noqa: SIM115
            "w+", encoding="utf-8", errors="replace")
        self._ready = threading.Event()
        self._future: concurrent.futures.Future[None] | None = None
        if config.error:
            self.state = "failed"

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> None:
        """Start connecting in the background (state ``starting``)."""
        if self.config.error or self.config.disabled:
            return
        self.state, self.reason, self._fault = "starting", None, None
        self._ready.clear()
        self._future = _Loop.get().submit(self._run())

    def wait(self, timeout: float = START_TIMEOUT) -> None:
        """Wait until the server is ready or failed (at most ``timeout`` seconds)."""
        if self.state == "starting":
            self._ready.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Close the connection (a stdio child is stopped by the SDK)."""
        loop = _Loop.get().loop
        if self._stop is not None:
            loop.call_soon_threadsafe(self._stop.set)
        if self._future is not None:
            with contextlib.suppress(Exception):
                self._future.result(timeout)
        self._future = None
        if self.state in ("ready", "starting"):
            self.state = "stopped"

    def restart(self) -> None:
        """``/mcp restart NAME``: stop, then start again."""
        self.stop()
        self._errlog.seek(0)
        self._errlog.truncate()
        self.start()

    def stderr_tail(self, lines: int = 5) -> list[str]:
        """The last lines the child wrote to stderr, redacted."""
        with contextlib.suppress(ValueError, OSError):
            self._errlog.flush()
            self._errlog.seek(0)
            text = self._errlog.read()[-4000:]
            self._errlog.seek(0, os.SEEK_END)
            return [redact(line) for line in text.splitlines()[-lines:] if line.strip()]
        return []

    # -- the connection (on the loop) -----------------------------------------
    async def _run(self) -> None:
        from mcp import ClientSession
        self._stop = asyncio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                ended = asyncio.Event()
                read = await stack.enter_async_context(self._watch(read, ended))
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._on_message))
                async with asyncio.timeout(START_TIMEOUT):
                    await negotiate(session)
                    self.protocol = session.protocol_version
                    caps = session.server_capabilities
                    self.extensions = tuple(sorted(getattr(caps, "extensions", None) or {}))
                    await self._list(session)
                await self.skills.list(session)  # bounded by its own timeout
                self._session, self.state = session, "ready"
                self._ready.set()
                stop = asyncio.ensure_future(self._stop.wait())
                end = asyncio.ensure_future(ended.wait())
                changes = asyncio.ensure_future(self.skills.watch(session))
                await asyncio.wait([stop, end], return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                end.cancel()
                changes.cancel()
                if ended.is_set() and not self._stop.is_set():
                    self.state = "failed"
                    self.reason = self._fault or self._ended_reason()
                    self._fail_inflight(self.reason)
        except BaseException as exc:  # the fault is the server's state, one line
            if self.state != "stopped" and not self._stop.is_set():
                self.state = "failed"
                self.reason = self._fault or one_line(exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            if self._stop.is_set():
                self.state = "stopped"
            elif self.state == "ready":  # the connection ended by itself
                self.state, self.reason = "failed", self._fault or "the connection ended"
            self._session = None
            self._fail_inflight(self.reason or "the server stopped")
            self._ready.set()

    def _ended_reason(self) -> str:
        tail = self.stderr_tail(2)
        return ("the server exited" if self.config.transport == "stdio" else
                "the server closed the connection") + (f" ({' / '.join(tail)})" if tail else "")

    @contextlib.asynccontextmanager
    async def _watch(self, read: Any, ended: asyncio.Event) -> Any:
        """``read`` passed through, setting ``ended`` when the server's side closes (a child
        that exits mid-call fails its call at once instead of at its timeout)."""
        import anyio
        send, recv = anyio.create_memory_object_stream[Any](0)

        async def pump() -> None:
            try:
                async with send:
                    async for item in read:
                        await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            finally:
                ended.set()
                self._fail_inflight(self._fault or self._ended_reason())
        task = asyncio.ensure_future(pump())
        try:
            async with recv:
                yield recv
        finally:
            task.cancel()

    @contextlib.asynccontextmanager
    async def _transport(self) -> Any:
        cfg = self.config
        if cfg.transport == "http":
            from mcp.client.streamable_http import streamable_http_client
            async with http_client(dict(cfg.headers)) as client, \
                    streamable_http_client(cfg.url or "", http_client=client) as streams:
                yield streams
            return
        from mcp.client.stdio import StdioServerParameters, stdio_client
        command, args = cfg.command or "", list(cfg.args)
        child_env = child_environment(dict(cfg.env))
        command = shutil.which(command, path=child_env.get("PATH")) or command  # a bare name
        if sys.platform.startswith("linux"):
            command, args = sys.executable, ["-I", "-S", "-c", LAUNCHER, str(os.getpid()),
                                             command, *args]
        cwd = os.path.join(self.workspace, cfg.cwd) if cfg.cwd else self.workspace
        params = StdioServerParameters(command=command, args=args, cwd=cwd,
                                       env=child_env)
        async with stdio_client(params, errlog=self._errlog) as streams:
            yield streams

    async def _list(self, session: Any) -> None:
        tools: list[Any] = []
        cursor = None
        while True:
            from mcp.types import PaginatedRequestParams
            result = await session.list_tools(
                params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools += result.tools
            cursor = result.next_cursor
            if not cursor or len(tools) > MAX_TOOLS:
                break
        self.note = None
        if len(tools) > MAX_TOOLS:
            self.note = (f"offers more than {MAX_TOOLS} tools; Lily keeps the first {MAX_TOOLS}")
            tools = tools[:MAX_TOOLS]
        self.tools = tools
        self.generation += 1
        if self._on_change is not None:
            self._on_change()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):  # a malformed message from the server
            self._fault = f"sent a malformed message: {one_line(message)}"
            self._fail_inflight(self._fault)
            return
        method = getattr(message, "method", "")
        if method == "notifications/tools/list_changed" and self._session:
            with contextlib.suppress(Exception):
                await self._list(self._session)
        if method in CHANGED and self._session and self.skills.declared:
            await self.skills.list(self._session)

    def _fail_inflight(self, why: str) -> None:
        self._fault = self._fault or why
        for task in list(self._inflight):
            task.cancel()

    # -- calls (from the kernel's thread) ---------------------------------------
    def call(self, tool: str, args: dict[str, Any], timeout: float) -> Any:
        """Call ``tool``; the SDK's ``CallToolResult``. ToolError with one line on a fault."""
        name = self.config.name
        if self.state != "ready" or self._session is None:
            raise ToolError(f"MCP server '{name}' is not running "
                            f"({self.state}{': ' + self.reason if self.reason else ''})")
        self._fault = None
        future = _Loop.get().submit(self._call(tool, args, timeout))
        try:
            return future.result(timeout + 2)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolError(f"MCP server '{name}': '{tool}' did not answer within "
                            f"{timeout:g} s") from None
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            # _fault is set by the event loop's thread meanwhile (mypy sees only this one)
            why = self._fault or "the call was cancelled"  # type: ignore[redundant-expr]
            raise ToolError(f"MCP server '{name}': '{tool}' failed: {why}") from None
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"MCP server '{name}': '{tool}' failed: {one_line(exc)}") from None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = LIST_TIMEOUT + 2) -> T:
        """Run ``coro`` on the loop from the kernel's thread, within ``timeout``."""
        future = _Loop.get().submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"did not answer within {timeout:g} s") from None

    async def _call(self, tool: str, args: dict[str, Any], timeout: float) -> Any:
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        try:
            async with asyncio.timeout(timeout):
                return await self._session.call_tool(tool, args)
        except TimeoutError:
            raise ToolError(f"MCP server '{self.config.name}': '{tool}' did not answer within "
                            f"{timeout:g} s") from None
        finally:
            self._inflight.discard(task)
