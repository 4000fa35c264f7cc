"""A model with vision sees the plots (docs/agent.md#images, issue 34 §1), in a real Lily
kernel against the scripted server: with ``[model] vision = true`` (or a model known to
take images) a matplotlib plot that run_python drew reaches the model as an image part
right after the tool results, and so does a plot a cell drew (through read_cells, and
``@figure`` as an image part of the request itself); the journal keeps its hash and never
its bytes; ``share_values = false`` keeps it back; an endpoint that refuses image parts
(HTTP 400) is asked again without them, and from then on."""
from __future__ import annotations

import pytest
from kernel_support import call, scripted_kernel

pytest.importorskip("matplotlib")

PLOT = ("import matplotlib.pyplot as plt\n"
        "plt.bar(['a', 'b'], [3, 5])\nplt.title('Sales')\n")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    with scripted_kernel(tmp_path_factory.mktemp("vision"), ipython_dir, server.url) as k:
        yield k


def image_parts(request: dict) -> list[str]:
    return [p["image_url"]["url"] for m in request["messages"]
            if isinstance(m.get("content"), list)
            for p in m["content"] if p.get("type") == "image_url"]


def test_a_plot_reaches_a_model_with_vision_and_the_journal_keeps_its_hash(kernel, server,
                                                                         turns):
    kernel.ok("%%python\nimport lily\nlily.session().set_model(vision='true')")
    turns.append(call("run_python", {"code": PLOT}, "v1"))
    assert kernel.run("plot the sales").status == "ok"
    turns.append("Two bars, b higher.")
    assert kernel.run("/confirm").status == "ok"
    last = server.chat_requests()[-1]
    roles = [m["role"] for m in last["messages"]]
    at = next(i for i, m in enumerate(last["messages"]) if m.get("tool_call_id") == "v1")
    assert roles[at + 1] == "user", roles  # right after the tool result
    parts = image_parts(last)
    assert len(parts) == 1 and parts[0].startswith("data:image/png;base64,iVBOR"), parts[:1]
    journal = "".join(p.read_text() for p in
                      (kernel.workspace / ".lily" / "journal").glob("*.jsonl"))
    assert "lily-image:sha256:" in journal and "iVBOR" not in journal

    # an endpoint that refuses images: asked again without them, and from then on
    turns.append(call("run_python", {"code": PLOT}, "v2"))
    assert kernel.run("again").status == "ok"
    before = len(server.chat_requests())
    turns.extend([{"status": 400, "error_message": "Invalid content: image_url is not "
                                                   "supported by this model"},
                  "Plotted, unseen."])
    done = kernel.run("/confirm")
    assert done.status == "ok", done.messages
    refused, again = server.chat_requests()[before:]
    assert image_parts(refused) and not image_parts(again)
    assert "not sent: this model does not take images" in str(again["messages"])
    turns.append("Hello.")
    assert kernel.run("hello").status == "ok"
    assert not image_parts(server.chat_requests()[-1])


def test_without_vision_no_image_part_is_sent(tmp_path_factory, ipython_dir, server, turns):
    with scripted_kernel(tmp_path_factory.mktemp("novision"), ipython_dir, server.url) as k:
        turns.append(call("run_python", {"code": PLOT}, "n1"))
        assert k.run("plot the sales").status == "ok"
        turns.append("Plotted.")
        assert k.run("/confirm").status == "ok"
        last = server.chat_requests()[-1]
        assert not image_parts(last)
        assert all(isinstance(m.get("content"), str | None) for m in last["messages"])


SHOWN = ("%%python\nimport matplotlib.pyplot as plt\n"
         "plt.plot([1, 2, 3], [5, 1, 4], label='load')\nplt.title('Load')\nplt.show()\n")


def user_parts(request: dict) -> list[dict]:
    """The parts of the request's last user message (in a request's first call: the ask)."""
    asked = [m for m in request["messages"] if m["role"] == "user"][-1]
    return asked["content"] if isinstance(asked["content"], list) else [
        {"type": "text", "text": asked["content"]}]


@pytest.mark.parametrize("model, setting, sees", [
    ("gpt-4o-mini", None, True),  # known to take images: on without vision = true
    ("scripted-test-model", "true", True),
    ("gpt-4o-mini", "false", False),  # the setting wins over the table
    ("scripted-test-model", None, False),
])
def test_a_plot_in_a_cell_and_at_figure_reach_a_model_that_sees(
        tmp_path_factory, ipython_dir, server, turns, model, setting, sees):
    with scripted_kernel(tmp_path_factory.mktemp("cells"), ipython_dir, server.url) as k:
        vision = f", vision={setting!r}" if setting else ""
        k.ok(f"%%python\nimport lily\nlily.session().set_model(model={model!r}{vision})")
        shown = k.run(SHOWN)  # plt.show() in the cell that imports pyplot
        assert shown.status == "ok" and any("image/png" in d for d in shown.displays)
        before = len(server.chat_requests())
        turns.extend([call("read_cells", {"last": 1}, "c1"), "A dip at 2."])
        run = k.run("What does @figure show?")
        assert run.status == "ok", run.messages
        first, last = server.chat_requests()[before:]
        parts = user_parts(first)
        assert "@figure (figure):" in parts[0]["text"] and "title 'Load'" in parts[0]["text"]
        assert "line 'load': 3 points" in parts[0]["text"]
        assert [p["type"] for p in parts] == (["text", "image_url"] if sees else ["text"])
        assert len(image_parts(last)) == (2 if sees else 0)  # @figure's, then read_cells'
        for url in image_parts(last):
            assert url.startswith("data:image/png;base64,iVBOR")
        journal = "".join(p.read_text() for p in
                          (k.workspace / ".lily" / "journal").glob("*.jsonl"))
        assert "iVBOR" not in journal
        assert ("lily-image:sha256:" in journal) is sees


def test_values_not_shared_keep_a_cells_plot_from_the_model(tmp_path_factory, ipython_dir,
                                                            server, turns):
    files = {"lily.toml": "[model]\nvision = true\n[notebook]\nshare_values = false\n"}
    with scripted_kernel(tmp_path_factory.mktemp("private"), ipython_dir, server.url,
                         files=files) as k:
        assert k.run(SHOWN).status == "ok"
        before = len(server.chat_requests())
        turns.extend([call("read_cells", {"last": 1}, "p1"), "Not shown."])
        assert k.run("What does @figure show?").status == "ok"
        sent = server.chat_requests()[before:]
        assert not any(image_parts(r) for r in sent)
        assert "title 'Load'" not in str(sent)
