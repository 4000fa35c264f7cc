"""Workspace trust: whether the user has trusted what this workspace ships.

A workspace can ship configuration that names where secrets go (``lily.toml``'s model
endpoint and outbox), servers that start (``lily.toml``'s ``[mcp.servers]`` and
``.mcp.json``), skills that load and bind aliases (its ``skills/``, ``.agents/skills`` and
``.claude/skills``) and a rules file; a cloned repository must not do any of that on its
own. The user reviews it with ``/trust`` and trusts it with ``/trust --yes``. The record
lives outside every workspace, in the user's data folder (``$LILY_DATA_DIR``, else
``$XDG_DATA_HOME/lily``, else ``~/.local/share/lily``), keyed by the workspace's real path,
with a sha256 over each covered part (:data:`PARTS`): a change to any part asks again, and
:func:`status` names the parts that changed. Writes are atomic (a temporary file renamed
over the record). A record that cannot be read fails closed: every workspace is untrusted
and the reason is one :class:`ConfigError` line. Contract: docs/trust-boundary.md#workspace-trust.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lily_kernel.errors import ConfigError

#: The configuration files trust covers, in the order they are hashed.
TRUSTED_FILES = ("lily.toml", ".mcp.json")
#: The workspace's own skill folders trust covers (docs/loader.md#roots), by their default
#: names: hashed whole, every file and folder under them, symlinks by their target's name.
SKILL_FOLDERS = ("skills", ".agents/skills", ".claude/skills")
#: Every part a trust decision covers, in the order they are hashed and named.
PARTS = (*TRUSTED_FILES, *(f + "/" for f in SKILL_FOLDERS))
RECORD_NAME = "trust.json"
VERSION = 2
#: A record larger than this is not read (it is refused as corrupt, failing closed).
MAX_RECORD_BYTES = 4 * 1024 * 1024
_CHUNK = 1 << 16
#: Settings of lily.toml that decide where a secret is sent: (table, key, the secret, the
#: environment variable that names the user's own choice and so overrides the file).
SECRET_ROUTES: tuple[tuple[str, str, str, str | None], ...] = (
    ("model", "base_url", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    ("activitypub", "outbox", "LILY_OUTBOX_TOKEN", "LILY_OUTBOX_URL"),
)
#: Settings of lily.toml that only the user's own file or a trusted workspace may turn on:
#: (table, key, what it would do).
TRUSTED_ONLY: tuple[tuple[str, str, str], ...] = (
    # the journal would keep the files tools read (a .env's keys), and a replay copies them
    # (docs/logs.md#captured-reads)
    ("journal", "capture_reads", "would copy every file a tool reads into the journal"),
)
HOW_TO_TRUST = "run /trust to review what this workspace ships, then /trust --yes"


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """The user's data folder for Lily: ``$LILY_DATA_DIR``, else ``$XDG_DATA_HOME/lily``,
    else ``~/.local/share/lily``."""
    env = os.environ if env is None else env
    if env.get("LILY_DATA_DIR"):
        return Path(env["LILY_DATA_DIR"]).expanduser()
    if env.get("XDG_DATA_HOME"):
        return Path(env["XDG_DATA_HOME"]).expanduser() / "lily"
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".local" / "share" / "lily"


def trust_file(env: Mapping[str, str] | None = None) -> Path:
    """Where the trust record lives (outside every workspace, in the user's data folder)."""
    return data_dir(env) / RECORD_NAME


def _key(workspace: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(workspace))


def _hash_file(path: Path, follow: bool = False) -> str:
    """``present <sha256>`` of a file's bytes, or ``absent``; a FIFO or device is not read.
    A symlink is hashed by its target's name unless ``follow`` (the top-level files, which
    Lily reads through a symlink)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        if os.path.islink(path):
            return "symlink " + hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest()
        raise ConfigError(f"{path} cannot be read: {exc.strerror or exc}") from None
    inner = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fh.fileno()).st_mode
        if not stat.S_ISREG(mode):
            return f"not a file ({stat.filemode(mode)[0]})"
        while chunk := fh.read(_CHUNK):
            inner.update(chunk)
    return "present " + inner.hexdigest()


def _hash_folder(path: Path) -> str:
    """A sha256 over everything under ``path``: each entry's relative name and kind, a
    file's bytes, a symlink's target's name (not followed: the loader reads a symlink only
    to a folder inside the root, hashed there); ``absent`` when there is none."""
    if not os.path.lexists(path):
        return "absent"
    if not path.is_dir():  # (the folder itself is followed, as the loader follows it)
        return _hash_file(path, follow=True)
    digest = hashlib.sha256(b"folder\0")
    for top, dirs, files in os.walk(path, onerror=_walk_error):
        dirs.sort()
        rel = os.path.relpath(top, path)
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            entry = Path(top, name)
            digest.update(os.fsencode(os.path.join(rel, name)) + b"\0")
            digest.update(_hash_file(entry).encode() + b"\0")
        for name in dirs:
            digest.update(os.fsencode(os.path.join(rel, name)) + b"/\0")
    return "present " + digest.hexdigest()


def _walk_error(exc: OSError) -> None:
    raise ConfigError(f"{exc.filename} cannot be read: {exc.strerror or exc}")


def parts(workspace: str | os.PathLike[str]) -> dict[str, str]:
    """Each part trust covers (:data:`PARTS`) and a hash of what it holds now. A file that
    exists but cannot be read is a ConfigError (it could not be shown to the user either)."""
    root = Path(workspace)
    out = {name: _hash_file(root / name, follow=True) for name in TRUSTED_FILES}
    for folder in SKILL_FOLDERS:
        out[folder + "/"] = _hash_folder(root / folder)
    return out


def _combined(hashes: Mapping[str, str]) -> str:
    digest = hashlib.sha256(b"lily-trust-v2\0")
    for name in PARTS:
        digest.update(f"{name}\0{hashes.get(name, 'absent')}\0".encode())
    return digest.hexdigest()


def fingerprint(workspace: str | os.PathLike[str]) -> str:
    """One sha256 over every part trust covers (:func:`parts`)."""
    return _combined(parts(workspace))


def _load(path: Path) -> dict[str, dict[str, str]]:
    """The record's {real path: {part: hash}}; {} when absent; ConfigError when corrupt.
    A version 1 entry (before skill folders were covered) matches nothing: it asks again."""
    def corrupt(why: str) -> ConfigError:
        return ConfigError(f"the workspace trust record {path} is unreadable ({why}); every "
                           f"workspace counts as untrusted until it is removed or repaired")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise corrupt(exc.strerror or str(exc)) from None
    if len(raw) > MAX_RECORD_BYTES:
        raise corrupt(f"larger than {MAX_RECORD_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise corrupt(f"not JSON: {str(exc)[:80]}") from None
    if not isinstance(data, dict) or data.get("version") not in (1, VERSION):
        raise corrupt(f"not a version {VERSION} record")
    workspaces = data.get("workspaces")
    if not isinstance(workspaces, dict):
        raise corrupt("'workspaces' is not a table")
    out: dict[str, dict[str, str]] = {}
    for key, value in workspaces.items():
        if data["version"] == 1 and isinstance(value, str):
            out[key] = {"(version 1)": value}
        elif isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in value.items()):
            out[key] = dict(value)
        else:
            raise corrupt(f"the entry of {str(key)[:80]!r} is not a table of text")
    return out


def _save(path: Path, workspaces: Mapping[str, Mapping[str, str]]) -> None:
    """Write the record atomically: a private temporary file, fsync'd, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    kept = {k: dict(v) for k, v in sorted(workspaces.items()) if "(version 1)" not in v}
    text = json.dumps({"version": VERSION, "workspaces": kept}, indent=1, ensure_ascii=False)
    fd, tmp = tempfile.mkstemp(prefix=".trust-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock beside the record while it is read, changed and written, so
    two kernels trusting at once do not lose one another's entry (where flock exists)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: the rename alone keeps it whole
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Status:
    """Whether a workspace is trusted as it is now, and if not, what changed since."""

    trusted: bool
    recorded: bool  # the user trusted it once (it may have changed since)
    changed: tuple[str, ...] = ()  # the parts (PARTS) that differ from what was trusted
    fingerprint: str = ""

    def why(self) -> str:
        """Why it is not trusted, in a few words."""
        if self.trusted:
            return "trusted"
        if not self.recorded:
            return "this workspace is not trusted"
        if self.changed == ("(version 1)",):
            return "it was trusted by an older Lily, before trust covered its skill folders"
        return f"{', '.join(self.changed)} changed since it was trusted"


def status(workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Status:
    """Whether the user trusted ``workspace`` as it is now, and which parts changed.
    ConfigError when the record is unreadable (callers treat the workspace as untrusted
    and show the one line)."""
    recorded = _load(trust_file(env)).get(_key(workspace))
    now = parts(workspace)
    fp = _combined(now)
    if recorded is None:
        return Status(False, False, (), fp)
    if "(version 1)" in recorded:
        return Status(False, True, ("(version 1)",), fp)
    changed = tuple(p for p in PARTS if recorded.get(p, "absent") != now[p])
    return Status(not changed, True, changed, fp)


def is_trusted(workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> bool:
    """Whether the user trusted ``workspace`` as what it ships is now.

    ConfigError when the record is unreadable (callers treat the workspace as untrusted
    and show the one line)."""
    return status(workspace, env).trusted


def may_read_rules(workspace: str | os.PathLike[str],
                   env: Mapping[str, str] | None = None) -> bool:
    """The hook for a workspace rules file (``AGENTS.md``, ``CLAUDE.md``): read it into the
    system prompt only when this is True, i.e. the workspace is trusted as it is now. An
    unreadable record means no (docs/trust-boundary.md#workspace-trust)."""
    try:
        return is_trusted(workspace, env)
    except ConfigError:
        return False


def trust(workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None,
          expected: str | None = None) -> None:
    """Record that the user trusts ``workspace`` with what it ships as it is now.

    ``expected``: the fingerprint the user reviewed; when the workspace no longer matches
    it, nothing is recorded and ConfigError names what changed."""
    path = trust_file(env)
    with _locked(path):
        workspaces = _load(path)
        now = parts(workspace)
        if expected is not None and _combined(now) != expected:
            raise ConfigError("what this workspace ships changed since /trust showed it; "
                              "nothing was trusted. Run /trust again to review it")
        workspaces[_key(workspace)] = now
        _save(path, workspaces)


def revoke(workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> None:
    """Forget any trust recorded for ``workspace`` (nothing to do when there is none)."""
    path = trust_file(env)
    with _locked(path):
        workspaces = _load(path)
        if workspaces.pop(_key(workspace), None) is not None:
            _save(path, workspaces)


@dataclass(frozen=True)
class Withheld:
    """A setting of an untrusted lily.toml that is not used: one that would send a secret
    elsewhere, or one only the user's own layers may turn on (``capture_reads``)."""

    table: str
    key: str
    value: str  # as written (shown through redact_urls, never used)
    secret: str  # the environment variable whose value it would receive, or "" (TRUSTED_ONLY)
    effect: str = ""  # what it would do, for a setting that routes no secret

    def describe(self) -> str:
        """``[model] base_url 'https://…'`` with any user:password@ masked."""
        from lily_kernel.redaction import redact_urls
        shown = redact_urls(self.value)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        return f"[{self.table}] {self.key} '{shown}'"

    def consequence(self) -> str:
        """``would receive OPENAI_API_KEY``, or what the setting would do."""
        return f"would receive {self.secret}" if self.secret else self.effect


def withheld(file_config: Mapping[str, Any], env: Mapping[str, str]) -> list[Withheld]:
    """The settings of an *untrusted* ``file_config`` that it may not use: each one a
    workspace could use to receive ``OPENAI_API_KEY`` or ``LILY_OUTBOX_TOKEN`` (a setting the
    environment overrides anyway, ``OPENAI_BASE_URL``, ``LILY_OUTBOX_URL``, has no effect and
    is not listed), and each :data:`TRUSTED_ONLY` setting it turns on."""
    found = []
    for table, key, secret, override in SECRET_ROUTES:
        section = file_config.get(table)
        if not isinstance(section, Mapping) or key not in section:
            continue
        if override and env.get(override):
            continue
        found.append(Withheld(table, key, str(section[key]), secret))
    for table, key, effect in TRUSTED_ONLY:
        section = file_config.get(table)
        # only a value that turns it on: an invalid one stays, to fail as a config error
        if isinstance(section, Mapping) and section.get(key) is True:
            found.append(Withheld(table, key, str(section[key]).lower(), "", effect))
    return found


def without(file_config: Mapping[str, Any], items: list[Withheld]) -> dict[str, Any]:
    """``file_config`` with the ``items`` removed (a copy: the tables are copied too)."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in file_config.items()}
    for item in items:
        out.get(item.table, {}).pop(item.key, None)
    return out


def untrusted_line(items: list[Withheld], problem: str | None = None) -> str:
    """The one line saying which settings are not used, why, and how to trust the workspace."""
    names = "; ".join(f"{i.describe()} ({i.consequence()})" for i in items)
    why = problem or "this workspace is not trusted"
    return f"lily.toml {names} not used: {why}; {HOW_TO_TRUST}."
