"""The Help menu's "Lily help" entry: a static page shipped in the kernelspec folder."""
from __future__ import annotations

import html
import os
import subprocess
import sys

from lily_kernel.commands.table import BUILTINS


def test_the_help_page_lists_every_built_in_command():
    from lily_kernel.jupyter.help_page import page as render
    page = render()
    for command in BUILTINS:
        assert f"<code>{html.escape(command.usage)}</code>" in page, command.name
        assert html.escape(command.summary) in page, command.name
    assert "<script" not in page.lower()


def test_install_ships_the_page_and_the_kernel_links_to_it(tmp_path, lily):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_", "LILY_"))}
    env["HOME"] = str(tmp_path)
    prefix = tmp_path / "prefix"
    proc = subprocess.run([sys.executable, "-m", "lily_kernel", "install", "--prefix", str(prefix)],
                          capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    installed = prefix / "share" / "jupyter" / "kernels" / "lily" / "help.html"
    assert "/reload_skills" in installed.read_text(encoding="utf-8")
    reply = lily.kc.kernel_info(reply=True, timeout=10)["content"]
    assert reply["help_links"] == [{"text": "Lily help", "url": "/kernelspecs/lily/help.html"}]
