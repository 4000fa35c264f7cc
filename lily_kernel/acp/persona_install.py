"""``lily acp install-persona --python PATH``: Lily as a jupyter-ai persona
(docs/front-ends.md#jupyter-ai).

jupyter-ai 3.x and Lily cannot share one environment (jupyter-ai's ``fastmcp-slim`` needs
``mcp<2``, Lily ``mcp>=2``), and need not: an ACP agent is a process of its own. So
jupyter-ai's environment gets only a tiny distribution, ``lily-jupyter-ai-persona``, with
no dependency on Lily: one module whose ``jupyter_ai.personas`` entry point subclasses
jupyter-ai's ``BaseAcpPersona`` and launches this Lily's ``lily acp`` by its absolute path,
raising ``PersonaRequirementsUnmet`` when that executable is gone. It is written straight
into that environment's ``site-packages`` as an installed distribution (a ``.dist-info``
with ``RECORD``), so nothing is built or downloaded and ``pip uninstall
lily-jupyter-ai-persona`` removes it.
"""
from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from lily_kernel import __version__
from lily_kernel.errors import CommandError

DIST = "lily-jupyter-ai-persona"
MODULE = "lily_jupyter_ai"
CLASS = "LilyPersona"
#: What ``c.PersonaManager.default_persona_id`` is set to, to make Lily the default.
PERSONA_ID = f"jupyter-ai-personas::{MODULE}::{CLASS}"

_PROBE = ("import json, sysconfig, importlib.util as u; print(json.dumps({"
          "'purelib': sysconfig.get_paths()['purelib'], "
          "'acp_client': u.find_spec('jupyter_ai_acp_client') is not None}))")

_AVATAR = """<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">
<circle cx="16" cy="16" r="15" fill="#6a4c93"/>
<text x="16" y="22" font-size="16" text-anchor="middle" fill="#fff" font-family="sans-serif">L</text>
</svg>
"""

_SOURCE = '''"""Lily as a jupyter-ai persona: it launches Lily's `lily acp` (an ACP agent) by its
absolute path. Written by `lily acp install-persona`; it imports nothing of Lily."""
import os

from jupyter_ai_persona_manager import PersonaDefaults, PersonaRequirementsUnmet

LILY = {lily!r}

if not (os.path.isfile(LILY) and os.access(LILY, os.X_OK)):
    raise PersonaRequirementsUnmet(
        f"Lily's executable {{LILY}} is gone. Reinstall Lily with its acp extra "
        "(from its checkout: .venv/bin/pip install -e '.[acp]'), then run `lily acp install-persona "
        "--python {python}` again and restart JupyterLab."
    )

from jupyter_ai_acp_client.base_acp_persona import BaseAcpPersona  # noqa: E402


class {cls}(BaseAcpPersona):
    """Lily: skills, deterministic commands, approval buttons; a local model's loop."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, executable=[LILY, "acp"], **kwargs)

    @property
    def defaults(self) -> PersonaDefaults:
        return PersonaDefaults(
            name="Lily",
            description="Lily: a local, skill-driven agent (ACP). Type / for its commands.",
            avatar_path=os.path.join(os.path.dirname(__file__), "lily.svg"),
            system_prompt="unused",
        )
'''


def lily_executable() -> Path:
    """This Lily's ``lily`` command: beside the running interpreter, else on PATH."""
    here = Path(sys.executable).parent / "lily"
    if here.is_file():
        return here.absolute()
    found = shutil.which("lily")
    if found is None:
        raise CommandError("cannot find Lily's 'lily' executable next to "
                           f"{sys.executable} nor on PATH.")
    return Path(found).absolute()


def _probe(python: str) -> dict[str, object]:
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise CommandError(f"cannot run {python}: {exc}.") from None
    answer: dict[str, object] = json.loads(out)
    return answer


def _record_line(root: Path, path: Path) -> str:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(root).as_posix()},sha256={digest},{len(data)}"


def install(python: str, lily: Path | None = None, site: Path | None = None) -> Path:
    """Write the persona into the environment of ``python`` (into ``site`` instead, a folder
    that environment has on its path, when given); the module's path."""
    found = _probe(python)
    if not found.get("acp_client"):
        raise CommandError(f"{python} has no jupyter-ai-acp-client: install jupyter-ai 3.x "
                           "there first (pip install 'jupyter-ai>=3.2').")
    lily = lily if lily is not None else lily_executable()
    site = site if site is not None else Path(str(found["purelib"]))
    package = site / MODULE
    dist_info = site / f"{DIST.replace('-', '_')}-{__version__}.dist-info"
    for old in site.glob(f"{DIST.replace('-', '_')}-*.dist-info"):
        shutil.rmtree(old)
    package.mkdir(parents=True, exist_ok=True)
    dist_info.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(
        _SOURCE.format(lily=str(lily), python=python, cls=CLASS), encoding="utf-8")
    (package / "lily.svg").write_text(_AVATAR, encoding="utf-8")
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {__version__}\n"
        f"Summary: Lily ({lily}) as a jupyter-ai persona, over ACP.\n", encoding="utf-8")
    (dist_info / "entry_points.txt").write_text(
        f"[jupyter_ai.personas]\nlily = {MODULE}:{CLASS}\n", encoding="utf-8")
    (dist_info / "INSTALLER").write_text("lily\n", encoding="utf-8")
    files = [package / "__init__.py", package / "lily.svg", dist_info / "METADATA",
             dist_info / "entry_points.txt", dist_info / "INSTALLER"]
    lines = [_record_line(site, f) for f in files] + [
        f"{(dist_info / 'RECORD').relative_to(site).as_posix()},,"]
    (dist_info / "RECORD").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return package / "__init__.py"
