"""The README is a short guide whose facts have one source each (issue 43 §1).

Its command table is the router's own (``commands/table.py``), the model settings' defaults
in docs/session.md are the code's (``ModelConfig``), its links resolve, and its ``make``
commands exist and keep the checkout clean. The README's recipes and its notebook tour run
for real in tests/jupyter/test_readme_kernel.py; ``make demo`` in tests/test_demo.py.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_docs import anchors

from lily_kernel.commands.table import BUILTINS
from lily_kernel.settings import model_settings
from lily_kernel.settings.model_settings import ModelConfig

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def blocks(text: str, marker: str) -> list[str]:
    """The bodies of the fenced blocks (or tables) right after ``<!-- doc-test: marker -->``."""
    found = []
    for m in re.finditer(rf"<!-- doc-test: {re.escape(marker)} -->\n", text):
        rest = text[m.end():]
        if rest.startswith("```"):
            body = rest.split("\n", 1)[1]
            found.append(body[: body.index("\n```")])
        else:  # a table: up to the first blank line
            found.append(rest.split("\n\n", 1)[0])
    return found


def table_rows(table: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in table.splitlines()]
    return rows[2:]  # past the header and the rule


def test_the_readme_is_a_short_guide():
    lines = README.splitlines()
    assert len(lines) <= 260, len(lines)
    order = [README.index(h) for h in ("## Two commands", "## Use a real model",
                                       "## A notebook session", "## Where to read on")]
    assert order == sorted(order)
    for server in ("OpenAI", "llama.cpp", "Ollama", "vLLM", "LM Studio"):
        assert f"**{server}" in README, server


def test_the_command_table_is_the_routers():
    (table,) = blocks(README, "commands")
    shown = [row[0].strip("`") for row in table_rows(table)]
    assert shown == [c.usage for c in BUILTINS]
    reference = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    for command in BUILTINS:  # the reference has a row for each too
        assert f"| `/{command.name}" in reference or f", `/{command.name}" in reference, \
            command.name


def test_the_model_settings_table_quotes_the_code():
    session_md = (REPO / "docs" / "session.md").read_text(encoding="utf-8")
    table = session_md.split("<!-- model-settings -->\n", 1)[1].split("\n\n", 1)[0]
    rows = {row[0].strip("`"): row for row in table_rows(table)}
    fields = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    assert set(rows) == set(fields)
    env = {key: var for var, key in model_settings.ENV_VARS.items()}
    for name, default in fields.items():
        shown = rows[name][1]
        if default is None:
            assert shown.startswith("none"), (name, shown)
        else:
            assert shown == f"`{default}`", (name, shown, default)
        assert rows[name][2] == (f"`{env[name]}`" if name in env else "—"), name
    assert "0.2" not in rows["temperature"][1]
    assert f"the default model is `{model_settings.DEFAULT_MODEL}`" in README


def test_every_readme_link_resolves():
    broken = []
    for target, anchor in re.findall(r"\]\((docs/[a-z0-9-]+\.md)(?:#([a-z0-9_-]+))?\)", README):
        doc = REPO / target
        if not doc.is_file():
            broken.append(target)
        elif anchor and anchor not in anchors(doc):
            broken.append(f"{target}#{anchor}")
    assert broken == []


def test_no_readme_or_docs_line_installs_from_an_index_lily_is_not_on():
    for path in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        text = path.read_text(encoding="utf-8")
        assert "pip install 'lily-kernel" not in text, path.name
        assert "pip install lily-kernel" not in text, path.name


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_the_make_commands_exist_and_make_lab_opens_a_copy(tmp_path):
    """``make demo`` and ``make test`` are the targets the README names (the demo itself runs
    in tests/test_demo.py, the suite is this run); ``make lab`` copies the quickstart into
    an ignored folder, never opening the tracked notebook (JupyterLab autosaves)."""
    for block in blocks(README, "make"):
        for line in block.splitlines():
            target = line.split("#")[0].split()[1]
            dry = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True,
                                 text=True, timeout=60)
            assert dry.returncode == 0, dry.stderr
            if target == "lab":
                assert "notebooks/quickstart.ipynb" not in dry.stdout.splitlines()[-1]
    lab = tmp_path / "lab"
    made = subprocess.run(["make", f"LAB={lab}", f"{lab}/quickstart.ipynb"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert (lab / "quickstart.ipynb").read_bytes() == \
        (REPO / "notebooks" / "quickstart.ipynb").read_bytes()
    assert (lab / "fixtures").is_dir()
    ignored = subprocess.run(["git", "check-ignore", "-q", "lab/quickstart.ipynb"], cwd=REPO,
                             timeout=30)
    assert ignored.returncode in (0, 128)  # ignored (128: not a git checkout)


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None,
                    reason="no make or git")
def test_make_test_fails_when_the_tests_change_the_checkout(tmp_path):
    """Issue 43 §4: `make test` compares `git status --porcelain` before and after its
    pytest run (PYTEST stands in for the run here, in a scratch checkout)."""
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "scratch"]):
        subprocess.run([*git, *args], cwd=tmp_path, check=True, timeout=60)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".lily-installed").touch()  # after pyproject.toml: up to date
    (tmp_path / ".git" / "info" / "exclude").write_text(".venv\n")
    make = ["make", "-o", ".venv-eg/.eg-installed", "-o", ".venv-jai/.jai-installed",
            "-o", ".venv-skills/.skills-installed", "-o", ".venv-fastmcp/.fastmcp-installed",
            "test"]

    def run(pytest_stand_in: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*make, f"PYTEST={pytest_stand_in}"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)

    assert run("true").returncode == 0
    dirty = run("touch stray.txt")
    assert dirty.returncode != 0 and "the tests changed the checkout" in dirty.stdout
    assert "?? stray.txt" in dirty.stdout
    (tmp_path / "stray.txt").unlink()
    assert run("false").returncode != 0  # a failing run still fails
