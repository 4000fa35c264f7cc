"""``lily mcp serve``: the session's skills served to other agents by the MCP Skills
extension (SEP-2640; docs/mcp.md#serving-skills).

:func:`capture` reads the eligible skills of a snapshot once, at start: each skill folder's
regular files (never a symlink leaving the folder, never a dot-file, within the
extension's limits) become ``skill://<name>/<path>`` resources with their SHA-256 digests
and sizes. The server then answers only from those captured bytes: ``skills/list``,
``skills/get``, ``resources/read`` and ``resources/directory/read`` can name nothing
outside a skill folder, since no path is ever opened after the capture. Skills of an MCP
server are not served again (they are that server's), nor ``disable-model-invocation``
skills unless ``--all``. Over HTTP it listens on 127.0.0.1 and every request needs the
bearer token. This module imports the ``mcp`` SDK.
"""
from __future__ import annotations

import hashlib
import hmac
import mimetypes
import os
import stat
from dataclasses import dataclass
from typing import Any

from lily_kernel.skills import remote
from lily_kernel.skills.snapshot import Snapshot

PROTOCOLS = frozenset({"2026-07-28"})
PAGE = 100


@dataclass(frozen=True)
class Published:
    """One skill as served: its entry and its files' bytes by URI."""
    entry: dict[str, Any]
    files: dict[str, bytes]


def capture(snapshot: Snapshot, everything: bool = False) -> list[Published]:
    """The snapshot's servable skills, read once: the eligible ones of the folders (the
    user's, the trusted workspace's, the bundled), without ``disable-model-invocation``
    ones unless ``everything``."""
    out = []
    for skill in snapshot.skills:
        if remote.is_remote(skill.source) or (skill.disable_model_invocation and not everything):
            continue
        files = _files(skill.path)
        if files is None or "SKILL.md" not in files:
            continue
        base = f"skill://{skill.name}"
        by_uri = {f"{base}/{rel}": data for rel, data in sorted(files.items())}
        front: dict[str, Any] = dict(_jsonable(skill.frontmatter))
        front.setdefault("name", skill.name)
        front.setdefault("description", skill.description or skill.summary)
        entry = {"uri": f"{base}/SKILL.md", "frontmatter": front,
                 "resources": [{"uri": uri, "size": len(data),
                                "digest": "sha256:" + hashlib.sha256(data).hexdigest()}
                               for uri, data in by_uri.items()]}
        out.append(Published(entry, by_uri))
    return out


def _files(folder: str) -> dict[str, bytes] | None:
    """The regular files under ``folder`` by relative path, no link followed out of it;
    None past the extension's limits."""
    real = os.path.realpath(folder)
    found: dict[str, bytes] = {}
    total = 0
    for here, dirs, names in os.walk(real, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = os.path.join(here, name)
            target = os.path.realpath(path)
            if os.path.commonpath([real, target]) != real:
                continue  # a symlink out of the skill folder is never served
            try:
                fd = os.open(target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            except OSError:
                continue
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    continue
                data = f.read(remote.MAX_TOTAL_BYTES + 1)
            total += len(data)
            if total > remote.MAX_TOTAL_BYTES or len(found) >= remote.MAX_RESOURCES:
                return None
            found[os.path.relpath(path, real).replace(os.sep, "/")] = data
    return found


def _jsonable(value: Any) -> Any:
    from lily_kernel.skills.snapshot import _plain
    return _plain(value)


def build(published: list[Published]) -> Any:
    """The MCP server (the SDK's ``MCPServer``) serving ``published``."""
    from mcp import MCPError
    from mcp.server import MCPServer
    from mcp.server.extension import Extension, MethodBinding, ResourceBinding
    from mcp.server.mcpserver.resources.types import BinaryResource, TextResource
    from mcp_types import RequestParams
    from pydantic import StrictStr

    entries = {p.entry["uri"]: p.entry for p in published}
    files = {uri: data for p in published for uri, data in p.files.items()}
    listing = [entries[u] for u in sorted(entries)]

    class ListParams(RequestParams):
        cursor: StrictStr | None = None

    class UriParams(RequestParams):
        uri: StrictStr

    class SkillsExtension(Extension):
        identifier = remote.EXTENSION

        def settings(self) -> dict[str, Any]:
            return {"directoryRead": True}

        def resources(self) -> list[Any]:
            out = []
            for uri, data in files.items():
                kind = ("text/markdown" if uri.endswith(".md") else
                        mimetypes.guess_type(uri)[0] or "application/octet-stream")
                name = uri.rsplit("/", 1)[-1]
                text = _text(data)
                out.append(ResourceBinding(
                    TextResource(uri=uri, text=text, mime_type=kind, name=name)
                    if text is not None else
                    BinaryResource(uri=uri, data=data, mime_type=kind, name=name)))
            return out

        def methods(self) -> list[Any]:
            return [MethodBinding("skills/list", ListParams, self._list, PROTOCOLS),
                    MethodBinding("skills/get", UriParams, self._get, PROTOCOLS),
                    MethodBinding("resources/directory/read", UriParams, self._dir, PROTOCOLS)]

        async def _list(self, context: Any, params: ListParams) -> dict[str, Any]:
            start = int(params.cursor) if params.cursor and params.cursor.isdigit() else 0
            result: dict[str, Any] = {"resultType": "complete", "ttlMs": 0,
                                      "cacheScope": "private",
                                      "skills": listing[start:start + PAGE]}
            if start + PAGE < len(listing):
                result["nextCursor"] = str(start + PAGE)
            return result

        async def _get(self, context: Any, params: UriParams) -> dict[str, Any]:
            if params.uri not in entries:
                raise MCPError(-32602, f"No skill is served at {params.uri}")
            return {"resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                    "skill": entries[params.uri]}

        async def _dir(self, context: Any, params: UriParams) -> dict[str, Any]:
            uri = params.uri.rstrip("/")
            if not any(u.startswith(uri + "/") for u in files) or \
                    not any(uri == e[:-len("/SKILL.md")] or uri.startswith(e[:-len("SKILL.md")])
                            for e in entries):
                raise MCPError(-32602, f"{params.uri} is not a directory resource")
            children: dict[str, str] = {}
            for u in files:
                if u.startswith(uri + "/"):
                    head = u[len(uri) + 1:].split("/", 1)
                    child = f"{uri}/{head[0]}"
                    children[child] = "inode/directory" if len(head) > 1 else (
                        mimetypes.guess_type(child)[0] or "application/octet-stream")
            return {"resultType": "complete", "resources": [
                {"uri": c, "name": c.rsplit("/", 1)[-1], "mimeType": m}
                for c, m in sorted(children.items())]}

    return MCPServer(name="lily", extensions=[SkillsExtension()])


def _text(data: bytes) -> str | None:
    """``data`` as text when UTF-8 gives back the very bytes (so the digest holds)."""
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


class BearerOnly:
    """ASGI middleware: every request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Refuse an HTTP request without the token (401); pass the rest on."""
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"a bearer token is needed\n"})
                return
        await self.app(scope, receive, send)


def serve(published: list[Published], http: bool = False, port: int = 0,
          token: str | None = None, announce: Any = print) -> None:
    """Serve over stdio, or Streamable HTTP on 127.0.0.1:``port`` with ``token``."""
    server = build(published)
    if not http:
        server.run()
        return
    import socket

    import uvicorn
    assert token
    app = BearerOnly(server.streamable_http_app(), token)
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    announce(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp")
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
