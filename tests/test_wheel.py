"""The wheel carries the bundled skills, persona, kernelspec, the console script and the
``lily`` extension package. Built offline with the venv's hatchling."""
from __future__ import annotations

import configparser
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    pytest.importorskip("hatchling", reason="hatchling builds the wheel offline")
    out = tmp_path_factory.mktemp("wheel")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(out), str(REPO)],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheels = list(out.glob("lily_kernel-*.whl"))
    assert len(wheels) == 1, list(out.iterdir())
    zf = zipfile.ZipFile(wheels[0])
    yield zf
    zf.close()


def test_wheel_contains_the_bundled_skills(wheel):
    names = set(wheel.namelist())
    assert "lily_kernel/_bundled/skills/plan_compiler/SKILL.md" in names
    for skill in (REPO / "skills").iterdir():
        if (skill / "SKILL.md").is_file():
            path = f"lily_kernel/_bundled/skills/{skill.name}/SKILL.md"
            assert path in names
            assert wheel.read(path) == (skill / "SKILL.md").read_bytes()


def test_wheel_contains_the_example_skills_apart_from_the_bundle(wheel):
    # SKILLS_EXAMPLES=1 finds them here in an installed Lily (docs/loader.md#roots)
    names = set(wheel.namelist())
    for skill in ("read_receipts", "send_message"):
        path = f"lily_kernel/_bundled/examples/skills/{skill}/SKILL.md"
        assert wheel.read(path) == (REPO / "examples" / "skills" / skill / "SKILL.md").read_bytes()
        assert f"lily_kernel/_bundled/skills/{skill}/SKILL.md" not in names


def test_wheel_contains_the_persona(wheel):
    names = set(wheel.namelist())
    for fname in ("SOUL.md", "IDENTITY.md", "USER.md", "AGENTS.md"):
        assert f"lily_kernel/_bundled/persona/{fname}" in names
    assert "lily_kernel/_bundled/persona/agents/reviewer/SOUL.md" in names


def test_wheel_contains_the_kernelspec(wheel):
    import json
    spec = json.loads(wheel.read("lily_kernel/_bundled/kernelspec/kernel.json"))
    assert spec["display_name"] == "Lily"
    assert spec["argv"][1:3] == ["-m", "lily_kernel"]


def test_wheel_contains_the_kernel_pod_template(wheel):
    """``install --enterprise-gateway`` copies it from the installed package (docs/deploy.md)."""
    path = "lily_kernel/_bundled/deploy/kubernetes/kernel-pod.yaml.j2"
    assert wheel.read(path) == (REPO / "deploy" / "kubernetes" / "kernel-pod.yaml.j2").read_bytes()
    assert not [n for n in wheel.namelist() if "kernel-image" in n]  # the Dockerfile stays out


def test_wheel_contains_the_core_package(wheel):
    names = set(wheel.namelist())
    for module in ("__init__", "skills/loader", "skills/skill", "skills/frontmatter", "commands/router",
                   "session/session", "cli"):
        assert f"lily_kernel/{module}.py" in names


def test_wheel_declares_the_lily_console_script(wheel):
    entry = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    parser = configparser.ConfigParser()
    parser.read_file(io.StringIO(wheel.read(entry).decode()))
    assert parser["console_scripts"]["lily"].strip() == "lily_kernel.cli:main"


def test_wheel_contains_the_lily_extension_package(wheel):
    if not (REPO / "lily" / "__init__.py").is_file():
        pytest.skip("lily/__init__.py (the %load_ext lily package) is not written yet")
    assert "lily/__init__.py" in wheel.namelist()


def test_bundled_lookup_prefers_the_installed_copy(tmp_path, wheel):
    # Unpack the wheel and import from it: paths.bundled() must find _bundled/ inside it.
    wheel.extractall(tmp_path)
    code = ("import lily_kernel.skills.paths as p, sys; "
            "print(p.bundled('skills')); print(p.bundled('persona'))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    skills, persona = proc.stdout.split()
    assert Path(skills) == tmp_path / "lily_kernel" / "_bundled" / "skills"
    assert Path(persona) == tmp_path / "lily_kernel" / "_bundled" / "persona"
