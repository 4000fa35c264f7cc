"""The default bundle is a notebook user's (issue 34 §6): a fresh Lily kernel's ``/skills``
lists no messaging skill, and no request carries the typed messaging skills or their tools;
``SKILLS_EXAMPLES=1`` (the documented opt-in, docs/loader.md#roots) and ``/new`` bring
them in. A real kernel (jupyter_client) with the repository's own bundle, and the
scripted model."""
from __future__ import annotations

import json

import pytest
from kernel_support import scripted_kernel

EXAMPLES = ("read_receipts", "send_message")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    with scripted_kernel(tmp_path_factory.mktemp("bundle"), ipython_dir, server.url) as k:
        yield k


def skills_text(kernel) -> str:
    run = kernel.run("/skills")
    assert run.status == "ok", run.messages
    return "\n".join(d.get("text/plain", "") for d in run.displays)


def test_a_fresh_notebook_has_no_messaging_skills_and_sends_none(kernel, server, turns):
    listed = skills_text(kernel)
    assert "todo_scan" in listed and "explore_data" in listed, listed
    for name in EXAMPLES:
        assert name not in listed
    assert "/send" not in listed and "/receipts" not in listed
    everything = kernel.run("/skills --all")
    assert not any(name in json.dumps(everything.displays) for name in EXAMPLES)

    turns.append("hello")
    assert kernel.run("What can you do?").status == "ok"
    request = json.dumps(server.chat_requests()[-1])
    for word in (*EXAMPLES, "ActivityPub", "propose_action", "read_config"):
        assert word not in request, word
    refused = kernel.run("/send {\"recipient\": \"alice\", \"content\": \"hi\"}")
    assert "unknown command /send" in refused.error_line()


def test_skills_examples_turns_them_on(kernel, server, turns):
    kernel.ok("%env SKILLS_EXAMPLES=1")  # as README says, in a Lily kernel's cell
    kernel.ok("/new")  # the environment as it is now
    listed = skills_text(kernel)
    for name in EXAMPLES:
        assert name in listed, listed
    assert "examples" in listed  # their source
    kernel.ok("%%python\nimport os\ndel os.environ['SKILLS_EXAMPLES']")
    kernel.ok("/new")
    assert "send_message" not in skills_text(kernel)
