"""Reading a damaged, old or odd journal: each problem is one line, never a traceback, and
reading never writes to the journal (docs/logs.md#reading-is-tolerant)."""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from lily_kernel.cli import main
from lily_kernel.session import logs, logs_index
from lily_kernel.session.journal import Journal, journal_path, read, record_hash
from lily_kernel.settings import workspace_trust

SID = "a" * 32


def record(event: str, sid: str | None = SID, **fields) -> dict:
    out = {"t": time.time(), "event": event, **fields}
    if sid is not None:
        out["session_id"] = sid
    return out


def write(path: Path, *records: dict, tail: bytes = b"", chain: bool = True) -> None:
    """Append ``records``, each linked to its session's record before it in this file as
    the journal links them (``chain=False``: as an older Lily wrote them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    last: dict[object, str] = {}
    for old in (read(path) if path.exists() else ()):
        last[old.get("session_id")] = record_hash(old)
    with open(path, "ab") as fh:
        for r in records:
            if chain and isinstance(r, dict) and "session_id" in r:
                r = {"prev": last.get(r["session_id"]), **r}
                last[r["session_id"]] = record_hash(r)
            fh.write((json.dumps(r) + "\n").encode())
        fh.write(tail)


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def lily(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["logs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def ws(tmp_path) -> Path:
    return tmp_path / "ws"


def test_a_torn_last_line_is_skipped_with_one_line(ws, capsys):
    path = ws / ".lily" / "journal" / "s.jsonl"
    write(path, record("session_created", label="s"), record("prose", text="hello"),
          tail=b'{"t": 1, "event": "prose", "session_id": "' + SID.encode() + b'", "te')
    code, out, err = lily(capsys, "show", SID[:6], "--workspace", str(ws))
    assert code == 0 and "hello" in out
    assert err.strip().splitlines() == ["lily logs: s.jsonl:3: torn last line (a crash "
                                        "mid-write), skipped"]


def test_a_record_over_the_cap_is_kept_as_a_marker(ws, capsys):
    path = ws / ".lily" / "journal" / "s.jsonl"
    journal = Journal(path, max_bytes=400, env={})
    journal.append(record("session_created", label="s"))
    journal.append(record("prose", text="x" * 5000))
    code, out, err = lily(capsys, "show", SID, "--workspace", str(ws))
    assert code == 0 and "prose cut at the journal cap" in out
    assert len(err.strip().splitlines()) == 1 and "cut at the 400-byte cap" in err


def test_an_older_journal_without_prose_or_usage_records_is_read(ws, capsys):
    path = ws / ".lily" / "journal" / "old.jsonl"
    write(path, {"t": 1700000000.0, "event": "session_created", "session_id": SID,
                 "label": None, "model_config": {"model": "gpt-4o-mini"}},
          {"t": 1700000001.0, "event": "message", "session_id": SID,
           "message": {"role": "user", "content": "What is a skill?"}},
          {"t": 1700000002.0, "event": "message", "session_id": SID,
           "message": {"role": "assistant", "content": "A folder."}},
          {"event": "command", "session_id": SID, "command": "/skills", "ok": True})  # no "t"
    code, out, err = lily(capsys, "--workspace", str(ws), "--json")
    row = json.loads(out)[0]
    assert code == 0 and err == ""
    assert (row["label"], row["requests"], row["tokens_in"], row["models"]) == (
        "old", 1, None, ["gpt-4o-mini"])
    _, out, _ = lily(capsys, "show", SID, "--workspace", str(ws))
    assert "What is a skill?" in out and "A folder." in out and "/skills" in out


def test_records_without_a_session_id_and_foreign_lines_are_skipped(ws, capsys):
    path = ws / ".lily" / "journal" / "nested" / "kernel-1234"  # any name, any depth
    write(path, record("prose", sid=None, text="orphan"), record("prose", text="kept"))
    with open(path, "ab") as fh:
        fh.write(b"not json at all\n[1, 2]\n")
    write(path, record("prose", text="after"))
    code, out, err = lily(capsys, "show", SID, "--workspace", str(ws))
    assert code == 0 and "kept" in out and "after" in out and "orphan" not in out
    assert err.strip().splitlines() == [
        "lily logs: kernel-1234:1: record without a session id, skipped",
        "lily logs: kernel-1234:3: not a JSON record, skipped",
        "lily logs: kernel-1234:4: not a JSON object, skipped"]
    code, out, err = lily(capsys, "--workspace", str(ws), "-q", "after", "--json")
    assert code == 0 and [h["snippet"] for h in json.loads(out)] == ["[after]"]


def test_one_session_across_several_files_is_one_time_line(ws):
    folder = ws / ".lily" / "journal"
    now = time.time()
    write(folder / "k1.jsonl", {**record("prose", text="first"), "t": now},
          {**record("prose", text="third"), "t": now + 2})
    write(folder / "k2.jsonl", {**record("prose", text="second"), "t": now + 1})
    read = logs.Logs(ws)
    assert [t.text for t in logs.turns(read.records(SID))] == ["first", "second", "third"]
    assert read.sessions()[0].files == ["k1.jsonl", "k2.jsonl"]


def test_reading_never_writes_to_the_journal(ws, capsys, tmp_path):
    folder = ws / ".lily" / "journal"
    write(folder / "s.jsonl", record("session_created", label="s"), record("prose", text="hi"),
          tail=b'{"torn')
    before = digest(folder)
    for argv in (["--workspace", str(ws)], ["show", SID, "--workspace", str(ws)],
                 ["-q", "hi", "--workspace", str(ws)], ["usage", "--workspace", str(ws)],
                 ["export", SID, "--workspace", str(ws), "--md", str(tmp_path / "x.md")]):
        assert lily(capsys, *argv)[0] == 0
    assert digest(folder) == before


def test_no_journal_and_unknown_sessions_are_one_error_line(ws, capsys):
    code, out, err = lily(capsys, "--workspace", str(ws))
    assert code == 0 and "id" in out and err == ""
    code, _, err = lily(capsys, "show", "nope", "--workspace", str(ws))
    assert code == 1 and err.count("\n") == 1 and err.startswith("Error: no session 'nope'")
    write(ws / ".lily" / "journal" / "a.jsonl", record("prose", sid="ab" + "1" * 30, text="x"),
          record("prose", sid="ab" + "2" * 30, text="y"))
    code, _, err = lily(capsys, "show", "ab", "--workspace", str(ws))
    assert code == 1 and "matches 2 sessions" in err
    code, _, err = lily(capsys, "--workspace", str(ws), "-q", "x", "--since", "yesterday")
    assert code == 1 and err.startswith("Error: 'yesterday' is neither a date")


def test_the_index_catches_up_with_appends_and_rebuilds_a_replaced_file(ws):
    path = ws / ".lily" / "journal" / "s.jsonl"
    write(path, record("prose", text="alpha"))
    assert [h.kind for h in logs_index.search(ws, "alpha")] == ["prose"]
    write(path, record("prose", text="beta"), tail=b'{"t": 1, "event": "prose", "ga')
    assert len(logs_index.search(ws, "beta")) == 1  # the half-written line waits
    with open(path, "ab") as fh:
        fh.write(b'mma": 1, "session_id": "' + SID.encode() + b'", "text": "gamma"}\n')
    assert len(logs_index.search(ws, "gamma")) == 1
    path.unlink()
    write(path, record("prose", text="delta"))  # a new file under the same name
    assert logs_index.search(ws, "alpha") == [] and len(logs_index.search(ws, "delta")) == 1
    logs_index.forget(ws)
    assert len(logs_index.search(ws, "delta")) == 1  # rebuilt from the journal


def test_an_unwritable_index_falls_back_to_memory_with_a_note(ws):
    write(ws / ".lily" / "journal" / "s.jsonl", record("prose", text="alpha"))
    (ws / ".lily" / logs_index.INDEX_NAME).mkdir()  # not a database
    notes = logs.Notes()
    assert len(logs_index.search(ws, "alpha", notes)) == 1
    assert len(notes.all()) == 1 and "searching without it" in notes.all()[0]


def test_capture_reads_journals_each_file_a_tool_reads_once(tmp_path):
    from lily_kernel.session.session import Session
    ws = tmp_path / "ws"
    ws.mkdir()
    # the user's own choice: an untrusted workspace may only restrict (docs/permissions.md)
    (tmp_path / ".config" / "lily").mkdir(parents=True)
    (tmp_path / ".config" / "lily" / "lily.toml").write_text("[journal]\ncapture_reads = true\n")
    (ws / "a.txt").write_text("hello\n")
    (ws / "b.bin").write_bytes(b"\xff\x00")
    (tmp_path / "u").mkdir()
    env = {"HOME": str(tmp_path), "SKILLS_USER_DIR": str(tmp_path / "u")}
    workspace_trust.trust(ws, env)  # a workspace's capture_reads counts once trusted
    session = Session(ws, env=env, label="cap")
    session.tools.get("read")(path="a.txt")
    session.tools.get("read")(path="a.txt")
    session.files.read_bytes_of("b.bin")
    reads = [r for r in logs.read_file(journal_path(ws, "cap"), logs.Notes())
             if r["event"] == "file_read"]
    digest = hashlib.sha256(b"\xff\x00").hexdigest()
    assert [(r["path"], r.get("text"), r.get("binary"), r.get("base64")) for r in reads] == [
        ("a.txt", "hello\n", None, None),
        ("b.bin", None, f"binary, 2 bytes, sha256 {digest}", None)]  # never its bytes
    (ws / "lily.toml").write_text("[journal]\ncapture_reads = 1\n")
    assert "capture_reads must be true or false" in (Session(ws, env=env).config_error or "")


def test_captured_files_are_redacted_like_every_record(tmp_path):
    from lily_kernel.session.session import Session
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "u").mkdir()
    secret = "sk-live-" + "q7" * 12
    (tmp_path / ".config" / "lily").mkdir(parents=True)
    (tmp_path / ".config" / "lily" / "lily.toml").write_text("[journal]\ncapture_reads = true\n")
    (ws / ".env.example").write_text(f"OPENAI_API_KEY={secret}\nurl=https://bob:pw@x.org/\n")
    env = {"HOME": str(tmp_path), "SKILLS_USER_DIR": str(tmp_path / "u"),
           "OPENAI_API_KEY": secret}
    workspace_trust.trust(ws, env)
    session = Session(ws, env=env, label="sec")
    session.tools.get("read")(path=".env.example")
    raw = journal_path(ws, "sec").read_text()
    assert "file_read" in raw and secret not in raw and "bob:pw" not in raw


def test_a_declined_call_between_a_prose_cell_and_its_request_keeps_one_turn():
    rows = [record("prose", text="next question"),
            record("action_declined", action_id="x1", skill=None),
            record("message", message={"role": "tool", "tool_call_id": "old",
                                       "content": "declined by the user"}),
            record("model_call", model="m", usage=None),
            record("message", message={"role": "user", "content": "next question"}),
            record("message", message={"role": "assistant", "content": "answer"})]
    turns = logs.turns(rows)
    assert [(t.kind, t.text, t.answers) for t in turns] == [
        ("prose", "next question", ["answer"])]
    assert turns[0].approvals == ["declined: x1"] and turns[0].models == ["m"]
