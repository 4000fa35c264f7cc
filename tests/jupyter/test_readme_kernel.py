"""The README's recipes and its notebook tour, run as written (issue 43 §1).

Each "Use a real model" recipe is read from the README: the server it starts is stood in
for by the scripted server (lily_kernel/testing), serving what that server serves (one
model for llama.cpp and vLLM, several for Ollama, LM Studio and OpenAI) at the URL shape the
recipe gives; `make lab` is a real Lily kernel started with the recipe's environment.
The tour's cells run in order in one real kernel, its shell blocks in bash, and the
kernel restarts where the README says so, to resume. tests/test_readme.py checks the rest
(the command table, the make targets, the links).
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from agent_support import Script
from kernel_support import Kernel, call, make_world

from lily_kernel.testing.server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")

# recipe -> (the command that starts the server, its port, what the stand-in serves)
SERVERS = {
    "openai": (None, None, {"models": ["gpt-4o", "o4-mini"], "model": "gpt-4o-mini"}),
    "llama.cpp": ("llama-server", 8080, {"props": {"default_generation_settings": {"n_ctx": 4096}}}),
    "ollama": ("ollama", 11434, {"models": ["llama3.2:3b"]}),
    "vllm": ("vllm", 8000, {"max_model_len": 32768}),
    "lm-studio": ("lms", 1234, {"models": ["text-embedding-nomic-embed-text-v1.5"]}),
}


def marked(kind: str | None = None) -> list[tuple[str, str, str]]:
    """``(marker, body, the prose before it)`` of each ``<!-- doc-test: ... -->`` block."""
    out = []
    for m in re.finditer(r"<!-- doc-test: ([a-z.-]+) -->\n```[a-z]*\n(.*?)\n```", README, re.S):
        if kind is None or m.group(1) == kind:
            before = README[: m.start()].rsplit("```", 1)[-1]
            out.append((m.group(1), m.group(2), before))
    return out


def recipe_env(body: str) -> tuple[dict[str, str], str | None]:
    """The environment a recipe gives `make lab`, and the model its server serves."""
    env: dict[str, str] = {}
    served = None
    for line in body.splitlines():
        words = shlex.split(line)
        if words[0] == "export":
            key, _, value = words[1].partition("=")
            env[key] = value
        elif words[-2:] == ["make", "lab"]:
            env.update(w.split("=", 1) for w in words[:-2])
        elif words[0] == "llama-server":
            served = words[words.index("-m") + 1]  # llama-server lists the model file it loaded
        elif words[:2] in (["vllm", "serve"], ["ollama", "pull"]):
            served = words[2]
    return env, served


def start(tmp_path: Path, ipython_dir: Path, env: dict[str, str], label: str = "") -> Kernel:
    world = make_world(tmp_path, ipython_dir, LILY_MAX_RETRIES="0", LILY_TIMEOUT="5",
                       LILY_DATA_DIR=str(tmp_path / "data"), **env)
    for key in ("SKILLS_WORKSPACE_DIR", "SKILLS_USER_DIR"):  # as a user has them: unset
        world.env.pop(key)
    if label:
        world.env["JPY_SESSION_NAME"] = label
    return Kernel("lily", world)


def shown(run) -> str:
    return " ".join(str(d.get("text/plain", "")) + str(d.get("text/markdown", ""))
                    for d in run.displays)


@pytest.mark.parametrize("recipe", sorted(SERVERS))
def test_each_model_recipe_works_as_written(recipe, tmp_path, ipython_dir):
    (block,) = [body for _, body, _ in marked(recipe)]
    command, port, serves = SERVERS[recipe]
    if command:
        assert any(shlex.split(line)[0] == command for line in block.splitlines()), block
    env, served = recipe_env(block)
    named = env.get("LILY_MODEL")
    model = served or named or serves.get("model")
    assert model, "the recipe names no model and its server serves none"
    stand_in = dict(serves)
    stand_in["model"] = stand_in.get("model", model)
    if named and named != stand_in["model"]:
        stand_in["models"] = [*stand_in.get("models", []), named]
    with ScriptedServer(["Hello."], **stand_in) as server:
        if port:  # the URL shape of that server, the stand-in's port for its own
            url = urlsplit(env["OPENAI_BASE_URL"])
            assert (url.hostname, url.port, url.path) == ("127.0.0.1", port, "/v1"), url
            env["OPENAI_BASE_URL"] = server.url
        else:  # OpenAI: the key is what the recipe sets; the stand-in plays api.openai.com
            assert env["OPENAI_API_KEY"].startswith("sk-") and "OPENAI_BASE_URL" not in env
            env["OPENAI_BASE_URL"] = server.url
        kernel = start(tmp_path, ipython_dir, env)
        try:
            assert "Error" not in shown(kernel.ok("/model"))
            assert kernel.run("hello").status == "ok"
            request = server.chat_requests()[-1]
            assert request["model"] == model
        finally:
            kernel.shutdown()


def test_the_lily_toml_recipe_works_after_trust(tmp_path, ipython_dir):
    (toml,) = [body for _, body, _ in marked("lily.toml")]
    assert "/trust" in README and "`/trust --yes`" in README
    with ScriptedServer(["Hello."], model="qwen2.5:7b", models=["llama3.2:3b"]) as server:
        written = toml.replace("http://127.0.0.1:11434/v1", server.url)
        assert written != toml
        kernel = start(tmp_path, ipython_dir, {})
        (kernel.workspace / "lily.toml").write_text(written, encoding="utf-8")
        try:
            kernel.ok("/new")  # reads lily.toml
            refused = kernel.run("hello")
            assert refused.status == "error" and "/trust --yes" in refused.error_line()
            kernel.ok("/trust")
            kernel.ok("/trust --yes")
            assert kernel.run("hello").status == "ok"
            assert server.chat_requests()[-1]["model"] == "qwen2.5:7b"
            # the third place: `/model base_url=URL NAME` in the notebook
            assert "`/model base_url=URL NAME`" in README
            server.add("Hello again.")
            kernel.ok(f"/model base_url={server.url} llama3.2:3b")
            assert kernel.run("hello").status == "ok"
            assert server.chat_requests()[-1]["model"] == "llama3.2:3b"
        finally:
            kernel.shutdown()


# the scripted model's turns for each request of the tour, by cell
TOUR_TURNS = {
    "Which month sold the most in @sales?": ["March, with 160 units."],
    "Plot @sales as a bar chart.": [call("run_python",
                                         {"code": "sales.plot.bar(x='month', y='units')"}, "p1")],
    "/confirm": ["The bar chart shows March highest."],
    "/haiku autumn sales": ["Leaves fall on the charts / March's bar stands above the rest "
                            "/ units climb like vines"],
}


def test_the_notebook_tour_runs_as_written(tmp_path, ipython_dir):
    pytest.importorskip("matplotlib")
    pytest.importorskip("pandas")
    steps = [(kind, body, before) for kind, body, before in marked()
             if kind in ("cell", "shell")]
    assert len(steps) >= 8
    lily = str(Path(sys.executable).parent / "lily")
    script = Script("the README's tour")
    with ScriptedServer(script, model="qwen2.5-7b-instruct-q4_k_m.gguf") as server:
        env = {"OPENAI_BASE_URL": server.url, "MPLBACKEND": "Agg"}
        kernel = start(tmp_path, ipython_dir, env, label="tour.ipynb")
        checkout = tmp_path / "checkout"
        checkout.mkdir()
        (checkout / "lab").symlink_to(kernel.workspace)
        try:
            for kind, body, before in steps:
                if kind == "shell":  # from the checkout, whose lab/ is the workspace
                    shell = body.replace(".venv/bin/lily", shlex.quote(lily))
                    done = subprocess.run(["bash", "-euc", shell], cwd=checkout,
                                          env=kernel.world.env,
                                          capture_output=True, text=True, timeout=120)
                    assert done.returncode == 0, (body, done.stderr)
                    if "lily logs" in body:
                        assert "tour.ipynb" in done.stdout, done.stdout
                    continue
                if "Restart the kernel" in before:
                    kernel.shutdown()
                    kernel = start(tmp_path, ipython_dir, env, label="tour.ipynb")
                    resumed = kernel.ok("/rewind")
                    assert "Resumed" in str(resumed.messages)  # the conversation is back
                script.turns.extend(TOUR_TURNS.get(body, []))
                run = kernel.run(body, timeout=60)
                assert run.status == "ok", (body, run.error_line())
                if body.startswith("/haiku"):
                    assert "exactly one haiku" in str(server.chat_requests()[-1]["messages"])
                if body == "/mode edits":
                    assert "edits" in shown(run)
            assert not script.turns, "a scripted turn was not used"
        finally:
            kernel.shutdown()
