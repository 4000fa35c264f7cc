"""Attack: a journal whose notebook name, request and answer carry terminal control
sequences (OSC 52 writes the clipboard, CSI clears the screen, a C1 CSI, a bidi override).
What the ``lily`` command prints shows them as escapes and obeys none; its JSON still
decodes to the very text journaled (docs/trust-boundary.md#display)."""
from __future__ import annotations

import json
import re

from lily_kernel.cli import main
from lily_kernel.commands.sanitize import terminal_text
from lily_kernel.session.journal import Journal

SID = "c" * 32
HOSTILE = "ok\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b31m\u202eexe.txt\rhidden\x7f"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def journal(ws) -> None:
    j = Journal(ws / ".lily" / "journal" / "s.jsonl")
    j.append({"event": "session_created", "session_id": SID, "notebook": f"nb{HOSTILE}.ipynb"})
    j.append({"event": "prose", "session_id": SID, "text": f"asked {HOSTILE}"})
    j.append({"event": "message", "session_id": SID,
              "message": {"role": "assistant", "content": f"answered {HOSTILE}"}})


def test_logs_list_and_show_obey_no_control_sequence(tmp_path, capsys):
    journal(tmp_path)
    for argv in (["logs", "--workspace", str(tmp_path)],
                 ["logs", "show", SID[:8], "--workspace", str(tmp_path)]):
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert RAW.search(out) is None and RAW.search(err) is None, (argv, out, err)
        assert "\\u001b]52;c;" in out  # shown, not hidden
    assert main(["logs", "show", SID[:8], "--json", "--workspace", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert RAW.search(out) is None
    answers = [a for turn in json.loads(out)["turns"] for a in turn["answers"]]
    assert answers == [f"answered {HOSTILE}"]  # the JSON decodes to what was journaled


def test_terminal_text_keeps_text_and_escapes_only_controls():
    assert terminal_text("tab\tnew\nline é ü 中") == "tab\tnew\nline é ü 中"
    assert terminal_text("\x1b[31m") == "\\u001b[31m"
    assert terminal_text("\u202e\u2066\x9b\x7f\r") == "\\u202e\\u2066\\u009b\\u007f\\u000d"
