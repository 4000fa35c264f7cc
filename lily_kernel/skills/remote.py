"""Skills an MCP server serves: the SEP-2640 entries as a skill root (docs/loader.md#mcp-roots).

A server that declares the extension ``io.modelcontextprotocol/skills`` lists its skills
with ``skills/list``: each entry carries the ``SKILL.md`` URI, its frontmatter as JSON and
a manifest of every file with its SHA-256 digest and size. This module is the skills
layer's side of that, with no ``mcp`` import: :func:`entry` checks one listed entry
(never raises; a bad one carries its ``error``), :class:`RemoteRoot` is one server's
entries as the loader reads them (the root ``mcp:<server>``), :func:`verify` checks a read
file against the manifest (size first, then the digest), :func:`check_frontmatter` the
fetched ``SKILL.md`` against the listed frontmatter, and :func:`resolve` maps a path the
model asks for to a file of the manifest (nothing else is ever read).
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from lily_kernel.skills.frontmatter import MAX_FILE_BYTES

EXTENSION = "io.modelcontextprotocol/skills"
MAX_RESOURCES = 512  # the extension's per-skill limits (hosts must accept up to these)
MAX_TOTAL_BYTES = 16 * 1024 * 1024
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
SOURCE_PREFIX = "mcp:"


def source_of(server: str) -> str:
    """The skill source of an MCP server's root: ``mcp:<server>``."""
    return SOURCE_PREFIX + server


def is_remote(source: str) -> bool:
    """Whether a skill source is an MCP server's."""
    return source.startswith(SOURCE_PREFIX)


@dataclass(frozen=True)
class FileEntry:
    """One file of a skill's manifest."""
    uri: str
    digest: str  # sha256:<64 lower-case hex>
    size: int


@dataclass(frozen=True)
class RemoteSkill:
    """One ``skills/list`` entry, checked: ``error`` says why it cannot be a skill."""
    uri: str
    name: str  # the URI's last skill-path segment (the skill's name by the extension)
    frontmatter: str  # the listed frontmatter as canonical JSON (immutable, hashable)
    files: tuple[FileEntry, ...]
    error: str | None = None

    @property
    def root(self) -> str:
        """The skill's root URI (its SKILL.md URI without ``/SKILL.md``)."""
        return self.uri[: -len("/SKILL.md")]

    def meta(self) -> dict[str, Any]:
        """The listed frontmatter."""
        loaded: dict[str, Any] = json.loads(self.frontmatter)
        return loaded

    def key(self) -> str:
        """What a review binds to: the URI, the frontmatter and every file's digest and size."""
        files = [[f.uri, f.digest, f.size] for f in self.files]
        return hashlib.sha256(json.dumps([self.uri, self.frontmatter, files]).encode()).hexdigest()

    def file(self, uri: str) -> FileEntry | None:
        """The manifest's entry for ``uri``."""
        return next((f for f in self.files if f.uri == uri), None)


@dataclass(frozen=True)
class RemoteRoot:
    """One MCP server's skills as the loader reads them; ``reason`` says why it is empty."""
    server: str
    skills: tuple[RemoteSkill, ...] = ()
    reason: str | None = None

    @property
    def source(self) -> str:
        """The root's skill source, ``mcp:<server>``."""
        return source_of(self.server)


def entry(raw: Any) -> RemoteSkill:
    """A ``skills/list`` entry, checked against the extension's rules and Lily's caps."""
    if not isinstance(raw, Mapping):
        return RemoteSkill("", "", "{}", (), "a skills/list entry that is not an object")
    uri = raw.get("uri")
    fm = raw.get("frontmatter")
    uri = uri if isinstance(uri, str) else ""
    parts = uri.split("/")
    name = parts[-2] if len(parts) >= 2 and parts[-1] == "SKILL.md" else ""
    try:
        fm_json = json.dumps(fm, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        fm_json = "{}"
    skill = RemoteSkill(uri, name or uri or "?", fm_json, ())
    if not name or "://" not in uri:
        return _bad(skill, f"its uri {uri!r} does not end in <skill>/SKILL.md")
    if not isinstance(fm, Mapping):
        return _bad(skill, "its frontmatter is not an object")
    if fm.get("name") != name:
        return _bad(skill, f"its frontmatter name {fm.get('name')!r} is not the last "
                           f"segment of its uri ('{name}')")
    resources = raw.get("resources")
    if resources == "dynamic":
        return _bad(skill, "its resources are 'dynamic': no digests to verify, so Lily "
                           "does not load it")
    if not isinstance(resources, list):
        return _bad(skill, "it has no resources manifest")
    if len(resources) > MAX_RESOURCES:
        return _bad(skill, f"its manifest lists {len(resources)} files (the limit is "
                           f"{MAX_RESOURCES})")
    files = []
    for item in resources:
        if not isinstance(item, Mapping):
            return _bad(skill, "a manifest entry is not an object")
        f_uri, digest, size = item.get("uri"), item.get("digest"), item.get("size")
        if not isinstance(f_uri, str) or not (f_uri == uri or f_uri.startswith(skill.root + "/")):
            return _bad(skill, f"its manifest lists {f_uri!r}, outside the skill")
        if ".." in f_uri[len(skill.root):].split("/"):
            return _bad(skill, f"its manifest lists {f_uri!r}, with a '..' segment")
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            return _bad(skill, f"the digest of {f_uri} is not sha256:<64 hex digits>")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return _bad(skill, f"the size of {f_uri} is not a byte count")
        files.append(FileEntry(f_uri, digest, size))
    files.sort(key=lambda f: f.uri)
    skill = RemoteSkill(uri, name, fm_json, tuple(files))
    if len({f.uri for f in files}) != len(files):
        return _bad(skill, "its manifest lists a file twice")
    md = skill.file(uri)
    if md is None:
        return _bad(skill, "its manifest does not list its SKILL.md")
    if md.size > MAX_FILE_BYTES:
        return _bad(skill, f"its SKILL.md is {md.size:,} bytes; the limit is "
                           f"{MAX_FILE_BYTES:,} (not read)")
    total = sum(f.size for f in files)
    if total > MAX_TOTAL_BYTES:
        return _bad(skill, f"its files total {total:,} bytes (the limit is "
                           f"{MAX_TOTAL_BYTES:,})")
    return skill


#: Why a workspace server's skill is excluded: /trust has not shown it, or it changed since.
UNREVIEWED = "not reviewed yet: /trust shows it (name, digest), then /trust --yes loads it"
CHANGED = "changed since /trust reviewed it (digests or frontmatter); /trust reviews it again"


def record_key(server: str, name: str) -> str:
    """The trust record's key of a workspace server's skill: ``mcp:<server>/<name>`` (its
    value: :meth:`RemoteSkill.key`)."""
    return f"{source_of(server)}/{name}"


def reviewed(server: str, entries: tuple[RemoteSkill, ...],
             record: Mapping[str, str]) -> tuple[RemoteSkill, ...]:
    """A workspace server's entries, each as /trust recorded it (``record``: the trust
    record's skills) or held back: not shown yet (:data:`UNREVIEWED`), or changed since
    (:data:`CHANGED`)."""
    def checked(e: RemoteSkill) -> RemoteSkill:
        was = record.get(record_key(server, e.name))
        if e.error is not None or was == e.key():
            return e
        return held(e, UNREVIEWED if was is None else CHANGED)
    return tuple(checked(e) for e in entries)


def held(skill: RemoteSkill, why: str) -> RemoteSkill:
    """``skill`` excluded for ``why`` (e.g. changed since it was reviewed)."""
    return _bad(skill, why)


def _bad(skill: RemoteSkill, why: str) -> RemoteSkill:
    return RemoteSkill(skill.uri, skill.name, skill.frontmatter, skill.files, why)


def document(skill: RemoteSkill) -> bytes:
    """The listed frontmatter as a SKILL.md without a body: what the loader parses, so an
    MCP skill meets the rules of a folder's (name, keys, eligibility, aliases) before any
    of its files is read (the extension's lazy retrieval)."""
    text = yaml.safe_dump(skill.meta(), sort_keys=True, allow_unicode=True)
    return f"---\n{text}---\n".encode()


def verify(skill: RemoteSkill, uri: str, data: bytes) -> str | None:
    """Why ``data``, read at ``uri``, is not the file the manifest lists (None: it is)."""
    listed = skill.file(uri)
    if listed is None:
        return f"{uri} is not in the skill's manifest"
    if len(data) != listed.size:
        return f"{uri} is {len(data):,} bytes; the manifest says {listed.size:,}"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if digest != listed.digest:
        return f"{uri} does not match its digest in the manifest ({digest[:19]}...)"
    return None


def check_frontmatter(skill: RemoteSkill, meta: Mapping[str, Any]) -> str | None:
    """Why the fetched SKILL.md's frontmatter differs from the listed one (None: equal)."""
    try:
        fetched = json.dumps(meta, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return "its SKILL.md frontmatter cannot be compared with the listing"
    if fetched != skill.frontmatter:
        return "its SKILL.md frontmatter differs from the one skills/list gave"
    return None


def resolve(skill: RemoteSkill, path: str) -> FileEntry | None:
    """The manifest's file at ``path`` (relative to the skill's root; ``references/x.md``
    or ``x.md`` for ``references/x.md``); None for anything the manifest does not list."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts or not parts:
        return None
    for rel in ("/".join(parts), "references/" + "/".join(parts)):
        found = skill.file(f"{skill.root}/{rel}")
        if found is not None:
            return found
    return None
