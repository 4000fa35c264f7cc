"""A Skills-extension MCP server for the tests, honest or hostile as its spec file says.

``python skills_server.py SPEC.json [--http PORT]``: the spec is read again at every
request, so a test changes what the server serves between two listings. Spec keys:
``skills`` (a list of ``{"name", "files": {path: text}, "uri"?, "frontmatter"?,
"lie": {path: "digest" | "size"}, "big": bytes}``), ``hang`` (skills/list never answers),
``reads`` (a file each resources/read appends its URI to), ``notify`` (once listed, the
server watches the spec file and publishes ``notifications/resources/list_changed`` on its
``subscriptions/listen`` streams when it changes, as a server that changes its skills does).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from typing import Any

import yaml
from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.extension import Extension, MethodBinding
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp_types import RequestParams, Resource
from pydantic import StrictStr

SPEC = sys.argv[1]


def spec() -> dict[str, Any]:
    with open(SPEC, encoding="utf-8") as f:
        return json.load(f)


def catalog() -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    entries, files = [], {}
    for s in spec().get("skills", []):
        base = s.get("uri", f"skill://{s['name']}")
        front = s.get("frontmatter") or yaml.safe_load(s["files"]["SKILL.md"].split("---")[1])
        resources = []
        for path, text in sorted(s["files"].items()):
            data = text.encode()
            if path == "SKILL.md" and s.get("big"):
                data = data + b"x" * s["big"]
            files[f"{base}/{path}"] = data
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            size = len(data)
            lie = s.get("lie", {}).get(path)
            if lie == "digest":
                digest = "sha256:" + hashlib.sha256(b"something else").hexdigest()
            if lie == "size":
                size = 84
            resources.append({"uri": f"{base}/{path}", "digest": digest, "size": size})
        entries.append({"uri": f"{base}/SKILL.md", "frontmatter": front, "resources": resources})
    return entries, files


class ListParams(RequestParams):
    cursor: StrictStr | None = None


class UriParams(RequestParams):
    uri: StrictStr


class Skills(Extension):
    identifier = "io.modelcontextprotocol/skills"

    def methods(self) -> list[Any]:
        return [MethodBinding("skills/list", ListParams, self._list),
                MethodBinding("skills/get", UriParams, self._get)]

    async def _list(self, context: Any, params: ListParams) -> dict[str, Any]:
        if spec().get("hang"):
            await asyncio.sleep(3600)
        if spec().get("notify") and not WATCHING:
            WATCHING.append(asyncio.get_running_loop().create_task(_watch()))
        return {"resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                "skills": catalog()[0]}

    async def _get(self, context: Any, params: UriParams) -> dict[str, Any]:
        for entry in catalog()[0]:
            if entry["uri"] == params.uri:
                return {"resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                        "skill": entry}
        raise MCPError(-32602, f"No skill is served at {params.uri}")


WATCHING: list[Any] = []


async def _watch() -> None:
    """Publish a list_changed each time the spec file changes (2026-07-28: on the listen
    streams the client opened; the SDK drops a bare one)."""
    import os

    from mcp.shared.subscriptions import ResourcesListChanged
    seen = os.stat(SPEC).st_mtime_ns
    while True:
        await asyncio.sleep(0.2)
        now = os.stat(SPEC).st_mtime_ns
        if now != seen:
            seen = now
            await server._subscriptions.publish(ResourcesListChanged())


class Server(MCPServer):
    async def list_resources(self) -> list[Resource]:
        return [Resource(uri=u, name=u.rsplit("/", 1)[-1]) for u in catalog()[1]]

    async def read_resource(self, uri: Any, context: Any = None) -> list[ReadResourceContents]:
        reads = spec().get("reads")
        if reads:
            with open(reads, "a", encoding="utf-8") as f:
                f.write(str(uri) + "\n")
        data = catalog()[1].get(str(uri))
        if data is None:
            raise MCPError(-32602, "Unknown resource")
        return [ReadResourceContents(content=data.decode(), mime_type="text/markdown")]


server = Server(name="skills-test", extensions=[Skills()])
if "--http" in sys.argv:
    server.settings.port = int(sys.argv[sys.argv.index("--http") + 1])
    server.run(transport="streamable-http")
else:
    server.run()
