"""SPEC §1: one pure-Python core that imports nothing from Jupyter; the faces sit on top."""
from __future__ import annotations

import subprocess
import sys

CORE = ["skill", "frontmatter", "fastyaml", "loader", "snapshot", "router", "commands", "help",
        "render", "results", "session", "persona", "journal", "tools", "builtin_tools",
        "model_config", "model", "context", "agent", "completion", "validator", "typed",
        "contacts", "actions", "config_registry", "activity", "paths", "cli"]
JUPYTER = ("IPython", "ipykernel", "ipywidgets", "jupyter_client", "jupyter_core", "zmq",
           "nbformat", "nbclient", "comm", "traitlets")


def test_core_imports_nothing_from_jupyter():
    code = ("import sys\n"
            + "".join(f"import lily_kernel.{m}\n" for m in CORE)
            + f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({JUPYTER!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_openai_is_imported_only_when_a_request_is_made():
    code = ("import sys\nimport lily_kernel.agent, lily_kernel.session\n"
            "lily_kernel.session.Session(journal=False)\nprint('openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
