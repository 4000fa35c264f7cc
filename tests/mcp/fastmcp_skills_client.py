"""FastMCP's own client (fastmcp-slim, in .venv-fastmcp) reading the Skills extension of a
server: an independent client for tests/mcp/test_mcp_serve_fastmcp.py. Run by THAT
environment's Python, never imported by Lily or its tests.

    python fastmcp_skills_client.py SPEC.json

SPEC: {"stdio": {"command", "args", "env"}} or {"http": {"url", "headers"}}, and optionally
"change": {"path", "text"} — a file to rewrite after `skills/list` and before the reads.
Prints one JSON object: the protocol version, the server's extensions, the `skills/list`
entries and `skills/get` answers as FastMCP parsed them (its models check the manifest's
shape: sha256 digests, sizes, every URI inside its skill), and every listed resource's bytes
(base64) as FastMCP's `read_resource` returned them. FastMCP does not check the bytes against
the digests; the test does.
"""
from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from fastmcp.skills import SkillsClientExtension


def _bytes(content: Any) -> bytes:
    if getattr(content, "blob", None) is not None:
        return base64.b64decode(content.blob)
    return str(content.text).encode("utf-8")


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    transport: Any
    if "stdio" in spec:
        s = spec["stdio"]
        transport = StdioTransport(command=s["command"], args=s["args"], env=s.get("env"))
    else:
        h = spec["http"]
        transport = StreamableHttpTransport(h["url"], headers=h.get("headers") or {})
    out: dict[str, Any] = {}
    async with Client(transport, extensions=[SkillsClientExtension()]) as client:
        caps = client.server_capabilities
        out["protocol"] = client.protocol_version
        out["extensions"] = sorted((caps.extensions or {}) if caps else {})
        listed = await client.list_skills()
        out["listed"] = [s.model_dump(mode="json", by_alias=True) for s in listed]
        out["got"] = {s.uri: (await client.get_skill(s.uri)).model_dump(mode="json", by_alias=True)
                      for s in listed}
        if "change" in spec:
            Path(spec["change"]["path"]).write_text(spec["change"]["text"], encoding="utf-8")
        files: dict[str, str] = {}
        for s in listed:
            for r in s.resources if isinstance(s.resources, list) else []:
                contents = await client.read_resource(r.uri)
                files[r.uri] = base64.b64encode(b"".join(_bytes(c) for c in contents)).decode()
        out["files"] = files
    return out


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    print(json.dumps(asyncio.run(run(spec))))


if __name__ == "__main__":
    main()
