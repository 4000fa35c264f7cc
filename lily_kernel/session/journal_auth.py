"""Which journals Lily wrote for this user: the per-user key and :func:`authenticity`.

A journal is data from outside until Lily proves it wrote it (docs/logs.md#authenticity).
Every record Lily writes carries ``kid`` (which key) and, last, ``mac``: an HMAC-SHA256
with the user's journal key over the record's line as written up to its ``mac``, ``prev``
and ``kid`` included (:func:`line_mark`), so whoever lacks the key can neither write a
record nor re-link an edited chain. A reader marks each record as it reads its line
(:func:`mark`, the ``_mark`` reader key); :func:`check_records` reads those marks.
The key is 32 random bytes in the user's data folder (``$LILY_DATA_DIR``, else
``$XDG_DATA_HOME/lily``, else ``~/.local/share/lily``: outside every workspace), mode
0600, created on first use atomically (a temporary file linked into place, so two kernels
starting at once agree on one key).

:func:`authenticity` is the one check every reader that acts on a journal calls (resume
at kernel start, ``/rewind`` and ``/fork`` through it, ``lily acp`` ``session/load``):
:class:`Authentic` with the records it verified (use those, not a second read), or
:class:`Foreign` with why. A foreign journal can still be shown, searched, exported and
replayed, marked as foreign (``lily logs``), never resumed.
"""
from __future__ import annotations

import enum
import hmac
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lily_kernel.errors import ConfigError
from lily_kernel.session.journal import KID_KEY, MAC_KEY, JournalKey, verify_chain
from lily_kernel.settings import workspace_trust

KEY_NAME = "journal.key"
_KEY_BYTES = 32


def key_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the user's journal key lives (outside every workspace)."""
    return workspace_trust.data_dir(env) / KEY_NAME


def load_key(env: Mapping[str, str] | None = None, create: bool = False) -> JournalKey | None:
    """The user's journal key; None when there is none yet and ``create`` is False.
    ``create``: make it on first use (mode 0600, atomically). ConfigError when the file is not
    the user's own private regular file, or cannot be read or written."""
    path = key_path(env)
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".journal-key-", dir=path.parent)
        try:
            os.write(fd, secrets.token_hex(_KEY_BYTES).encode("ascii") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # fails if another process made the key meanwhile: use theirs
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
        return _read_key(path)
    except OSError as exc:
        raise ConfigError(f"the journal key {path} cannot be made: {exc.strerror or exc}") from None


def _read_key(path: Path) -> JournalKey:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"the journal key {path} is not a regular file")
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise ConfigError(f"the journal key {path} belongs to another user")
        if info.st_mode & 0o077:
            raise ConfigError(f"the journal key {path} is readable or writable by others "
                            f"(mode {stat.S_IMODE(info.st_mode):o}); chmod 600 it")
        text = os.read(fd, 4096).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) != _KEY_BYTES:
        raise ConfigError(f"the journal key {path} is damaged; delete it (journals written "
                        "with it become foreign)")
    return JournalKey.of(secret)


class Why(enum.Enum):
    """Why a journal is foreign."""

    NO_KEY = "this user has no journal key yet, so Lily wrote no journal here for you"
    KEY_PROBLEM = "the journal key cannot be read"
    UNKEYED = ("its records carry no mark of Lily's key (written before journals were keyed, "
               "by hand, or by another program)")
    OTHER_KEY = "it was written with another journal key (another user's or machine's)"
    EDITED = "a record was changed after Lily wrote it"
    CHAIN = "its records were deleted, inserted or reordered"
    UNTRUSTED = "it lies in a workspace you have not trusted"
    UNREADABLE = "it cannot be read"


@dataclass(frozen=True)
class Authentic:
    """A journal Lily wrote for this user: the session it would resume (None: it holds no
    session) and the records verified, in file order (each with ``_file`` and ``_line``):
    that session's and its parents' (the sessions it resumed or forked from)."""

    records: tuple[dict[str, Any], ...]
    session_id: str | None = None


@dataclass(frozen=True)
class Foreign:
    """A journal Lily cannot prove it wrote for this user: why, and where if known."""

    why: Why
    where: str = ""

    @property
    def reason(self) -> str:
        """Why, in one sentence without the ``Error:``."""
        return self.why.value + (f" ({self.where})" if self.where else "")

    def error(self, what: str = "the conversation") -> str:
        """The one ``Error:`` line a face shows when it refuses to resume it: why, and
        what the user can do."""
        return (f"Error: {what} was not resumed: the journal is foreign: {self.reason}; "
                f"it starts fresh ({_NEXT.get(self.why, _SHOWN)}; docs/logs.md#authenticity).")


_SHOWN = "`lily logs` still shows the old one"
#: What the user can do, per reason, after the Error line (else: read it with lily logs).
_NEXT = {Why.UNTRUSTED: "review the workspace with /trust, then restart the kernel to resume",
         Why.KEY_PROBLEM: "fix the key as said, then restart the kernel to resume"}


Authenticity = Authentic | Foreign


_TAIL = len(',"mac":"') + 64 + len('"}')  # a marked line's end: its mac and the brace


def line_mark(raw: bytes, record: Mapping[str, Any], key: JournalKey) -> str:
    """Whether the journal line ``raw`` (as read, without its newline; ``record``: it
    parsed) carries ``key``'s mark: ``""`` when it does, else the name of the :class:`Why`.
    The HMAC covers the line byte for byte up to its ``mac``, ``kid`` included, so any
    change to the line shows (written again in another JSON layout too)."""
    if MAC_KEY not in record:
        return Why.UNKEYED.name
    if record.get(KID_KEY) != key.kid:
        return Why.OTHER_KEY.name
    head, tail = raw[:-_TAIL], raw[-_TAIL:]
    if not (tail.startswith(b',"' + MAC_KEY.encode() + b'":"') and tail.endswith(b'"}')
            and head.endswith(f',"{KID_KEY}":"{key.kid}"'.encode("ascii"))):
        return Why.EDITED.name
    tag = tail[len(',"mac":"'):-2].decode("ascii", "replace")
    return "" if hmac.compare_digest(tag, key.mac(head)) else Why.EDITED.name


def mark(record: dict[str, Any], raw: bytes, key: JournalKey | None) -> None:
    """Set the reader's ``_mark`` of ``record`` read from the line ``raw`` (what
    :func:`check_records` reads); without a key, every line is unmarked."""
    record[MARK] = line_mark(raw, record, key) if key is not None else Why.NO_KEY.name


MARK = "_mark"  # the reader's verdict on a record's line (journal.READER_KEYS)


def check_records(records: Iterable[dict[str, Any]], key: JournalKey | None,
                  chain: bool = True) -> Authenticity:
    """Whether every record (each with ``_file``/``_line`` and ``_mark`` as the reader
    sets them: :func:`mark`) was written by Lily with ``key``, and (``chain``) each
    session's chain holds. A record no reader marked is unkeyed."""
    every = list(records)
    if key is None:
        return Foreign(Why.NO_KEY)
    by_session: dict[str, list[dict[str, Any]]] = {}
    for record in every:
        where = f"{record.get('_file', '?')}:{record.get('_line', '?')}"
        verdict = record.get(MARK, Why.UNKEYED.name)
        if verdict:
            return Foreign(Why[verdict] if verdict in Why.__members__ else Why.UNKEYED, where)
        by_session.setdefault(str(record.get("session_id")), []).append(record)
    for own in by_session.values() if chain else ():
        broken = verify_chain(own)
        if broken is not None:
            return Foreign(Why.CHAIN, broken)
    return Authentic(tuple(every), None)


def workspace_of(path: Path) -> Path | None:
    """The workspace a journal file ``<workspace>/.lily/journal/...`` lies in, or None."""
    for parent in Path(path).parents:
        if parent.name == "journal" and parent.parent.name == ".lily":
            return parent.parent.parent
    return None


def untrusted_workspace(workspace: Path, env: Mapping[str, str] | None) -> bool:
    """Whether ``workspace`` ships something that waits for ``/trust`` — its ``lily.toml``
    or ``.mcp.json``, or a skill in a skill folder of its own no variable names (as the
    session holds them back: skills/paths.untrusted_roots) — and the user has not trusted
    it as it is now (an unreadable trust record: untrusted). A folder that ships none of it has
    nothing to distrust (docs/logs.md#authenticity)."""
    from lily_kernel.skills.paths import skill_roots, untrusted_roots
    try:
        roots = skill_roots(env, workspace)
        gated = untrusted_roots(roots)  # an empty skills/ folder ships no skill
        ships = any((workspace / name).exists() for name in workspace_trust.TRUSTED_FILES) \
            or any(next(r.path.glob("*/SKILL.md"), None) is not None
                   for r in roots if r.source in gated)
        return ships and not workspace_trust.is_trusted(workspace, env)
    except (OSError, ConfigError):  # an unreadable record or folder fails closed
        return True


def _records(path: Path, key: JournalKey | None) -> list[dict[str, Any]]:
    """The records of one journal file as ``lily logs`` reads them (each with ``_file`` and
    ``_line``; a line that is not a JSON object with a session id is skipped, as a torn
    line a crash left is)."""
    out = []
    lines = path.read_bytes().split(b"\n")
    lines.pop()  # b"" after the last newline, or a line still being written
    for number, raw in enumerate(lines, 1):
        try:
            record = json.loads(raw) if raw.strip() else None
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("session_id"), str) \
                and record["session_id"]:
            record["_file"], record["_line"] = path.name, number
            mark(record, raw, key)
            out.append(record)
    return out


def authenticity(path: Path, env: Mapping[str, str] | None = None) -> Authenticity:
    """Whether the journal file ``path`` holds a conversation Lily wrote for this user (the
    key of ``env``'s data folder): the last session started in it and every session it
    resumed or forked from, each record with a valid MAC of this user's key, each chain
    whole, and the file not in an untrusted workspace. The one check before a journal is
    acted on (resume at kernel start, ``session/load``); a missing file is foreign
    (UNREADABLE). Sessions of the file that the last one does not descend from are not
    its history and are not checked (a foreign one is marked by ``lily logs``); a forged
    session appended last is the one checked, so it is refused."""
    workspace = workspace_of(path)
    if workspace is not None and untrusted_workspace(workspace, env):
        return Foreign(Why.UNTRUSTED, str(workspace))
    try:
        key = load_key(env)
    except ConfigError as exc:
        return Foreign(Why.KEY_PROBLEM, str(exc))
    if not path.is_file():
        return Foreign(Why.UNREADABLE, path.name)
    try:
        records = _records(path, key)
    except OSError as exc:
        return Foreign(Why.UNREADABLE, f"{path.name}: {exc.strerror or exc}")
    from lily_kernel.session.resume import MAX_PARENTS, latest_session
    last = latest_session(records)
    if last is None:
        return Authentic((), None)
    by_session: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_session.setdefault(str(record.get("session_id")), []).append(record)
    lineage: list[str] = []
    current: str | None = last
    while current is not None and current in by_session and current not in lineage \
            and len(lineage) < MAX_PARENTS:
        lineage.append(current)
        created = next((r for r in by_session[current]
                        if r.get("event") == "session_created"), {})
        parent = created.get("resumed_from") or created.get("forked_from")
        current = parent if isinstance(parent, str) else None
    checked = check_records([r for r in records if r.get("session_id") in lineage], key)
    if isinstance(checked, Foreign):
        return checked
    return Authentic(checked.records, last)
