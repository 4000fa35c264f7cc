"""docs/logs.md#captured-reads, as an attack in a real Lily kernel: with ``capture_reads``
on, a ``.env`` that is not valid UTF-8 and holds the live API key (and another key-like
secret) is journaled as "binary, N bytes, sha256 …", never its bytes (base64 would carry
the key past redaction into the journal and into ``lily logs replay``'s files)."""
from __future__ import annotations

import base64
import hashlib
import json

import pytest
from kernel_support import Kernel, make_world

from lily_kernel.cli import main
from lily_kernel.session.logs import Logs
from lily_kernel.settings import workspace_trust
from lily_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("no_machine_model")

LIVE_KEY = "sk-live-0123456789abcdefDONOTLEAK"
OTHER = "sk_test_OTHERSECRET42XYZ"
ENV_FILE = (b"# caf\xe9: latin-1, not UTF-8\nOPENAI_API_KEY=" + LIVE_KEY.encode()
            + b"\nSTRIPE_SECRET_KEY=" + OTHER.encode() + b"\n")


def test_a_non_utf8_env_file_never_reaches_the_journal(tmp_path, ipython_dir, capsys):
    turns = [{"tool_calls": [{"name": "read", "arguments": {"path": ".env"}, "id": "r1"}]},
             {"content": "It sets two variables."}]
    with ScriptedServer(turns) as server:
        world = make_world(tmp_path, ipython_dir, OPENAI_BASE_URL=server.url,
                           OPENAI_API_KEY=LIVE_KEY, LILY_MAX_RETRIES="0",
                           JPY_SESSION_NAME="leak.ipynb")
        (world.workspace / ".env").write_bytes(ENV_FILE)
        (world.workspace / "lily.toml").write_text("[journal]\ncapture_reads = true\n")
        workspace_trust.trust(world.workspace, world.env)  # capture_reads needs trust
        kernel = Kernel("lily", world)
        try:
            kernel.ok("What does .env set?", timeout=60)
        finally:
            kernel.shutdown()
        assert server.remaining() == 0
    journal = b"".join(p.read_bytes() for p in (world.workspace / ".lily").rglob("*.jsonl"))
    encoded = base64.b64encode(ENV_FILE)
    assert LIVE_KEY.encode() not in journal
    assert encoded not in journal and encoded[:40] not in journal
    logs = Logs(world.workspace)
    (sid,) = logs.by_session
    (read,) = [r for r in logs.checked(sid) if r.get("event") == "file_read"]
    digest = hashlib.sha256(ENV_FILE).hexdigest()
    assert read["binary"] == f"binary, {len(ENV_FILE)} bytes, sha256 {digest}"
    assert read["sha256"] == digest and read["bytes"] == len(ENV_FILE)
    assert OTHER not in json.dumps(read)  # a key that is not live: not in the record either
    assert set(read) == {"prev", "t", "event", "session_id", "path", "bytes", "binary",
                         "sha256", "_file", "_line", "_mark", "kid", "mac"}  # no text, no base64
    # the replay's files carry neither the key nor the bytes
    out = tmp_path / "replays"
    assert main(["logs", "replay", sid[:8], "--to", str(out), "--no-run",
                 "--workspace", str(world.workspace)]) == 0
    capsys.readouterr()
    for path in out.iterdir():
        data = path.read_bytes()
        assert LIVE_KEY.encode() not in data and encoded[:40] not in data, path
    script = json.loads(next(out.glob("*.replay.json")).read_text())
    assert ".env" not in script["files"]  # not rebuilt: its content was never recorded
