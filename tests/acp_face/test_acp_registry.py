"""Lily's ACP registry manifest (deploy/acp-registry/lily/agent.json) against the rules of the
registry's published schema, and the docs' Zed entry starting what it names
(docs/front-ends.md#the-acp-registry).

The schema is https://cdn.agentclientprotocol.com/registry/v1/latest/agent.schema.json
(agentclientprotocol/registry, agent.schema.json at commit 172d5034): its repository states
no license, so it is not copied here; each rule below cites the schema's keyword it checks.
"""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "acp-registry" / "lily" / "agent.json"
TOP_KEYS = {"id", "name", "version", "description", "repository", "website", "authors",
            "license", "license_url", "icon", "distribution"}  # "properties"


def _manifest() -> dict:
    data: dict = json.loads(MANIFEST.read_text())
    return data


def test_the_manifest_keeps_the_registry_schemas_rules():
    m = _manifest()
    assert {"id", "name", "version", "description", "distribution"} <= set(m)  # "required"
    assert set(m) <= TOP_KEYS
    assert re.fullmatch(r"[a-z][a-z0-9-]*", m["id"])  # id "pattern"
    assert MANIFEST.parent.name == m["id"]  # the folder is the id (CONTRIBUTING.md)
    assert isinstance(m["name"], str) and m["name"]  # name "minLength": 1
    assert re.match(r"[0-9]+\.[0-9]+\.[0-9]+", m["version"])  # version "pattern"
    assert isinstance(m["description"], str) and m["description"]  # "minLength": 1
    dist = m["distribution"]
    assert dist and set(dist) <= {"binary", "npx", "uvx"}  # minProperties, additionalProperties
    for kind in ("npx", "uvx"):  # packageDistribution
        if kind in dist:
            assert set(dist[kind]) <= {"package", "args", "env"} and dist[kind]["package"]
            assert all(isinstance(a, str) for a in dist[kind].get("args", []))
            assert all(isinstance(v, str) for v in dist[kind].get("env", {}).values())


def test_the_manifest_starts_lily_acp_from_this_package():
    m = _manifest()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert m["version"] == project["version"] and m["license"] == project["license"]["text"]
    package = m["distribution"]["uvx"]["package"]
    name, extras = re.fullmatch(r"([\w-]+)\[([\w,-]+)\]", package).groups()
    assert name == project["name"] and set(extras.split(",")) <= set(
        project["optional-dependencies"])
    # uvx runs the command named as the package: the same entry point as `lily`
    assert project["scripts"][name] == project["scripts"]["lily"]
    assert m["distribution"]["uvx"]["args"] == ["acp"]


def test_the_docs_zed_entry_names_the_manifests_agent_and_command():
    docs = (REPO / "docs" / "front-ends.md").read_text()
    zed = docs[docs.index("### Zed"):]
    block = zed[zed.index("```json") + len("```json"):zed.index("```", zed.index("```json") + 7)]
    servers = json.loads(block)["agent_servers"]
    m = _manifest()
    assert list(servers) == [m["name"]]
    entry = servers[m["name"]]
    assert entry["args"] == m["distribution"]["uvx"]["args"]
    assert Path(entry["command"]).name == "lily"
