"""``lily logs`` on a journal made by a real kernel session against the scripted model
(docs/logs.md): every subcommand, /logs in the notebook, and the replay round trip."""
from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from kernel_support import Kernel
from logs_support import CELLS, GREET_BODY, Recorded, record_session

from lily_kernel.cli import main
from lily_kernel.session import logs
from lily_kernel.session.journal import journal_path

pytestmark = pytest.mark.usefixtures("no_machine_model")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, ipython_dir) -> Recorded:
    return record_session(tmp_path_factory.mktemp("logs"), ipython_dir)


def lily(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["logs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def copy_of(recorded: Recorded, tmp_path: Path) -> Path:
    target = tmp_path / "ws"
    shutil.copytree(recorded.workspace, target, symlinks=True)
    return target


def test_list_shows_the_session_with_requests_tools_tokens_and_model(recorded, capsys,
                                                                     monkeypatch):
    code, out, err = lily(capsys, "--workspace", str(recorded.workspace))
    row = next(line for line in out.splitlines() if line.startswith(recorded.session_id[:12]))
    # another user's data folder: the journal is not theirs (docs/logs.md#authenticity)
    assert "demo.ipynb (foreign)" in row and "1 session(s) marked (foreign)" in err
    # the kernel's user (its data folder) reads it as its own
    monkeypatch.setenv("LILY_DATA_DIR",
                       str(Path(recorded.env["HOME"]) / ".local" / "share" / "lily"))
    code, out, err = lily(capsys, "--workspace", str(recorded.workspace))
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith(recorded.session_id[:12]))
    assert "demo.ipynb" in row and "scripted-test-model" in row and "foreign" not in row
    # 3 requests (2 prose, 1 skill command), 2 tool calls, 5 model calls of 100 in / 20 out
    assert row.split()[4:8] == ["3", "2", "500", "100"], row
    code, out, _ = lily(capsys, "--workspace", str(recorded.workspace), "--json", "-n", "1")
    data = json.loads(out)
    assert [s["id"] for s in data] == [recorded.session_id]
    assert data[0]["tools"] == ["scan_todos", "read"] and data[0]["tokens_out"] == 100


def test_show_prints_cells_tool_calls_results_answers_and_usage(recorded, capsys):
    ws = str(recorded.workspace)
    code, out, _ = lily(capsys, "show", recorded.session_id[:8], "--workspace", ws)
    assert code == 0
    for cell in CELLS:
        assert cell in out
    assert "**tool call** `scan_todos`" in out and '{"input": "notes"}' in out
    assert "| `notes/todo.txt` | 1 | TODO | write the docs |" in out  # the tool result
    assert "One thing is left: **write the docs**." in out
    assert "tokens: 200 in / 40 out" in out
    _, short, _ = lily(capsys, "show", recorded.session_id, "--workspace", ws, "-t", "10")
    assert "| `notes/todo.txt` |" not in short and "more characters]" in short
    _, last, _ = lily(capsys, "show", "demo.ipynb", "--workspace", ws, "-n", "1", "--json")
    turns = json.loads(last)["turns"]
    assert [t["text"].strip() for t in turns if t["kind"] != "event"] == [CELLS[-1]]
    assert turns[-1]["tool_calls"][0]["arguments"] == {"path": "notes/todo.txt"}


def test_search_finds_requests_answers_and_tool_calls_with_filters(recorded, capsys):
    ws = ["--workspace", str(recorded.workspace)]
    code, out, _ = lily(capsys, *ws, "-q", "write docs", "--json")
    hits = json.loads(out)
    assert code == 0 and {h["kind"] for h in hits} >= {"answer", "tool_result"}
    assert all(h["session"] == recorded.session_id for h in hits)
    assert any("[docs]" in h["snippet"] for h in hits)
    _, out, _ = lily(capsys, *ws, "-q", "notes", "-T", "read", "--json")
    assert {h["tool"] for h in json.loads(out)} == {"read"}
    _, out, _ = lily(capsys, *ws, "-q", "docs", "-m", "another-model", "--json")
    assert json.loads(out) == []
    _, out, _ = lily(capsys, *ws, "-q", "docs", "-m", "scripted-test-model", "--json")
    assert json.loads(out)
    _, out, _ = lily(capsys, *ws, "-q", "docs", "--since", "2999-01-01", "--json")
    assert json.loads(out) == []
    _, out, _ = lily(capsys, *ws, "-q", "docs", "--until", "1d", "--json")
    assert json.loads(out) == []  # nothing older than a day
    _, out, _ = lily(capsys, *ws, "-q", "Ada")
    assert recorded.session_id[:12] in out and "[Ada]" in out


def test_usage_totals_by_model_session_and_day(recorded, capsys):
    ws = ["--workspace", str(recorded.workspace)]
    for by, key in (("model", "scripted-test-model"), ("session", recorded.session_id[:12]),
                    ("day", time.strftime("%Y-%m-%d", time.gmtime()))):
        code, out, _ = lily(capsys, "usage", "--by", by, *ws, "--json")
        rows = json.loads(out)
        assert code == 0 and rows == [{by: key, "calls": 5, "tokens_in": 500,
                                       "tokens_out": 100, "unreported": 0}]
    _, out, _ = lily(capsys, "usage", *ws)
    assert "total: 500 in / 100 out over 5 model call(s)" in out


def test_export_markdown_and_a_valid_notebook_on_the_lily_kernel(recorded, capsys, tmp_path):
    md, ipynb = tmp_path / "s.md", tmp_path / "s.ipynb"
    code, _, err = lily(capsys, "export", recorded.session_id[:12], "--workspace",
                        str(recorded.workspace), "--md", str(md), "--ipynb", str(ipynb))
    assert code == 0, err
    text = md.read_text()
    assert text.startswith(f"# Lily session {recorded.session_id[:12]}")
    assert "Hello Ada, lovely to see you!" in text
    nb = nbformat.read(ipynb, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "lily"
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.source.strip() for c in code_cells] == list(CELLS)
    outputs = json.dumps(code_cells[1].outputs)
    assert "scan_todos" in outputs and "write the docs" in outputs
    code, _, err = lily(capsys, "export", recorded.session_id, "--workspace",
                        str(recorded.workspace))
    assert code == 1 and err.startswith("Error: export needs --md FILE or --ipynb FILE")


def test_rm_asks_first_and_deletes_the_records_and_the_index_rows(recorded, capsys, tmp_path,
                                                                 monkeypatch):
    ws = copy_of(recorded, tmp_path)
    sid = recorded.session_id
    lily(capsys, "--workspace", str(ws), "-q", "Ada")  # the index now holds the session
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("n\n"))
    code, out, _ = lily(capsys, "rm", sid[:12], "--workspace", str(ws))
    assert code == 1 and "Nothing deleted." in out
    assert sid in journal_path(ws, "demo.ipynb").read_text()
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("y\n"))
    code, out, _ = lily(capsys, "rm", sid[:12], "--workspace", str(ws))
    assert code == 0 and "Deleted" in out
    journal = ws / ".lily" / "journal"
    assert all(sid not in p.read_text() for p in journal.iterdir())
    _, out, _ = lily(capsys, "--workspace", str(ws), "-q", "Ada", "--json")
    assert json.loads(out) == []
    code, _, err = lily(capsys, "show", sid, "--workspace", str(ws))
    assert code == 1 and err.startswith(f"Error: no session '{sid}'")


def test_prune_deletes_only_sessions_idle_longer_than_asked(recorded, capsys, tmp_path):
    ws = copy_of(recorded, tmp_path)
    old = {"t": time.time() - 40 * 86400, "event": "session_created", "session_id": "0ld" * 8}
    (ws / ".lily" / "journal" / "old.jsonl").write_text(json.dumps(old) + "\n")
    code, out, _ = lily(capsys, "prune", "--older-than", "30d", "--yes", "--workspace", str(ws))
    assert code == 0 and "Deleted 1 record(s) of 1 session(s)." in out
    assert not (ws / ".lily" / "journal" / "old.jsonl").exists()
    _, out, _ = lily(capsys, "--workspace", str(ws), "--json")
    assert [s["id"] for s in json.loads(out)] == [recorded.session_id]
    code, _, err = lily(capsys, "prune", "--older-than", "soon", "--workspace", str(ws))
    assert code == 1 and "not a duration" in err


def test_logs_in_the_notebook_shows_the_session_and_exports_it(start_kernel):
    kernel: Kernel = start_kernel("lily", **{"JPY_SESSION_NAME": "nb.ipynb"})
    kernel.ok("/skills")
    kernel.ok("/help logs")
    run = kernel.ok("/logs 5")
    shown = json.dumps(run.displays)
    assert "2 cell(s)" in shown and "/help logs" in shown and "nb.ipynb" in shown
    run = kernel.ok("/logs export out/s.ipynb")
    nb = nbformat.read(kernel.workspace / "out" / "s.ipynb", as_version=4)
    nbformat.validate(nb)
    assert [c.source for c in nb.cells if c.cell_type == "code"][:2] == [
        "/skills", "/help logs"]


def test_a_hostile_model_cannot_read_or_change_the_journal_or_index(recorded, tmp_path):
    from lily_kernel.agent import loop
    from lily_kernel.session.session import Session
    from lily_kernel.testing.server import ScriptedServer
    ws = copy_of(recorded, tmp_path)
    (ws / ".lily" / "logs-index.sqlite").write_bytes(b"index")
    name = f".lily/journal/{journal_path(ws, 'demo.ipynb').name}"
    turns = [{"tool_calls": [
        {"name": "read", "arguments": {"path": name}, "id": "a"},
        {"name": "write", "arguments": {"path": name, "content": "{}"}, "id": "b"},
        {"name": "write", "arguments": {"path": ".lily/logs-index.sqlite", "content": ""},
         "id": "c"},
        {"name": "logs_rm", "arguments": {"session": recorded.session_id}, "id": "d"}]},
        "done"]
    before = journal_path(ws, "demo.ipynb").read_bytes()
    with ScriptedServer(turns) as server:
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "k", "HOME": str(tmp_path),
               "SKILLS_USER_DIR": str(tmp_path / "none"),
               "SKILLS_WORKSPACE_DIR": str(ws / "skills"),
               "LILY_MAX_RETRIES": "0", "PATH": os.environ.get("PATH", "")}
        (tmp_path / "none").mkdir()
        session = Session(ws, env=env, journal=False)
        loop.run(session, "clean up the logs")
        results = [m for m in server.chat_requests()[-1]["messages"] if m["role"] == "tool"]
    assert all(r["content"].startswith("Error:") for r in results), results
    assert journal_path(ws, "demo.ipynb").read_bytes() == before
    assert (ws / ".lily" / "logs-index.sqlite").read_bytes() == b"index"


@pytest.fixture
def replay_env(tmp_path, monkeypatch) -> dict[str, str]:
    """The environment the replay's kernels run in: a private HOME and IPython dir."""
    home = tmp_path / "home"
    (home / "ipython").mkdir(parents=True)
    (tmp_path / "user_skills").mkdir()
    values = {"HOME": str(home), "IPYTHONDIR": str(home / "ipython"),
              "SKILLS_USER_DIR": str(tmp_path / "user_skills"),
              "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return {**os.environ, **values}


def nbval(notebook: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--nbval", str(notebook), "-q",
                           "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir",
                           str(notebook.parent)],
                          cwd=notebook.parent, env=env, capture_output=True, text=True,
                          timeout=600)


def test_replay_round_trip_passes_and_a_changed_skill_body_fails_its_cell(
        recorded, capsys, tmp_path, replay_env):
    ws = copy_of(recorded, tmp_path)
    replays = tmp_path / "replays"
    code, out, err = lily(capsys, "replay", recorded.session_id[:12], "--workspace", str(ws),
                          "--to", str(replays), "--with-workspace")  # its greet skill
    assert code == 0, out + err
    notebook = replays / f"{recorded.session_id[:12]}.ipynb"
    script = json.loads((replays / f"{recorded.session_id[:12]}.replay.json").read_text())
    assert script["files"] == {"notes/todo.txt": {"text": "TODO write the docs\n"}}
    assert [t["turn"].get("tool_calls", [{}])[0].get("name") for t in script["turns"]] == [
        "scan_todos", None, None, "read", None]
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    assert [c.source.strip() for c in nb.cells[1:-1]] == list(CELLS)
    assert "Hello Ada, lovely to see you!" in json.dumps(nb.cells[3].outputs)

    passed = nbval(notebook, replay_env)
    assert passed.returncode == 0, passed.stdout[-3000:]
    assert "6 passed" in passed.stdout

    skill = ws / "skills" / "greet" / "SKILL.md"
    skill.write_text(skill.read_text().replace(GREET_BODY, GREET_BODY.replace("warmly", "coldly")))
    failed = nbval(notebook, replay_env)
    assert failed.returncode != 0
    assert "FAILED" in failed.stdout and "::Cell 3 " in failed.stdout
    assert "::Cell 2 " not in failed.stdout  # the cells before still replay
    assert "replay diverged: model turn 3: the user message differs" in failed.stdout
    assert "warmly" in failed.stdout and "coldly" in failed.stdout


def test_replay_fails_where_a_tool_result_changed(recorded, capsys, tmp_path, replay_env):
    ws = copy_of(recorded, tmp_path)
    replays = tmp_path / "replays"
    assert lily(capsys, "replay", recorded.session_id, "--workspace", str(ws),
                "--to", str(replays), "--with-workspace")[0] == 0
    script_path = replays / f"{recorded.session_id[:12]}.replay.json"
    script = json.loads(script_path.read_text())
    script["files"]["notes/todo.txt"]["text"] = "TODO write the tests\n"  # the file changed
    script_path.write_text(json.dumps(script))
    failed = nbval(replays / f"{recorded.session_id[:12]}.ipynb", replay_env)
    assert "::Cell 2 " in failed.stdout and "the tool message differs" in failed.stdout


def test_two_kernels_appending_while_lily_logs_searches_lose_nothing(start_kernel, tmp_path):
    from kernel_support import make_world
    world = make_world(tmp_path / "shared", None, JPY_SESSION_NAME="same.ipynb")
    kernels = [start_kernel("lily", world=world) for _ in range(2)]
    loop = ("%%python\nimport lily\ns = lily.session()\n"
            "for i in range(400):\n"
            "    s.record_command(f'/note {tag} number{i} ' + 'x' * (i % 50) * 60, ok=True)\n"
            "print(s.session_id)")
    for kernel, tag in zip(kernels, ("alpha", "beta"), strict=True):
        kernel.kc.execute(loop.replace("{tag}", tag))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    searches = 0
    replies: list[dict | None] = [None, None]
    while None in replies:
        found = subprocess.run([sys.executable, "-m", "lily_kernel.cli", "logs", "-q", "note",
                                "--workspace", str(world.workspace), "--json"],
                               capture_output=True, text=True, env=env, timeout=120)
        assert found.returncode == 0 and "Traceback" not in found.stderr, found.stderr
        json.loads(found.stdout)
        searches += 1
        for n, kernel in enumerate(kernels):
            if replies[n] is None:
                with contextlib.suppress(queue.Empty):  # still running
                    replies[n] = kernel.kc.get_shell_msg(timeout=0.05)
    assert all(r is not None and r["content"]["status"] == "ok" for r in replies)
    assert searches >= 1
    journal = world.workspace / ".lily" / "journal"
    assert [p.name for p in journal.iterdir()] == [  # one shared file
        journal_path(world.workspace, "same.ipynb").name]
    read = logs.Logs(world.workspace)
    assert read.notes.all() == []
    notes = [t.text for sid in read.by_session for t in logs.turns(read.records(sid))
             if t.kind == "command"]
    for tag in ("alpha", "beta"):
        assert sorted(n.split()[2] for n in notes if f" {tag} " in n) == sorted(
            f"number{i}" for i in range(400))
    # the index, brought up to date, holds every record once
    final = subprocess.run([sys.executable, "-m", "lily_kernel.cli", "logs", "-q", "note alpha",
                            "-n", "1000", "--workspace", str(world.workspace),
                            "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert len(json.loads(final.stdout)) == 400
