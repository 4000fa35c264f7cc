"""Secrets never reach the disk of a real Lily kernel (docs/limits-and-secrets.md#secrets).

A kernel with its own HOME and IPython directory uses an API key, a ``/model base_url``
carrying ``user:password@`` and an endpoint whose error body echoes the request headers.
After it shuts down, no file under its world (workspace, journal, HOME, IPython's
``history.sqlite``) holds the key or the password, and every error it showed was one line.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from kernel_support import Kernel, make_world

from lily_kernel.testing.server import ScriptedServer

KEY = "sk-kernel-attack-0123456789SECRET"
PASSWORD = "pw-kernel-url-55aa77"
TOKEN = "tok-outbox-kernel-13579bdf"


def files_holding(root: Path, needle: str) -> list[str]:
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            try:
                if needle.encode() in path.read_bytes():
                    found.append(str(path))
            except OSError:
                pass
    return found


def test_no_secret_on_disk_after_a_kernel_session_that_used_them(tmp_path):
    with ScriptedServer() as server:
        world = make_world(tmp_path, OPENAI_API_KEY=KEY, LILY_OUTBOX_TOKEN=TOKEN,
                           OPENAI_BASE_URL=server.url, LILY_MAX_RETRIES="0", LILY_TIMEOUT="5")
        kernel = Kernel("lily", world)
        try:
            server.add({"status": 400, "echo_headers": True, "error_message": "denied"})
            line = kernel.run("please answer").error_line()  # the body echoes "Bearer <key>"
            assert KEY not in line and "Bearer ***" in line
            secret_url = server.url.replace("http://", f"http://lily:{PASSWORD}@")
            run = kernel.ok(f"/model base_url={secret_url}")
            shown = str(run.displays)
            assert PASSWORD not in shown and "***@" in shown
            server.add({"status": 400, "echo_headers": True, "error_message": "denied"})
            line = kernel.run("please answer").error_line()  # now "Basic <base64 user:pw>"
            assert PASSWORD not in line and "Basic ***" in line
            failed = kernel.run(f"/skill nothing-{KEY}")
            assert KEY not in failed.error_line()
            assert KEY not in str(failed.reply) and KEY not in str(failed.errors)  # evalue too
            kernel.ok(f'%%python\nk = "{KEY}"')  # a Python cell: the live key is masked too
            history = kernel.ok("%%python\nprint(repr(In[-6:]))").stdout
            assert PASSWORD not in history and KEY not in history
        finally:
            kernel.shutdown()
    databases = list(Path(world.env["IPYTHONDIR"]).rglob("history.sqlite"))
    assert databases, "the kernel kept no input history to check"
    with sqlite3.connect(databases[0]) as db:
        rows = db.execute("SELECT source, source_raw FROM history").fetchall()
    assert any("/model base_url=http://***@" in raw for _, raw in rows), rows
    # a command cell is redacted once: its stored Python form is rebuilt from the redacted cell
    (raw,) = [raw for _, raw in rows if raw.startswith("/model base_url=")]
    assert (f"get_ipython().run_cell_magic('lily', '', {raw + chr(10)!r})", raw) in rows
    for secret in (KEY, PASSWORD, TOKEN):
        assert files_holding(tmp_path, secret) == [], secret


def test_load_ext_keeps_secrets_out_of_history_and_unload_restores_it(tmp_path):
    world = make_world(tmp_path, OPENAI_API_KEY=KEY)
    kernel = Kernel("python3", world)
    try:
        kernel.ok("%load_ext lily")
        kernel.ok(f"/model base_url=http://lily:{PASSWORD}@127.0.0.1:9/v1")
        kernel.ok(f'k = "{KEY}"')
        kernel.ok("%unload_ext lily")
        restored = kernel.ok("print('store_inputs' in get_ipython().history_manager.__dict__)")
        assert restored.stdout.strip() == "False"  # IPython's own method again
    finally:
        kernel.shutdown()
    (database,) = Path(world.env["IPYTHONDIR"]).rglob("history.sqlite")
    with sqlite3.connect(database) as db:
        raws = [raw for (raw,) in db.execute("SELECT source_raw FROM history")]
    assert "/model base_url=http://***@127.0.0.1:9/v1" in raws
    assert 'k = "***"' in raws
    assert files_holding(tmp_path, PASSWORD) == [] and files_holding(tmp_path, KEY) == []
