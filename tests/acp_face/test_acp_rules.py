"""The ACP face's own rules on plain data: the user's text after a client's preamble, the
streamed text made inert, stdout kept for the protocol (docs/front-ends.md#acp)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from lily_kernel.acp.acp_updates import StreamedText
from lily_kernel.acp.prompt_text import PromptText, read_prompt, user_text
from lily_kernel.commands import sanitize

NOTE = "System note: When creating or editing Jupyter notebooks (.ipynb), use the tools."


def test_the_command_is_found_after_jupyter_ais_system_note():
    assert user_text(f"{NOTE}\n\n/skills --all") == "/skills --all"
    assert PromptText(user_text(f"{NOTE}\n\n/skills")).is_command


def test_a_mention_before_a_command_is_dropped_but_not_before_prose():
    assert user_text("@Lily /help") == "/help"
    assert user_text("@Lily what is up") == "@Lily what is up"


def test_jupyter_ais_recovery_transcript_is_read_past():
    text = ("The previous ACP session could not be loaded. Use this recent chat transcript.\n"
            "<conversation_history>\nUser: /skills\nLily: 3 skills\n</conversation_history>"
            f"\n\nCurrent user message:\n{NOTE}\n\n/help")
    assert user_text(text) == "/help"


def test_a_system_note_alone_is_the_text_and_a_command_inside_prose_is_not_a_command():
    assert user_text(NOTE) == NOTE
    assert not PromptText(user_text("please run /skills for me")).is_command


def test_attachments_are_named_relative_to_the_workspace(tmp_path):
    blocks = [SimpleNamespace(type="text", text="look at this"),
              SimpleNamespace(type="resource_link", uri=(tmp_path / "data" / "a b.csv").as_uri()),
              SimpleNamespace(type="resource_link", uri="file:///elsewhere/x.txt"),
              SimpleNamespace(type="image", data="...")]
    prompt = read_prompt(blocks)
    assert prompt.request(tmp_path) == ("look at this\n\nAttached:\n- data/a b.csv\n"
                                        "- /elsewhere/x.txt")


def _stream(text: str, size: int) -> str:
    streamed = StreamedText()
    out = [streamed.feed(text[i:i + size]) for i in range(0, len(text), size)]
    out.append(streamed.finish())
    return "".join(out)


def test_streamed_html_and_script_links_arrive_inert():
    """An attack: the model streams raw HTML and a javascript: link in small pieces; what the
    client receives is what sanitize.markdown makes of the whole answer, nothing more."""
    evil = ("Here you go:\n<img src=x onerror=alert(document.cookie)>\n"
            "[click](javascript:alert(1)) and <script>steal()</script>\nbye")
    sent = _stream(evil, 3)
    assert sent == sanitize.markdown(evil.rstrip())
    assert "<img" not in sent and "<script" not in sent and "](javascript:" not in sent


@given(st.text(alphabet=st.sampled_from(list("ab <>[]()*#`-|\n:/ja")), max_size=120),
       st.integers(min_value=1, max_value=9))
def test_what_is_streamed_never_differs_from_the_sanitised_answer_except_by_a_restart(text, size):
    """Whatever arrives piecewise, the client ends up with the sanitised answer: exactly it,
    or (when a later line changed how an earlier one renders) what was sent, a break and it."""
    sent = _stream(text, size)
    whole = sanitize.markdown(text.rstrip())
    assert sent == whole or sent.endswith("\n\n" + whole)


def test_nothing_but_the_protocol_reaches_stdout():
    """A stray print after `lily acp` took stdout goes to stderr; the kept descriptor is
    the only way to the real stdout."""
    code = ("import os\nfrom lily_kernel.acp.acp_server import _keep_stdio\n"
            "read_fd, write_fd = _keep_stdio()\nprint('stray print', flush=True)\n"
            "os.write(1, b'stray write\\n')\nos.write(write_fd, b'{\"jsonrpc\": \"2.0\"}\\n')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         input="", timeout=120, cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout == '{"jsonrpc": "2.0"}\n'
    assert "stray print" in out.stderr and "stray write" in out.stderr


def test_lily_acp_without_the_sdk_says_which_extra_to_install():
    code = ("import sys\nsys.modules['acp'] = None  # as if agent-client-protocol were absent\n"
            "from lily_kernel.cli import main\nsys.exit(main(['acp']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         input="", timeout=120)
    assert out.returncode == 1
    assert out.stderr == ("Error: lily acp needs the Agent Client Protocol SDK: from a "
                          "checkout, .venv/bin/pip install -e '.[acp]'.\n")


def test_the_probe_stands_in_for_every_lily_import_of_the_code_it_ships():
    """The notebook tools' source runs inside a notebook's kernel where Lily is not
    installed (acp/kernel_probe.py): each of its Lily imports needs a stand-in there."""
    import ast
    import importlib
    import types
    from pathlib import Path

    from lily_kernel.acp import kernel_probe
    from lily_kernel.tools import bounded, notebook_tools
    found = set()
    for module in (notebook_tools, bounded):
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lily"):
                found.add(node.module)  # and the modules it names (from lily_kernel.tools import x)
                names = vars(importlib.import_module(node.module))
                found |= {f"{node.module}.{a.name}" for a in node.names
                          if isinstance(names.get(a.name), types.ModuleType)}
        found |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                  for alias in node.names if alias.name.startswith("lily")}
    assert found <= set(kernel_probe.STAND_INS), found - set(kernel_probe.STAND_INS)
