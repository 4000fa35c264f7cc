"""Workspace trust: whether the user has trusted this workspace's ``lily.toml`` and ``.mcp.json``.

A workspace's configuration can name where secrets go (the model endpoint, the outbox) and
which servers start; a cloned repository must not do that on its own. The user trusts a
workspace with ``/trust``. The record lives outside every workspace, in the user's data
folder (``$LILY_DATA_DIR``, else ``$XDG_DATA_HOME/lily``, else ``~/.local/share/lily``), keyed
by the workspace's real path and a sha256 over its ``lily.toml`` and ``.mcp.json``: editing
either file (or creating or deleting one) asks again. Writes are atomic (a temporary file
renamed over the record). A record that cannot be read fails closed: every workspace is
untrusted and the reason is one :class:`ConfigError` line. Contract:
docs/trust-boundary.md#workspace-trust.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lily_kernel.errors import ConfigError

#: The files whose contents trust is granted for, in the order they are hashed.
TRUSTED_FILES = ("lily.toml", ".mcp.json")
RECORD_NAME = "trust.json"
VERSION = 1
#: A record larger than this is not read (it is refused as corrupt, failing closed).
MAX_RECORD_BYTES = 4 * 1024 * 1024
_CHUNK = 1 << 16
#: Settings of lily.toml that decide where a secret is sent: (table, key, the secret, the
#: environment variable that names the user's own choice and so overrides the file).
SECRET_ROUTES: tuple[tuple[str, str, str, str | None], ...] = (
    ("model", "base_url", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    ("activitypub", "outbox", "LILY_OUTBOX_TOKEN", "LILY_OUTBOX_URL"),
    # the journal would keep the files tools read (a .env's keys), and a replay copies them
    # (docs/logs.md#captured-reads): the user's own lily.toml may turn it on, a workspace's
    # only once trusted
    ("journal", "capture_reads", "the content of every file a tool reads", None),
)
HOW_TO_TRUST = "run /trust to review this workspace's lily.toml and trust it"


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


def fingerprint(workspace: str | os.PathLike[str]) -> str:
    """A sha256 over the workspace's ``lily.toml`` and ``.mcp.json``, whichever exist.

    Each file contributes its name, whether it exists and its bytes, so creating, deleting
    or editing either one changes the fingerprint. A file that exists but cannot be read
    is a ConfigError (it could not be shown to the user either).
    """
    digest = hashlib.sha256(b"lily-trust-v1\0")
    root = Path(workspace)
    for name in TRUSTED_FILES:
        path = root / name
        digest.update(name.encode() + b"\0")
        inner = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                while chunk := fh.read(_CHUNK):
                    inner.update(chunk)
        except FileNotFoundError:
            digest.update(b"absent\0")
            continue
        except OSError as exc:
            raise ConfigError(f"{path} cannot be read: {exc.strerror or exc}") from None
        digest.update(b"present\0" + inner.hexdigest().encode() + b"\0")
    return digest.hexdigest()


def _load(path: Path) -> dict[str, str]:
    """The record's {real path: fingerprint}; {} when absent; ConfigError when corrupt."""
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
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise corrupt(f"not a version {VERSION} record")
    workspaces = data.get("workspaces")
    if not isinstance(workspaces, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in workspaces.items()):
        raise corrupt("'workspaces' is not a table of text")
    return dict(workspaces)


def _save(path: Path, workspaces: Mapping[str, str]) -> None:
    """Write the record atomically: a private temporary file, fsync'd, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = json.dumps({"version": VERSION, "workspaces": dict(sorted(workspaces.items()))},
                      indent=1, ensure_ascii=False)
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


def is_trusted(workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> bool:
    """Whether the user trusted ``workspace`` as its configuration files are now.

    ConfigError when the record is unreadable (callers treat the workspace as untrusted
    and show the one line).
    """
    recorded = _load(trust_file(env)).get(_key(workspace))
    return recorded is not None and recorded == fingerprint(workspace)


def trust(workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> None:
    """Record that the user trusts ``workspace`` with its configuration files as they are now."""
    path = trust_file(env)
    with _locked(path):
        workspaces = _load(path)
        workspaces[_key(workspace)] = fingerprint(workspace)
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
    """A setting of an untrusted lily.toml that would send a secret elsewhere: not used."""

    table: str
    key: str
    value: str  # as written (shown through redact_urls, never used)
    secret: str  # the environment variable whose value it would receive

    def describe(self) -> str:
        """``[model] base_url 'https://…'`` with any user:password@ masked."""
        from lily_kernel.redaction import redact_urls
        shown = redact_urls(self.value)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        return f"[{self.table}] {self.key} '{shown}'"


def withheld(file_config: Mapping[str, Any], env: Mapping[str, str]) -> list[Withheld]:
    """The settings of an *untrusted* ``file_config`` that would route a secret: each one a
    workspace could use to receive ``OPENAI_API_KEY`` or ``LILY_OUTBOX_TOKEN``. A setting the
    environment overrides anyway (``OPENAI_BASE_URL``, ``LILY_OUTBOX_URL``) has no effect and
    is not listed."""
    found = []
    for table, key, secret, override in SECRET_ROUTES:
        section = file_config.get(table)
        if not isinstance(section, Mapping) or key not in section:
            continue
        if override and env.get(override):
            continue
        if table == "journal" and section[key] is not True:  # off (or invalid) withholds nothing
            continue
        found.append(Withheld(table, key, str(section[key]), secret))
    return found


def without(file_config: Mapping[str, Any], items: list[Withheld]) -> dict[str, Any]:
    """``file_config`` with the ``items`` removed (a copy: the tables are copied too)."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in file_config.items()}
    for item in items:
        out.get(item.table, {}).pop(item.key, None)
    return out


def untrusted_line(items: list[Withheld], problem: str | None = None) -> str:
    """The one line saying which settings are not used, why, and how to trust the workspace."""
    names = "; ".join(f"{i.describe()} (would receive {i.secret})" for i in items)
    why = problem or "this workspace is not trusted"
    return f"lily.toml {names} not used: {why}; {HOW_TO_TRUST}."
