"""Every path Lily writes for the user obeys the rules ``write`` obeys (issue 41 §2;
docs/logs.md#where-exports-go): ``/logs export`` stays in the workspace, never writes a
protected path or a file that runs by itself, and writes nothing in plan mode; ``lily logs
export`` and ``lily logs replay --to`` never write into a Python environment or a file that
runs by itself. Before, a recorded ``/logs export <site-packages>/x.pth`` wrote the
transcript where a line starting ``import`` runs at every Python start."""
from __future__ import annotations

import pytest
from agent_support import run_command

from lily_kernel.cli import main
from lily_kernel.errors import CommandError
from lily_kernel.session.session import Session


@pytest.fixture
def session(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    s = Session(ws, env={"HOME": str(tmp_path / "home")}, label="nb.ipynb")
    s.record_prose("import os; os.system('touch /tmp/pwned-by-pth')")
    return s


@pytest.mark.parametrize("target", [
    "{site}/evil.pth",  # outside the workspace, in a Python environment
    "evil.pth",  # a .pth anywhere runs at start when it lands on a site folder
    "sitecustomize.py", "conftest.py", ".github/workflows/ci.yml", "json.py",
    ".lily/journal/forged.jsonl", "lily.toml", ".git/hooks/pre-commit",
    "../outside.md",
])
def test_logs_export_never_writes_where_write_may_not(session, tmp_path, target):
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    path = target.format(site=site)
    with pytest.raises(CommandError):
        run_command(session, f"/logs export {path}")
    assert not list(site.iterdir())
    assert not (session.workspace / "evil.pth").exists()
    assert not (session.workspace / "sitecustomize.py").exists()
    assert not (tmp_path / "outside.md").exists()


def test_logs_export_writes_nothing_in_plan_mode(session):
    run_command(session, "/mode plan")
    with pytest.raises(CommandError, match="plan"):
        run_command(session, "/logs export notes.md")
    assert not (session.workspace / "notes.md").exists()


def test_logs_export_of_an_ordinary_file_in_the_workspace_still_works(session):
    run_command(session, "/logs export reports/transcript.md")
    assert "import os" in (session.workspace / "reports" / "transcript.md").read_text()


def test_lily_logs_export_refuses_a_file_that_runs_by_itself(session, tmp_path, capsys):
    session.journal.close()
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    for target in (site / "x.pth", tmp_path / "sitecustomize.py", site / "notes.md"):
        code = main(["logs", "export", session.session_id[:8], "--workspace",
                     str(session.workspace), "--md", str(target)])
        err = capsys.readouterr().err
        assert code != 0 and err.startswith("Error: "), err
        assert not target.exists()
    ok = tmp_path / "out" / "t.md"
    assert main(["logs", "export", session.session_id[:8], "--workspace",
                 str(session.workspace), "--md", str(ok)]) == 0
    assert ok.is_file()


def test_lily_logs_replay_refuses_a_folder_in_a_python_environment(session, tmp_path, capsys):
    session.journal.close()
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    code = main(["logs", "replay", session.session_id[:8], "--workspace",
                 str(session.workspace), "--to", str(site / "replays"), "--no-run"])
    assert code != 0 and capsys.readouterr().err.startswith("Error: ")
    assert not (site / "replays").exists()
