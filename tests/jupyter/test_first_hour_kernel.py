"""A newcomer's first hour, in real Lily kernels against the scripted server (issue 43 §2,
§3): a local endpoint with no model name uses the model it serves, with that model's
window; every message that stops a newcomer says the next step."""
from __future__ import annotations

from kernel_support import Kernel, call, make_world

from lily_kernel.testing.server import ScriptedServer

SERVED = "qwen2.5-1.5b-instruct-q4_k_m.gguf"


def local_kernel(tmp_path, ipython_dir, server_url: str | None, files=None, **env) -> Kernel:
    """A kernel as `OPENAI_BASE_URL=... make lab` starts it: no LILY_MODEL."""
    extra = {"OPENAI_BASE_URL": server_url} if server_url else {}
    world = make_world(tmp_path, ipython_dir, LILY_MAX_RETRIES="0", LILY_TIMEOUT="5",
                       LILY_DATA_DIR=str(tmp_path / "data"), **extra, **env)
    world.env.pop("SKILLS_WORKSPACE_DIR")  # ./skills, the workspace's own (set: the user's)
    for name, text in (files or {}).items():
        (world.workspace / name).write_text(text, encoding="utf-8")
    return Kernel("lily", world)


def model_text(run) -> str:
    return " ".join(str(d.get("text/plain", "")) + str(d.get("text/markdown", ""))
                    for d in run.displays)


def test_a_llama_cpp_server_with_one_model_is_used_with_its_window(tmp_path, ipython_dir):
    with ScriptedServer(["Hello from the local model."], model=SERVED,
                        props={"default_generation_settings": {"n_ctx": 4096}}) as server:
        kernel = local_kernel(tmp_path, ipython_dir, server.url)
        try:
            shown = model_text(kernel.ok("/model"))
            assert f"Lily uses {SERVED}, the one model the endpoint serves" in shown
            assert "4096" in shown and "128000" not in shown  # the server's n_ctx
            assert "auto (off" in shown  # vision: not gpt-4o-mini's "on"
            assert kernel.run("hello").status == "ok"
            assert server.chat_requests()[-1]["model"] == SERVED
        finally:
            kernel.shutdown()


def test_an_endpoint_with_several_models_and_none_named_names_them(tmp_path, ipython_dir):
    with ScriptedServer([], model="llama3.2:3b", models=["qwen2.5:7b"]) as server:
        kernel = local_kernel(tmp_path, ipython_dir, server.url)
        try:
            shown = model_text(kernel.ok("/model"))
            assert "llama3.2:3b" in shown and "qwen2.5:7b" in shown
            assert "choose one with /model NAME" in shown
            failed = kernel.run("hello")
            assert failed.status == "error"
            line = failed.error_line()
            assert "serves 2: llama3.2:3b, qwen2.5:7b" in line and "/model NAME" in line
            assert server.chat_requests() == []  # nothing sent to a guessed model
            kernel.ok("/model qwen2.5:7b")
        finally:
            kernel.shutdown()


def test_an_untrusted_workspace_endpoint_says_trust_uses_it(tmp_path, ipython_dir):
    with ScriptedServer(["Trusted now."]) as server:
        toml = f'[model]\nbase_url = "{server.url}"\n'
        kernel = local_kernel(tmp_path, ipython_dir, None, files={"lily.toml": toml})
        try:
            failed = kernel.run("hello")
            assert failed.status == "error"
            line = failed.error_line()
            assert server.url in line and "/trust --yes uses its endpoint" in line, line
            shown = model_text(kernel.ok("/model"))  # why base_url is "—"
            assert "not used until you trust the workspace" in shown
            same = f"(instead of `{server.url}`)"
            assert same not in model_text(kernel.ok("/trust"))
            kernel.ok("/trust --yes")
            assert kernel.run("hello").status == "ok"
            kernel.ok(f"/model base_url={server.url}")  # the same value, set by the user too
            review = model_text(kernel.ok("/trust"))
            assert same not in review and "(the endpoint in use already)" in review
        finally:
            kernel.shutdown()


def test_env_after_the_session_started_says_new_picks_it_up(tmp_path, ipython_dir):
    with ScriptedServer(["Hi."]) as server:
        kernel = local_kernel(tmp_path, ipython_dir, None)
        try:
            kernel.ok("/skills")  # the session starts here, without an endpoint
            kernel.ok(f"%env OPENAI_BASE_URL={server.url}")
            failed = kernel.run("hello")
            assert failed.status == "error"
            assert "run /new to start one that uses it" in failed.error_line()
            kernel.ok("/new")
            assert kernel.run("hello").status == "ok"
        finally:
            kernel.shutdown()


def test_reload_skills_names_the_untrusted_skills_it_skipped(tmp_path, ipython_dir):
    kernel = local_kernel(tmp_path, ipython_dir, None)
    try:
        kernel.ok("/skills")
        folder = kernel.workspace / "skills" / "mine"
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text("---\nname: mine\ndescription: Mine.\n---\nDo it.\n")
        said = model_text(kernel.ok("/reload_skills"))
        assert "not trusted: mine;" in said and "/trust --yes" in said, said
    finally:
        kernel.shutdown()


def test_no_tools_dropped_note_on_a_step_that_called_a_tool(tmp_path, ipython_dir):
    """The server reports far fewer prompt tokens than were sent (the sign of a template
    that drops tools), yet the model called a tool: no "could not call any" footer."""
    few = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    turns = [{**call("list", {"path": "."}, "c1"), "usage": few},
             {"content": "Listed.", "usage": few}]
    with ScriptedServer(turns, model=SERVED) as server:
        kernel = local_kernel(tmp_path, ipython_dir, server.url)
        try:
            run = kernel.run("list the files")
            assert run.status == "ok"
            assert "could not call any" not in model_text(run)
        finally:
            kernel.shutdown()


def _buttons(run) -> dict[str, str]:
    """The card's buttons: description -> comm id."""
    opened = {m["content"]["comm_id"]: m["content"]["data"]["state"]
              for m in run.of_type("comm_open")}
    return {s.get("description"): cid for cid, s in opened.items()
            if s.get("_model_name") == "ButtonModel"}


def _click(kernel: Kernel, comm_id: str) -> list[dict]:
    msg = kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {
        "method": "custom", "content": {"event": "click"}}})
    kernel.kc.shell_channel.send(msg)
    return kernel.iopub_until_idle(msg["header"]["msg_id"], timeout=20)


def _states(messages: list[dict]) -> list[dict]:
    return [m["content"]["data"].get("state", {}) for m in messages
            if m["msg_type"] == "comm_msg"]


def test_a_clicked_card_shows_the_choice_once(tmp_path, ipython_dir):
    """The button clicked is marked and the others are greyed; a card decided in another
    cell says so once, in the card (not again under its buttons)."""
    turns = [call("run_python", {"code": "print('RAN')"}, "r1"), "Ran it.",
             call("run_python", {"code": "print('AGAIN')"}, "r2"), "Ran it again."]
    with ScriptedServer(turns, model=SERVED) as server:
        kernel = local_kernel(tmp_path, ipython_dir, server.url)
        try:
            buttons = _buttons(kernel.ok("run it"))
            updates = _click(kernel, buttons["Run once"])
            final: dict[str, dict] = {}
            for m in updates:
                if m["msg_type"] == "comm_msg":
                    final.setdefault(m["content"]["comm_id"], {}).update(
                        m["content"]["data"].get("state", {}))
            once = final[buttons["Run once"]]
            assert once["description"] == "Run once (chosen)" and once["button_style"] == "info"
            deny = final[buttons["Deny"]]
            assert deny["disabled"] and deny.get("button_style", "") == ""
            assert once["disabled"]

            assert _buttons(kernel.ok("run it again"))
            decided = kernel.ok("/confirm")
            said = [m["content"]["data"] for m in decided.messages
                    if m["msg_type"] == "update_display_data"
                    and "Decided in another cell" in str(m["content"]["data"])]
            assert len(said) == 1
            assert said[0]["text/html"].count("Decided in another cell (/confirm).") == 1
            under = " ".join(str(s.get("value", "")) for s in _states(decided.messages))
            assert "Decided in another cell" not in under
            assert "(chosen)" not in str(_states(decided.messages))
        finally:
            kernel.shutdown()


def test_a_served_model_name_that_is_not_one_printable_line_is_never_taken(tmp_path,
                                                                          ipython_dir):
    """An endpoint's model id with a newline or control characters is neither taken as the
    model nor shown: the request keeps the default name."""
    with ScriptedServer(["Hi."], model="evil\nError: fake", models=["a\x1b[31mb"]) as server:
        kernel = local_kernel(tmp_path, ipython_dir, server.url)
        try:
            assert "No model was named" not in model_text(kernel.ok("/model"))
            assert kernel.run("hello").status == "ok"
            assert server.chat_requests()[-1]["model"] == "gpt-4o-mini"
        finally:
            kernel.shutdown()
