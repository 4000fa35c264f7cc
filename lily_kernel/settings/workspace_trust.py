"""Workspace trust: whether the user has trusted what this workspace ships.

A workspace can ship configuration that names where secrets go (``lily.toml``'s model
endpoint and outbox), servers that start (``lily.toml``'s ``[mcp.servers]`` and
``.mcp.json``), skills that load and bind aliases (its ``skills/``, ``.agents/skills`` and
``.claude/skills``) and a rules file; a cloned repository must not do any of that on its
own. The user reviews it with ``/trust`` and trusts it with ``/trust --yes``. The record
lives outside every workspace, in the user's data folder (``$LILY_DATA_DIR``, else
``$XDG_DATA_HOME/lily``, else ``~/.local/share/lily``), keyed by the workspace's real path.

What a change must review again is decided by what it can do
(docs/trust-boundary.md#what-asks-again): each configuration file (:data:`TRUSTED_FILES`:
every setting in them starts a process, reaches a network or sets policy) is kept as a
sha256 of its bytes, and any change to it asks again (:func:`status` names it). Each skill
of the workspace's own folders is kept as what it can do and what it says (the skills
layer computes both, ``skills/untrusted.py``): a skill that gains a way to act without the
model (``tool_dispatch``, an alias, a typed declaration) is held back by the loader until
``/trust``; its text reloads. Writes are atomic (a temporary file renamed over the record).
A record that cannot be read fails closed: every workspace is untrusted and the reason is
one :class:`ConfigError` line. Contract: docs/trust-boundary.md#workspace-trust.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lily_kernel.errors import ConfigError

#: The configuration files trust covers, in the order they are hashed: any change asks again.
TRUSTED_FILES = ("lily.toml", ".mcp.json")
#: The parts a change of which makes the workspace's configuration untrusted, in order.
PARTS = TRUSTED_FILES
#: The record's key prefix of a skill's entry (``skill workspace/name``: ``CAPS TEXT``, two
#: digests the skills layer computes: what the skill can do, and its whole text).
SKILL_KEY = "skill "
#: The capability digest of a skill that only instructs the model (no dispatch, no alias, no
#: typed declaration; skills/untrusted.py's TEXT_ONLY): left out of the fingerprint.
TEXT_ONLY = "text"
RECORD_NAME = "trust.json"
VERSION = 3
#: A record larger than this is not read (it is refused as corrupt, failing closed). A skill
#: takes about 60 bytes in it: a workspace of 10,000 skills about 600 KB.
MAX_RECORD_BYTES = 64 * 1024 * 1024
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


def parts(workspace: str | os.PathLike[str]) -> dict[str, str]:
    """Each part trust covers (:data:`PARTS`) and a hash of what it holds now. A file that
    exists but cannot be read is a ConfigError (it could not be shown to the user either)."""
    root = Path(workspace)
    return {name: _hash_file(root / name, follow=True) for name in TRUSTED_FILES}


def _combined(hashes: Mapping[str, str], skills: Mapping[str, str]) -> str:
    """One sha256 over the configuration files and what each skill that can act without the
    model can do (a skill's text is not part of it: a text change needs no review)."""
    digest = hashlib.sha256(b"lily-trust-v3\0")
    for name in PARTS:
        digest.update(f"{name}\0{hashes.get(name, 'absent')}\0".encode())
    for key in sorted(skills):
        caps = skills[key].split(" ")[0]
        if caps != TEXT_ONLY:
            digest.update(f"{SKILL_KEY}{key}\0{caps}\0".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def fingerprint(workspace: str | os.PathLike[str],
                skills: Mapping[str, str] | None = None) -> str:
    """One sha256 over every configuration file (:func:`parts`) and what each of the
    workspace's skills can do (``skills``: ``source/name`` -> ``CAPS TEXT``, computed by the
    skills layer; none: no skill)."""
    return _combined(parts(workspace), skills or {})


#: The last record read, by path: (its stat signature, what it held). A reload asks the record
#: every time; a record of 10,000 skills is read and decoded again only when it changed.
_READ: dict[Path, tuple[tuple[int, ...], dict[str, dict[str, str]]]] = {}
_SETTLED_NS = 2_000_000_000  # as the skill cache: a record changed this recently is not kept


def _load(path: Path) -> dict[str, dict[str, str]]:
    """The record's {real path: {part: hash}}; {} when absent; ConfigError when corrupt.
    A version 1 entry (before skill folders were covered) matches nothing: it asks again.
    The answer is shared while the file is unchanged: callers copy before changing it."""
    try:
        st = os.stat(path)
    except OSError:
        st = None
    sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) if st else ()
    kept = _READ.get(path)
    if kept is not None and sig and kept[0] == sig:
        return kept[1]
    out = _read_record(path)
    settled = time.time_ns() - _SETTLED_NS
    if st is not None and st.st_mtime_ns < settled and st.st_ctime_ns < settled:
        _READ[path] = (sig, out)
    return out


def _read_record(path: Path) -> dict[str, dict[str, str]]:
    """:func:`_load` without the cache."""
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
    if not isinstance(data, dict) or data.get("version") not in (1, 2, VERSION):
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
    """Whether a workspace's configuration is trusted as it is now, what changed since, and
    what each of its skills could do and said when it was trusted."""

    trusted: bool  # trusted once, and no configuration file (PARTS) changed since
    recorded: bool  # the user trusted it once (it may have changed since)
    changed: tuple[str, ...] = ()  # the parts (PARTS) that differ from what was trusted
    #: ``source/name`` -> ``CAPS TEXT`` of each skill of its own folders, as trusted
    skills: Mapping[str, str] = field(default_factory=dict)

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
    """Whether the user trusted ``workspace``'s configuration as it is now, which parts
    changed, and what its skills were when trusted (the loader holds back a skill that can
    do more now). ConfigError when the record is unreadable (callers treat the workspace as
    untrusted and show the one line)."""
    recorded = _load(trust_file(env)).get(_key(workspace))
    if recorded is None:
        return Status(False, False)
    if "(version 1)" in recorded:
        return Status(False, True, ("(version 1)",))
    now = parts(workspace)
    changed = tuple(p for p in PARTS if recorded.get(p, "absent") != now[p])
    return Status(not changed, True, changed, _skills_of(recorded))


#: The skills of the last record entry asked, by the entry (the same object while the record
#: is unchanged, :func:`_load`): the same mapping then, which the loader's checks are kept for.
_SKILLS: list[tuple[Mapping[str, str], Mapping[str, str]]] = []


def _skills_of(recorded: Mapping[str, str]) -> Mapping[str, str]:
    """``source/name`` -> ``CAPS TEXT`` of a record entry's skills (read-only, shared)."""
    if _SKILLS and _SKILLS[0][0] is recorded:
        return _SKILLS[0][1]
    n = len(SKILL_KEY)
    skills = MappingProxyType({k[n:]: v for k, v in recorded.items() if k.startswith(SKILL_KEY)})
    _SKILLS[:] = [(recorded, skills)]
    return skills


def is_trusted(workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> bool:
    """Whether the user trusted ``workspace``'s configuration as it is now.

    ConfigError when the record is unreadable (callers treat the workspace as untrusted
    and show the one line)."""
    return status(workspace, env).trusted


def may_read_rules(workspace: str | os.PathLike[str],
                   env: Mapping[str, str] | None = None) -> bool:
    """The hook for a workspace rules file (``AGENTS.md``, ``CLAUDE.md``): read it into the
    system prompt only when this is True, i.e. the user trusted the workspace (a rules file
    is text, instructions to the model like a skill's body: a change to it, or to another
    part, does not stop it being read). An unreadable record, or one of Lily before
    version 2, means no (docs/trust-boundary.md#what-asks-again)."""
    try:
        found = status(workspace, env)
    except ConfigError:
        return False
    return found.recorded and found.changed != ("(version 1)",)


def trust(workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None,
          expected: str | None = None, skills: Mapping[str, str] | None = None) -> None:
    """Record that the user trusts ``workspace`` with what it ships as it is now.

    ``skills``: ``source/name`` -> ``CAPS TEXT`` of each skill of its own folders now (the
    skills layer reads them, ``skills/untrusted.py``); none: no skill can act without the
    model. ``expected``: the fingerprint the user reviewed; when the workspace no longer
    matches it, nothing is recorded and ConfigError names what changed."""
    path = trust_file(env)
    skills = dict(skills or {})
    with _locked(path):
        workspaces = dict(_load(path))
        now = parts(workspace)
        if expected is not None and _combined(now, skills) != expected:
            raise ConfigError("what this workspace ships changed since /trust showed it; "
                              "nothing was trusted. Run /trust again to review it")
        workspaces[_key(workspace)] = {**now, **{SKILL_KEY + k: v for k, v in skills.items()}}
        _save(path, workspaces)


def revoke(workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> None:
    """Forget any trust recorded for ``workspace`` (nothing to do when there is none)."""
    path = trust_file(env)
    with _locked(path):
        workspaces = dict(_load(path))
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
