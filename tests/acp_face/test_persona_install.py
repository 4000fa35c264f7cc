"""`lily acp install-persona`: the jupyter-ai persona, loaded by jupyter-ai's own code in its
own environment, .venv-jai (docs/front-ends.md#jupyter-ai)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lily_kernel.acp import persona_install

REPO = Path(__file__).resolve().parents[2]
JAI = REPO / ".venv-jai" / "bin" / "python"
LILY = Path(sys.executable).parent / "lily"
needs_jai = pytest.mark.skipif(not JAI.exists(), reason="jupyter-ai's own environment "
                               ".venv-jai is not built here: `make jai-venv` builds it")

#: Load the entry point as jupyter-ai's PersonaManager does, and compute the persona's id
#: with jupyter-ai's own property.
LOAD = """
from importlib.metadata import entry_points
from jupyter_ai_persona_manager import PersonaRequirementsUnmet
from jupyter_ai_acp_client.base_acp_persona import BaseAcpPersona
ep = next(e for e in entry_points(group="jupyter_ai.personas") if e.name == "lily")
try:
    cls = ep.load()
except PersonaRequirementsUnmet as exc:
    print("UNMET", exc)
else:
    import sys
    print(issubclass(cls, BaseAcpPersona), cls.id.fget(cls.__new__(cls)),
          sorted(m for m in sys.modules if m.startswith("lily_kernel")))
"""


def _load(site: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([str(JAI), "-c", LOAD], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@needs_jai
def test_the_persona_is_a_jupyter_ai_acp_persona_launching_this_lily(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    module = persona_install.install(str(JAI), site=site)
    assert _load(site) == f"True {persona_install.PERSONA_ID} []"  # nothing of Lily imported
    source = module.read_text()
    assert f"LILY = {str(LILY.absolute())!r}" in source and '[LILY, "acp"]' in source
    record = next(site.glob("lily_jupyter_ai_persona-*.dist-info")) / "RECORD"
    assert "lily_jupyter_ai/__init__.py,sha256=" in record.read_text()


@needs_jai
def test_the_persona_raises_requirements_unmet_when_lilys_executable_is_gone(tmp_path):
    site, fake = tmp_path / "site", tmp_path / "bin" / "lily"
    site.mkdir()
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    persona_install.install(str(JAI), lily=fake, site=site)
    assert _load(site).startswith("True ")
    fake.unlink()
    out = _load(site)
    assert out.startswith(f"UNMET Lily's executable {fake} is gone.")
    assert "lily acp install-persona --python" in out


def test_install_persona_refuses_a_python_without_jupyter_ai_in_one_line(tmp_path):
    out = subprocess.run([str(LILY), "acp", "install-persona", "--python", sys.executable],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr == (f"Error: {sys.executable} has no jupyter-ai-acp-client: install "
                          "jupyter-ai 3.x there first (pip install 'jupyter-ai>=3.2').\n")
