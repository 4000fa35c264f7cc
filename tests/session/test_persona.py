"""docs/session.md#persona: persona files, their order, overrides, agents and the per-file cap."""
from __future__ import annotations

from pathlib import Path

import pytest

from lily_kernel.errors import PersonaError
from lily_kernel.session.persona import MAX_FILE_CHARS, PERSONA_FILES, cap, list_agents, load
from lily_kernel.skills.paths import persona_dirs


def write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_files_are_injected_in_the_fixed_order(tmp_path):
    # written in a different order on purpose
    d = write(tmp_path / "p", {"AGENTS.md": "A-agents", "USER.md": "U-user",
                               "SOUL.md": "S-soul", "IDENTITY.md": "I-identity"})
    p = load("default", (d,))
    assert [f.name for f in p.files] == ["SOUL.md", "IDENTITY.md", "USER.md", "AGENTS.md"]
    text = p.system_text()
    assert text.index("S-soul") < text.index("I-identity") < text.index("U-user") \
        < text.index("A-agents")
    assert PERSONA_FILES == ("SOUL.md", "IDENTITY.md", "USER.md", "AGENTS.md")


def test_missing_file_is_skipped(tmp_path):
    d = write(tmp_path / "p", {"SOUL.md": "soul", "AGENTS.md": "agents"})
    p = load("default", (d,))
    assert [f.name for f in p.files] == ["SOUL.md", "AGENTS.md"]
    assert "USER.md" not in p.system_text()


def test_no_files_at_all(tmp_path):
    p = load("default", (tmp_path / "nothing",))
    assert p.files == () and p.system_text() == ""


def test_bundled_persona_ships_all_four_files(tmp_path):
    dirs = persona_dirs(tmp_path, {})
    p = load("default", dirs)
    assert [f.name for f in p.files] == list(PERSONA_FILES)
    assert all(Path(f.path).parent == dirs[-1] for f in p.files)
    assert "# Identity" in p.system_text()  # Lily names herself in her own instructions


def test_workspace_persona_replaces_bundled_file_by_file(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "persona", {"SOUL.md": "MY OWN SOUL"})
    dirs = persona_dirs(ws, {})
    assert dirs[0] == ws / "persona"
    p = load("default", dirs)
    by_name = {f.name: f for f in p.files}
    assert by_name["SOUL.md"].text == "MY OWN SOUL"
    assert Path(by_name["SOUL.md"].path) == ws / "persona" / "SOUL.md"
    for other in ("IDENTITY.md", "USER.md", "AGENTS.md"):  # still the shipped ones
        assert Path(by_name[other].path).parent == dirs[-1]
    assert [f.name for f in p.files] == list(PERSONA_FILES)


def test_lily_persona_dir_overrides_the_workspace_folder(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "persona", {"SOUL.md": "workspace soul"})
    custom = write(tmp_path / "custom", {"SOUL.md": "custom soul", "USER.md": "custom user"})
    dirs = persona_dirs(ws, {"LILY_PERSONA_DIR": str(custom)})
    assert dirs[0] == custom
    text = load("default", dirs).system_text()
    assert "custom soul" in text and "custom user" in text and "workspace soul" not in text


def test_lily_persona_dir_through_a_session(env, tmp_path):
    custom = write(tmp_path / "custom", {"IDENTITY.md": "I am the custom identity"})
    session = env.session(LILY_PERSONA_DIR=str(custom))
    assert "I am the custom identity" in session.persona.system_text()


def test_agent_inherits_missing_files_from_default(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "persona", {"SOUL.md": "default soul", "USER.md": "default user",
                           "AGENTS.md": "default agents", "IDENTITY.md": "default identity"})
    write(ws / "persona" / "agents" / "critic", {"SOUL.md": "critic soul"})
    dirs = persona_dirs(ws, {})
    p = load("critic", dirs)
    texts = {f.name: f.text for f in p.files}
    assert texts == {"SOUL.md": "critic soul", "IDENTITY.md": "default identity",
                     "USER.md": "default user", "AGENTS.md": "default agents"}
    assert "critic" in list_agents(dirs)


def test_bundled_reviewer_agent_overrides_soul_and_identity_only(tmp_path):
    dirs = persona_dirs(tmp_path / "ws", {})
    default = {f.name: f.text for f in load("default", dirs).files}
    reviewer = {f.name: f.text for f in load("reviewer", dirs).files}
    assert reviewer["SOUL.md"] != default["SOUL.md"]
    assert reviewer["IDENTITY.md"] != default["IDENTITY.md"]
    assert reviewer["USER.md"] == default["USER.md"]
    assert reviewer["AGENTS.md"] == default["AGENTS.md"]


def test_workspace_agent_file_beats_bundled_agent_file(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "persona" / "agents" / "reviewer", {"SOUL.md": "my reviewer soul"})
    p = load("reviewer", persona_dirs(ws, {}))
    texts = {f.name: f.text for f in p.files}
    assert texts["SOUL.md"] == "my reviewer soul"
    assert "reviewer" in texts["IDENTITY.md"].lower()  # the bundled reviewer's identity


def test_unknown_agent(tmp_path):
    with pytest.raises(PersonaError):
        load("ghost", persona_dirs(tmp_path, {}))
    with pytest.raises(PersonaError):
        load("../../etc", persona_dirs(tmp_path, {}))


def test_list_agents_ignores_hidden_and_files(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "persona" / "agents" / "writer", {"SOUL.md": "w"})
    write(ws / "persona" / "agents" / ".hidden", {"SOUL.md": "h"})
    (ws / "persona" / "agents" / "notes.txt").write_text("x")
    agents = list_agents(persona_dirs(ws, {}))
    assert "writer" in agents and "default" in agents and "reviewer" in agents
    assert ".hidden" not in agents and "notes.txt" not in agents
    assert agents == sorted(agents)


def test_cap_keeps_head_and_tail_around_a_visible_marker():
    text = "HEAD-" + "m" * 50_000 + "-TAIL"
    out = cap(text, limit=1000, name="SOUL.md")
    assert len(out) == 1000
    assert out.startswith("HEAD-") and out.endswith("-TAIL")
    assert "SOUL.md" in out and "cut" in out
    assert "characters" in out
    head, _, rest = out.partition("[…")
    assert head.strip("m\n-HEAD") == "" and len(head) > 100 and len(rest) > 100


def test_cap_leaves_short_text_alone():
    assert cap("short", limit=1000) == "short"
    assert cap("x" * 1000, limit=1000) == "x" * 1000


def test_huge_persona_file_is_capped_on_load(tmp_path):
    big = "BEGIN\n" + ("filler line\n" * 10_000) + "END\n"
    d = write(tmp_path / "p", {"SOUL.md": big, "USER.md": "small"})
    p = load("default", (d,))
    soul = p.files[0]
    assert soul.truncated and soul.original_chars == len(big)
    assert len(soul.text) == MAX_FILE_CHARS
    assert soul.text.startswith("BEGIN") and soul.text.rstrip().endswith("END")
    assert "cut here" in soul.text
    assert not p.files[1].truncated


def test_bom_in_a_persona_file_is_stripped(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    (d / "SOUL.md").write_bytes(b"\xef\xbb\xbfsoul text")
    assert load("default", (d,)).files[0].text == "soul text"
