"""A model with vision sees the plots (docs/agent.md#images, issue 34 §1), in a real Lily
kernel against the scripted server: with ``[model] vision = true`` a matplotlib plot that
run_python drew reaches the model as an image part right after the tool results, the
journal keeps its hash and never its bytes, and an endpoint that refuses image parts
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
