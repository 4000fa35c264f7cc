"""SPEC §1: one pure-Python core that imports nothing from Jupyter; the faces sit on top."""
from __future__ import annotations

import subprocess
import sys

CORE = ["skills.skill", "skills.frontmatter", "skills.fastyaml", "skills.loader", "skills.snapshot",
        "commands.router", "commands.table", "commands.help", "commands.render", "commands.results",
        "session.session", "session.persona", "session.journal", "agent.tools", "agent.builtin_tools",
        "agent.config", "agent.client", "agent.prompt", "agent.loop", "commands.completion",
        "skills.validator", "typed.declarations", "typed.contacts", "typed.actions", "typed.registry",
        "typed.activity", "skills.paths", "cli"]
JUPYTER = ("IPython", "ipykernel", "ipywidgets", "jupyter_client", "jupyter_core", "zmq",
           "nbformat", "nbclient", "comm", "traitlets")


def test_core_imports_nothing_from_jupyter():
    code = ("import sys\n"
            + "".join(f"import lily_kernel.{m}\n" for m in CORE)
            + f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({JUPYTER!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_openai_is_imported_only_when_a_request_is_made():
    code = ("import sys\nimport lily_kernel.agent.loop, lily_kernel.session.session\n"
            "lily_kernel.session.session.Session(journal=False)\nprint('openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
