"""A private JupyterLab for the browser tests, and helpers to drive it with Playwright.

:class:`Lab` starts ``jupyter lab`` on 127.0.0.1 (a free port, a random token)
in a temporary root folder, with HOME, the Jupyter config/data/runtime folders
and the IPython folder of its own and the Lily kernelspec installed into a
private prefix on ``JUPYTER_PATH``: nothing reads or writes the machine's
Jupyter set-up, and no model variable is inherited (notebooks point Lily at a
ScriptedServer themselves). The helpers wait on what the page shows, never on
sleeps.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent.parent
_INHERITED_PREFIXES = ("OPENAI_", "SKILLS_", "LILY_", "JPY_", "JUPYTER_")
STEP = 30_000  # ms: generous, the test machines are shared and loaded


def chromium_path() -> str | None:
    """Debian's Chromium (never a browser Playwright downloads); ``LILY_CHROMIUM`` overrides."""
    chosen = os.environ.get("LILY_CHROMIUM")
    if chosen is not None:
        return chosen if os.access(chosen, os.X_OK) else None
    if os.path.exists("/usr/bin/chromium"):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


def missing() -> str | None:
    """Why the browser suite cannot run here, or None."""
    if chromium_path() is None:
        return "Chromium not found (/usr/bin/chromium or chromium on PATH): apt-get install chromium"
    for module, extra in (("playwright", "playwright"), ("jupyterlab", "jupyterlab"),
                          ("notebook", "notebook")):
        try:
            __import__(module)
        except ImportError:
            return f"the Python package '{extra}' is not installed (pip install -e '.[test]')"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def code_notebook(path: Path, *cells: str) -> Path:
    """Write a Lily notebook with these code cells (no outputs)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "lily", "display_name": "Lily", "language": "markdown"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nb, path)
    return path


class Lab:
    """One JupyterLab server for the session; ``app="notebook"``: a Notebook 7 server
    (the ``notebook`` package: the same output renderers, its own pages)."""

    def __init__(self, base: Path, app: str = "lab") -> None:
        self.base = base
        self.app = app
        self.root = base / "root"
        self.root.mkdir(parents=True)
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = self._environment()
        self._install_kernelspec()
        self.log = open(base / "jupyterlab.log", "wb")
        own = (["-m", "jupyterlab", "--LabApp.expose_app_in_browser=True",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.news_url="] if app == "lab" else
               ["-m", "notebook", "--JupyterNotebookApp.expose_app_in_browser=True"])
        self.proc = subprocess.Popen(
            [sys.executable, *own, "--no-browser",
             "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
             "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={self.root}", "--ServerApp.allow_root=True",
             "--ServerApp.terminals_enabled=False"],
            cwd=str(self.root), env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_PREFIXES)}
        dirs = {name: self.base / name for name in
                ("home", "config", "data", "runtime", "prefix", "ipython", "user_skills")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        # the news toast would cover the page: JupyterLab reads this page_config at start
        labconfig = dirs["config"] / "labconfig"
        labconfig.mkdir()
        (labconfig / "page_config.json").write_text(json.dumps({"disabledExtensions": {
            "@jupyterlab/apputils-extension:announcements": True}}))
        env.update({
            "HOME": str(dirs["home"]),
            "JUPYTER_CONFIG_DIR": str(dirs["config"]),
            "JUPYTER_DATA_DIR": str(dirs["data"]),
            "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
            "JUPYTER_PATH": str(dirs["prefix"] / "share" / "jupyter"),
            "IPYTHONDIR": str(dirs["ipython"]),
            "SKILLS_USER_DIR": str(dirs["user_skills"]),
            # the model's run_python behind its card, as where the sandbox is unavailable:
            # the cards are what this suite shows (the sandboxed run: test_gate_kernel.py)
            "LILY_SANDBOX": "off",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                          if p),
        })
        return env

    def _install_kernelspec(self) -> None:
        subprocess.run([sys.executable, "-m", "lily_kernel", "install", "--prefix",
                        str(self.base / "prefix")], env=self.env, check=True,
                       capture_output=True, timeout=120)

    def _wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter {self.app} exited {self.proc.returncode}: {self.logs()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}",
                                            timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"jupyter lab did not start within {timeout:g} s: {self.logs()}")

    def logs(self) -> str:
        self.log.flush()
        return (self.base / "jupyterlab.log").read_text(errors="replace")[-4000:]

    def api(self, path: str) -> object:
        with urllib.request.urlopen(f"{self.url}{path}?token={self.token}", timeout=10) as r:
            return json.load(r)

    def page_url(self, notebook: str) -> str:
        if self.app == "notebook":
            return f"{self.url}/notebooks/{notebook}?token={self.token}"
        return f"{self.url}/lab/tree/{notebook}?token={self.token}&reset"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


STATUS_JS = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return k ? k.status : 'none';
}"""


class Notebook:
    """One notebook open in the page, driven as a person would (keys, clicks)."""

    def __init__(self, page, lab: Lab, name: str) -> None:
        self.page, self.lab, self.name = page, lab, name
        page.goto(lab.page_url(name))
        self.wait_idle()

    def wait_idle(self, timeout: int = 90_000) -> None:
        self.page.wait_for_function(f"({STATUS_JS})() === 'idle'", timeout=timeout, polling=200)

    def command(self, name: str) -> None:
        """Run a JupyterLab command without waiting for it (it may open a dialog)."""
        self.page.evaluate(f"() => {{ window.jupyterapp.commands.execute({name!r}); }}")

    def cell(self, index: int):
        return self.page.locator(".jp-Notebook .jp-Cell").nth(index)

    def output(self, index: int):
        return self.cell(index).locator(".jp-OutputArea")

    def prompt(self, index: int):
        return self.cell(index).locator(".jp-InputPrompt")

    def run(self, index: int) -> None:
        """Click into the cell and press Shift+Enter."""
        self.cell(index).locator(".cm-content").click()
        self.page.keyboard.press("Shift+Enter")

    def type_into(self, index: int, text: str) -> None:
        editor = self.cell(index).locator(".cm-content")
        editor.click()
        self.page.keyboard.press("Control+A")
        self.page.keyboard.press("Delete")
        self.page.keyboard.type(text)

    def complete(self, index: int, text: str, match: str) -> None:
        """Type ``text`` into cell ``index`` and press Tab: the completer offers the one
        ``match``, and Enter accepts it."""
        from playwright.sync_api import expect
        self.type_into(index, text)
        self.page.keyboard.press("Tab")
        completer = self.page.locator(".jp-Completer")
        expect(completer).to_be_visible()
        expect(completer.locator(".jp-Completer-item")).to_have_text([match])
        self.page.keyboard.press("Enter")

    def save(self) -> None:
        self.command("docmanager:save")
        self.page.wait_for_function(
            "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=STEP)

    def restart(self) -> None:
        """Kernel > Restart Kernel…, then the dialog's Restart button."""
        self.command("notebook:restart-kernel")
        self.page.locator(".jp-Dialog .jp-mod-accept").click()
        self.page.locator(".jp-Dialog").wait_for(state="detached")
        self.wait_idle()
