"""The client side of the MCP Skills extension (SEP-2640) over the SDK's public requests.

The SDK (``mcp`` 2.3) ships no ``skills/*`` methods, so :func:`send` sends them through
``ClientSession.send_request`` with a plain :class:`mcp_types.Request`
(``tests/mcp/test_mcp_skills_contract.py`` fails once the SDK has its own, so they are
used instead). :class:`Skills` is one server's skills: listed when the server declares
``io.modelcontextprotocol/skills`` (each entry checked by
:func:`lily_kernel.skills.remote.entry`), listed again on a ``list_changed`` notification
(at 2026-07-28 on the ``subscriptions/listen`` stream :meth:`Skills.watch` opens) or a
``/reload_skills``, each within :data:`LIST_TIMEOUT`; a server that does not answer
leaves its skills empty with the reason, never its tools. :meth:`Skills.read` fetches one
file with ``resources/read`` and verifies it against the manifest (size, then digest).
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
from typing import Any

from lily_kernel.skills import remote

LIST_TIMEOUT = 10.0  # seconds for skills/list (all pages) and for reading one skill file
MAX_PAGES = 100
#: The notifications after which a server's skills are listed again.
CHANGED = ("notifications/skills/list_changed", "notifications/resources/list_changed")


async def send(session: Any, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """One request the SDK has no method for, through its public ``send_request``; the
    raw result."""
    from mcp_types import Request
    from pydantic import TypeAdapter
    request: Any = Request[Any, str](method=method, params=params)
    result: dict[str, Any] = await session.send_request(request, TypeAdapter(dict[str, Any]))
    return result


def declared(session: Any) -> bool:
    """Whether the server declared the Skills extension in its capabilities."""
    caps = getattr(session, "server_capabilities", None)
    extensions = getattr(caps, "extensions", None) or {}
    return remote.EXTENSION in extensions


class Skills:
    """One server's skills, as last listed, or why there are none."""

    def __init__(self) -> None:
        self.declared = False
        self.entries: tuple[remote.RemoteSkill, ...] = ()
        self.reason: str | None = None
        self.generation = 0  # bumped at each listing

    async def list(self, session: Any) -> None:
        """``skills/list``, every page, within :data:`LIST_TIMEOUT`; a fault is the reason."""
        self.declared = declared(session)
        if not self.declared:
            self.entries, self.reason = (), None
            return
        found: list[remote.RemoteSkill] = []
        try:
            async with asyncio.timeout(LIST_TIMEOUT):
                cursor: str | None = None
                for _ in range(MAX_PAGES):
                    result = await send(session, "skills/list",
                                        {"cursor": cursor} if cursor else None)
                    raw = result.get("skills")
                    if not isinstance(raw, list):
                        raise ValueError("its skills/list result has no 'skills' list")
                    found += [remote.entry(item) for item in raw]
                    cursor = result.get("nextCursor")
                    if not isinstance(cursor, str) or not cursor:
                        break
        except TimeoutError:
            self.entries, self.reason = (), (f"skills/list did not answer within "
                                             f"{LIST_TIMEOUT:g} s")
        except Exception as exc:  # the server's fault, one line
            from lily_kernel.redaction import redact
            line = redact(" ".join(str(exc).split()))[:300] or type(exc).__name__
            self.entries, self.reason = (), f"skills/list failed: {line}"
        else:
            self.entries, self.reason = tuple(sorted(found, key=lambda s: s.uri)), None
        self.generation += 1

    async def watch(self, session: Any) -> None:
        """List the skills again at each change the server announces. At 2026-07-28 its
        change notifications come only on a ``subscriptions/listen`` stream the client
        opens: one for ``resources/list_changed`` (an older connection's come as plain
        notifications, :data:`CHANGED`). A server that refuses the stream, or ends it, is
        listed again only at ``/reload_skills``."""
        from mcp.client.subscriptions import listen
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS
        if not self.declared or session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return
        with contextlib.suppress(Exception):
            async with listen(session, resources_list_changed=True) as changes:
                async for _ in changes:
                    await self.list(session)

    async def read(self, session: Any, skill: remote.RemoteSkill, uri: str) -> bytes:
        """The file ``uri`` of ``skill``, verified against the manifest; ValueError says why
        it is refused (not listed, another size, another digest)."""
        if skill.file(uri) is None:
            raise ValueError(f"{uri} is not in the skill's manifest")
        async with asyncio.timeout(LIST_TIMEOUT):
            result = await session.read_resource(uri)
        data = b"".join(_bytes(c) for c in result.contents if str(c.uri) == uri)
        why = remote.verify(skill, uri, data)
        if why:
            raise ValueError(why)
        return data


def _bytes(content: Any) -> bytes:
    text = getattr(content, "text", None)
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    blob = getattr(content, "blob", None)
    return base64.b64decode(blob) if isinstance(blob, str) else b""


def server_of(skill_path: str) -> str:
    """The server a remote skill's path names (``mcp:<server>:<root uri>``)."""
    return skill_path[len(remote.SOURCE_PREFIX):].split(":", 1)[0]


def load_body(hub: Any, skill_path: str, held: remote.RemoteSkill) -> str:
    """The body of an MCP server's skill for ``load_skill``: its SKILL.md read from that
    server, verified against the held entry (size, digest, then the frontmatter against the
    listed one); ValueError says why it is refused."""
    from lily_kernel.errors import FrontmatterError
    from lily_kernel.skills import frontmatter
    data = hub.read_skill_file(server_of(skill_path), held, held.uri)
    try:
        _, body, meta = frontmatter.parse_document(data)
    except FrontmatterError as exc:
        raise ValueError(f"its SKILL.md cannot be read: {exc}") from None
    why = remote.check_frontmatter(held, meta)
    if why:
        raise ValueError(why)
    return str(body)


def read_file(hub: Any, skill_path: str, held: remote.RemoteSkill, path: str,
              limit: int) -> str:
    """``read_skill_file`` of an MCP server's skill: only a file its manifest lists,
    verified, as text (at most ``limit`` bytes shown)."""
    found = remote.resolve(held, path)
    if found is None:
        names = ", ".join(f.uri[len(held.root) + 1:] for f in held.files
                          if f.uri != held.uri) or "none"
        raise ValueError(f"'{path}' is not a file of this skill (its files: {names})")
    data: bytes = hub.read_skill_file(server_of(skill_path), held, found.uri)
    text = data[:limit].decode("utf-8", "replace")
    return text + (f"\n[... cut at {limit} bytes of {len(data)}]" if len(data) > limit else "")


def for_model(session: Any, skill: Any, path: str | None) -> str:
    """:func:`read_for_model` of ``skill``; a refusal is the model's ToolError."""
    from lily_kernel.errors import ToolError
    try:
        return read_for_model(session, skill.path, path)
    except ValueError as exc:
        raise ToolError(f"skill '{skill.name}' is refused: {exc}") from None


def read_for_model(session: Any, skill_path: str, path: str | None) -> str:
    """What ``load_skill`` (``path`` None: the body) or ``read_skill_file`` answers for an
    MCP server's skill: read from that server, verified against the entry the session's
    snapshot holds, the body tagged with its origin; ValueError says why it is refused."""
    held = session.snapshot.held[skill_path]
    server = server_of(skill_path)
    hub = getattr(session, "mcp", None)
    if hub is None:
        raise ValueError(f"MCP server '{server}' is not running")
    if path is not None:
        return read_file(hub, skill_path, held, path, session.limits.read_bytes)
    body = load_body(hub, skill_path, held).strip()
    return (f"(From the MCP server '{server}', {held.uri}: its text is the server's, "
            f"verified against the manifest it listed.)\n\n{body}")
