"""docs/session.md#journal: the append-only session journal."""
from __future__ import annotations

import json

from agent_support import run_command

from lily_kernel.session.journal import Journal, journal_path, read


def test_journal_lives_under_workspace_lily_journal(env):
    session = env.session()
    path = session.journal.path
    assert path.parent == env.workspace / ".lily" / "journal"
    assert path.suffix == ".jsonl"


def test_one_json_object_per_line_and_append_only(env):
    session = env.session()
    run_command(session, "/skills")
    first = session.journal.path.read_bytes()
    run_command(session, "/help")
    session.add_message({"role": "user", "content": "hi"})
    second = session.journal.path.read_bytes()
    assert second.startswith(first) and len(second) > len(first)  # only appended
    lines = second.decode().splitlines()
    assert second.endswith(b"\n")
    records = [json.loads(line) for line in lines]
    assert all(isinstance(r, dict) and "t" in r and "event" in r for r in records)
    assert [r["event"] for r in records] == ["session_created", "command", "command", "message"]
    assert records[-1]["message"] == {"role": "user", "content": "hi"}


def test_each_record_is_flushed_immediately(env):
    session = env.session()
    n = len(session.journal.path.read_text().splitlines())
    run_command(session, "/skills")
    # read by another reader right away, without closing anything
    assert len(session.journal.path.read_text().splitlines()) == n + 1


def test_torn_last_line_is_skipped_and_earlier_records_survive(tmp_path):
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    j.append({"event": "one"})
    j.append({"event": "two"})
    with open(path, "ab") as fh:  # a crash in the middle of a write
        fh.write(b'{"event": "three", "payload": "half')
    assert [r["event"] for r in read(path)] == ["one", "two"]


def test_appending_after_a_torn_line_keeps_the_new_record(tmp_path):
    path = tmp_path / "j.jsonl"
    Journal(path).append({"event": "before crash"})
    with open(path, "ab") as fh:
        fh.write(b'{"event": "torn", "x": ')
    # the next process opens the same journal (same notebook label) and goes on
    j = Journal(path)
    j.append({"event": "after restart"})
    j.append({"event": "later"})
    assert [r["event"] for r in read(path)] == ["before crash", "after restart", "later"]


def test_read_skips_garbage_and_non_objects(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"event": "a"}\n[1, 2]\nnot json\n\n"str"\n{"event": "b"}\n\xff\xfe\n')
    assert [r["event"] for r in read(path)] == ["a", "b"]


def test_read_of_a_missing_journal_is_empty(tmp_path):
    assert list(read(tmp_path / "none.jsonl")) == []


def test_journal_path_sanitises_the_label(tmp_path):
    # a readable slug, then the start of the label's sha256 (docs/session.md#journal)
    assert journal_path(tmp_path, "a/b c?.ipynb") == (
        tmp_path / ".lily" / "journal" / "a_b_c_.ipynb-8ad3e6f31409bfbe.jsonl")
    assert journal_path(tmp_path, "../../etc/passwd").parent == tmp_path / ".lily" / "journal"
    assert journal_path(tmp_path, "...").name.startswith("session-")


def test_unwritable_journal_does_not_break_commands(env, tmp_path):
    # The journal folder is a file: every write fails, whoever runs the tests.
    blocked = tmp_path / "blocked_ws"
    blocked.mkdir()
    (blocked / ".lily").write_text("not a folder")
    from lily_kernel.session.session import Session
    session = Session(workspace=blocked, env=env.session_env(), host=env.host)
    assert session.journal.error == "Not a directory"
    assert session.journal.take_notice() == "journal: not recorded: Not a directory; retrying"
    assert run_command(session, "/skills").snapshot is session.snapshot
    run_command(session, "/reload_skills")
    assert session.snapshot.version == 2
    assert (blocked / ".lily").read_text() == "not a folder"


def test_read_only_workspace_does_not_break_commands(env, tmp_path, require_permissions):
    ro = tmp_path / "ro_ws"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        from lily_kernel.session.session import Session
        session = Session(workspace=ro, env=env.session_env(), host=env.host)
        assert session.journal.error
        run_command(session, "/skills")
        run_command(session, "/model m")
        assert session.model_config.model == "m"
    finally:
        ro.chmod(0o755)


def test_journal_never_contains_the_api_key(env):
    secret = "sk-live-THIS-MUST-NOT-LEAK"
    session = env.session(OPENAI_API_KEY=secret)
    for cell in ("/model", f"/model api_key={secret}", f"/model OPENAI_API_KEY={secret}",
                 f"/model gpt-4o token={secret}", "/model gpt-4o temperature=0.1"):
        try:
            run_command(session, cell)
        except Exception:
            pass
    session.add_message({"role": "user", "content": "hello"})
    raw = session.journal.path.read_text()
    assert secret not in raw
    assert "api_key=***" in raw or "API_KEY=***" in raw


def test_journal_file_is_private(env):
    session = env.session()
    mode = session.journal.path.stat().st_mode & 0o777
    assert mode & 0o077 == 0


def test_records_follow_the_file_when_it_is_removed_or_replaced(tmp_path):
    """The journal keeps its file open between records; a record written after the file was
    removed, or replaced by a rewrite (``lily logs rm``), lands in the file at the path."""
    path = tmp_path / ".lily" / "journal" / "s.jsonl"
    journal = Journal(path)
    journal.append({"event": "one"})
    path.unlink()
    journal.append({"event": "two"})
    assert [r["event"] for r in read(path)] == ["two"]
    replacement = tmp_path / "rewritten.jsonl"
    replacement.write_text('{"event": "kept"}\n')
    replacement.replace(path)
    journal.append({"event": "three"})
    assert [r["event"] for r in read(path)] == ["kept", "three"]
    journal.close()
    journal.append({"event": "four"})  # closed: the next record opens the file again
    assert [r["event"] for r in read(path)][-1] == "four"
    assert journal.error is None
