"""Shared fixtures for the core test suite.

Helpers are reached through fixtures (``env``, ``cli``), never by importing
this module: other folders under tests/ may have their own conftest.py, and
``import conftest`` would then be ambiguous.

Everything here builds real folders under ``tmp_path``; nothing reads the
machine's own skill roots, persona or home folder. Snapshots are built from
explicit :class:`~lily_kernel.skills.paths.Root` objects and an explicit
:class:`~lily_kernel.skills.loader.Host`, so results never depend on the host OS,
its environment or its PATH.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lily_kernel.commands.table import BUILTIN_NAMES
from lily_kernel.session.session import Session
from lily_kernel.skills.eligibility import Host
from lily_kernel.skills.loader import build_snapshot
from lily_kernel.skills.paths import COMPAT_ROOTS, SOURCES, Root
from lily_kernel.tools.builtin_tools import register_builtins
from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry

REPO = Path(__file__).resolve().parent.parent
REPO_SKILLS = REPO / "skills"
REPO_PERSONA = REPO / "persona"
# nbval runs the golden notebooks' kernels in notebooks/, so their journals land in
# notebooks/.lily/ (ignored by git): removed after the run when the run made it (issue 43 §4)
GOLDEN_JOURNALS = REPO / "notebooks" / ".lily"
_GOLDEN_JOURNALS_BEFORE = GOLDEN_JOURNALS.exists()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Leave the checkout as the run found it: the golden runs' journals go again."""
    import shutil
    if not _GOLDEN_JOURNALS_BEFORE and GOLDEN_JOURNALS.is_dir():
        shutil.rmtree(GOLDEN_JOURNALS, ignore_errors=True)


def write_skill(root: Path, name: str, frontmatter: str | None = None,
                body: str = "# Body\n\nDo the thing.\n", raw: bytes | None = None) -> Path:
    """Create ``root/name/SKILL.md`` and return the skill folder.

    ``frontmatter`` is the YAML between the ``---`` lines (None: no frontmatter);
    ``raw`` replaces the whole file with exact bytes.
    """
    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    if raw is None:
        text = body if frontmatter is None else f"---\n{frontmatter.strip(chr(10))}\n---\n{body}"
        raw = text.encode("utf-8")
    (folder / "SKILL.md").write_bytes(raw)
    return folder


def make_bin(folder: Path, name: str) -> Path:
    """An executable file ``name`` in ``folder`` (for eligibility.binaries)."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def tools_for(workspace: Path) -> ToolRegistry:
    reg = ToolRegistry()
    register_builtins(reg, workspace)
    return reg


class Env:
    """A private world under tmp_path: a workspace, the three skill roots, a PATH."""

    repo = REPO
    repo_skills = REPO_SKILLS
    repo_persona = REPO_PERSONA
    write_skill = staticmethod(write_skill)
    make_bin = staticmethod(make_bin)
    tools_for = staticmethod(tools_for)

    def __init__(self, base: Path) -> None:
        self.base = base
        self.workspace = base / "ws"
        self.ws_skills = self.workspace / "skills"
        self.user_skills = base / "user_skills"
        self.bundled_skills = base / "bundled_skills"
        self.example_skills = base / "example_skills"
        self.home = base / "home"
        # The other agents' folders (docs/loader.md#roots), where skill_roots finds them.
        self.compat_skills = {source: (self.workspace if where == "workspace" else self.home) / folder
                              for source, where, folder in COMPAT_ROOTS}
        self.bin = base / "bin"
        for d in (self.ws_skills, self.user_skills, self.bundled_skills, self.example_skills,
                  self.bin,
                  *self.compat_skills.values()):
            d.mkdir(parents=True, exist_ok=True)
        self.host_env: dict[str, str] = {"PRESENT_VAR": "1", "EMPTY_VAR": ""}
        make_bin(self.bin, "fakebin")

    @property
    def host(self) -> Host:
        return Host("linux", dict(self.host_env), str(self.bin))

    def roots(self, explicit: bool = True) -> tuple[Root, ...]:
        """Every root, in SOURCES order; the other agents' folders are never explicit."""
        return tuple(Root(source, self.root_dir(source),
                          explicit and source in ("workspace", "user", "bundled", "examples"))
                     for source in SOURCES)

    def root_dir(self, source: str) -> Path:
        return {"workspace": self.ws_skills, "user": self.user_skills,
                "bundled": self.bundled_skills, "examples": self.example_skills,
                **self.compat_skills}[source]

    def snapshot(self, tools: ToolRegistry | None = None, policy: ToolPolicy | None = None,
                 roots=None, host: Host | None = None, version: int = 1):
        return build_snapshot(roots if roots is not None else self.roots(),
                              tools if tools is not None else tools_for(self.workspace),
                              policy or ToolPolicy(), version=version,
                              host=host or self.host, reserved=BUILTIN_NAMES)

    def session_env(self, **extra: str) -> dict[str, str]:
        env = {"SKILLS_WORKSPACE_DIR": str(self.ws_skills),
               "SKILLS_USER_DIR": str(self.user_skills),
               "SKILLS_BUNDLED_DIR": str(self.bundled_skills),
               "SKILLS_EXAMPLES_DIR": str(self.example_skills),
               "HOME": str(self.home)}
        env.update(extra)
        return env

    def session(self, journal: bool = True, **extra: str) -> Session:
        return Session(workspace=self.workspace, env=self.session_env(**extra),
                       host=self.host, journal=journal, reserved_commands=BUILTIN_NAMES)


    @staticmethod
    def diag(snap, kind: str, skill: str | None):
        """The single diagnostic of ``kind`` for ``skill`` (fails unless there is exactly one)."""
        found = [d for d in snap.diagnostics if d.kind == kind and d.skill == skill]
        assert len(found) == 1, (kind, skill, snap.diagnostics)
        return found[0]

    def cli(self, *args: str, cwd: Path | None = None, check_rc: int | None = None,
            **env_overrides: str | None) -> subprocess.CompletedProcess:
        """Run ``python -m lily_kernel.cli ARGS`` in a subprocess with this world's roots.

        An override of None removes the variable.
        """
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SKILLS_", "LILY_", "OPENAI_"))}
        env.update(self.session_env())
        env["PYTHONPATH"] = str(REPO)  # the checkout under test, whatever is installed
        for key, value in env_overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        proc = subprocess.run([sys.executable, "-m", "lily_kernel.cli", *args],
                              cwd=str(cwd or self.workspace), env=env, capture_output=True,
                              text=True, timeout=60)
        if check_rc is not None:
            assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr)
        return proc


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


@pytest.fixture(scope="session")
def require_permissions(tmp_path_factory) -> None:
    """Skip unless permission bits bind this process (root usually bypasses them)."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return
    probe = tmp_path_factory.mktemp("perm_probe") / "probe"
    probe.write_text("x")
    probe.chmod(0)
    try:
        probe.read_text()
    except PermissionError:
        return  # root without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH: bits are enforced
    finally:
        probe.chmod(0o600)
    pytest.skip("running as root: permission bits (chmod 000, read-only folders) do not "
                "stop this process")


# -- the agent tests' shared fixtures ---------------------------------------------------

@pytest.fixture
def no_machine_model(monkeypatch):
    """No model, skill-root or Lily settings from the machine: requests go to the scripted
    server or nowhere. Modules use it with ``pytestmark = pytest.mark.usefixtures(...)``."""
    for key in [k for k in os.environ if k.startswith(("OPENAI_", "LILY_", "SKILLS_"))]:
        monkeypatch.delenv(key)


@pytest.fixture
def workspace(tmp_path) -> Path:
    """``tmp_path/ws`` with its skills folder, beside an empty ``user_skills`` and a private
    ``home`` (the layout of agent_support.World)."""
    from agent_support import World
    return World(tmp_path).workspace


@pytest.fixture
def server():
    """A scripted OpenAI-compatible server on 127.0.0.1, stopped after the test."""
    from lily_kernel.testing.server import ScriptedServer
    with ScriptedServer() as s:
        yield s


@pytest.fixture(autouse=True)
def _private_data_folder(tmp_path_factory, monkeypatch):
    """A session built on the process's environment keeps its journal key (and trust
    record) in a folder of the test's own, never in the machine's ~/.local/share/lily
    (docs/logs.md#authenticity)."""
    if "LILY_DATA_DIR" not in os.environ:
        monkeypatch.setenv("LILY_DATA_DIR", str(tmp_path_factory.mktemp("lily-data")))
