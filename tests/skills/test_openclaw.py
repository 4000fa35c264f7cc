"""OpenClaw gating read as eligibility (docs/skills-compat.md#openclaw-gating), and
Lily's own ``any_binaries``.

The fixture skills in fixtures/openclaw are OpenClaw manifests in all three metadata
names (openclaw, clawdbot, moltbot). Each test copies them into a private root and
builds the snapshot against an explicit Host: the platform, the environment and a
PATH made of temporary folders holding fake executables, so nothing depends on the
machine running the tests.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from agent_support import run_command

from lily_kernel.commands.help import skill_help
from lily_kernel.errors import CommandError
from lily_kernel.skills.eligibility import Host

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "openclaw"


@pytest.fixture
def oc(env):
    """``env`` with the OpenClaw fixtures as workspace skills and an empty PATH folder."""
    for folder in FIXTURES.iterdir():
        shutil.copytree(folder, env.ws_skills / folder.name)
    env.oc_bin = env.base / "oc-bin"
    env.oc_bin.mkdir()
    return env


def host(env, platform="linux", bins=(), **variables) -> Host:
    """A host whose PATH is one temporary folder holding exactly ``bins``."""
    for name in bins:
        env.make_bin(env.oc_bin, name)
    return Host(platform, dict(variables), str(env.oc_bin))


def reason(snap, name: str) -> str:
    found = [d for d in snap.diagnostics if d.skill == name and d.kind == "ineligible"]
    assert len(found) == 1, (name, snap.diagnostics)
    return found[0].reason


def test_metadata_openclaw_os_and_bins_on_linux(oc):
    snap = oc.snapshot(host=host(oc))
    assert snap.get("apple-notes") is None
    assert reason(snap, "apple-notes") == ("metadata.openclaw.os: requires darwin; this is linux; "
                                           "metadata.openclaw.requires.bins: memo not on PATH")


def test_metadata_openclaw_passes_when_the_host_fits(oc):
    snap = oc.snapshot(host=host(oc, "darwin", bins=["memo"]))
    assert snap.get("apple-notes") is not None
    assert not [d for d in snap.for_skill("apple-notes") if d.kind != "note"]


def test_only_the_missing_binary_is_named(oc):
    snap = oc.snapshot(host=host(oc, "darwin"))
    assert reason(snap, "apple-notes") == "metadata.openclaw.requires.bins: memo not on PATH"


def test_metadata_clawdbot_bins_all_required(oc):
    snap = oc.snapshot(host=host(oc, bins=["curl"]))
    assert reason(snap, "clawd-weather") == "metadata.clawdbot.requires.bins: wttr not on PATH"
    snap = oc.snapshot(host=host(oc, bins=["wttr"]))  # curl is still there, wttr added
    assert snap.get("clawd-weather") is not None


def test_metadata_moltbot_env_set_and_non_empty(oc):
    h = host(oc, bins=["gh"], OC_GITHUB_TOKEN="")
    assert reason(oc.snapshot(host=h), "molt-github") == \
        "metadata.moltbot.requires.env: OC_GITHUB_TOKEN unset or empty"
    h = host(oc, bins=["gh"])
    assert "OC_GITHUB_TOKEN unset or empty" in reason(oc.snapshot(host=h), "molt-github")
    h = host(oc, bins=["gh"], OC_GITHUB_TOKEN="t0ken")
    assert oc.snapshot(host=h).get("molt-github") is not None


def test_any_bins_needs_at_least_one(oc):
    assert reason(oc.snapshot(host=host(oc)), "coding-agent") == \
        "metadata.openclaw.requires.anyBins: none of claude, codex, opencode on PATH"
    assert oc.snapshot(host=host(oc, bins=["codex"])).get("coding-agent") is not None


def test_requires_config_is_always_ineligible_and_names_the_key(oc):
    snap = oc.snapshot(host=host(oc, "darwin", bins=["memo"]))
    assert snap.get("browser-control") is None
    assert reason(snap, "browser-control") == (
        "metadata.openclaw.requires.config: browser.enabled is OpenClaw configuration, "
        "which Lily does not have")


def test_both_lily_and_openclaw_rules_apply(oc):
    snap = oc.snapshot(host=host(oc))
    assert reason(snap, "dual-gated") == (
        "requires environment variable(s) LILY_SIDE_VAR (unset or empty); "
        "metadata.openclaw.requires.bins: oc-side-bin not on PATH")
    # Lily's rule met, OpenClaw's not: still ineligible
    snap = oc.snapshot(host=host(oc, LILY_SIDE_VAR="1"))
    assert reason(snap, "dual-gated") == "metadata.openclaw.requires.bins: oc-side-bin not on PATH"
    # OpenClaw's met, Lily's not
    snap = oc.snapshot(host=host(oc, bins=["oc-side-bin"]))
    assert reason(snap, "dual-gated").startswith("requires environment variable(s) LILY_SIDE_VAR")
    snap = oc.snapshot(host=host(oc, bins=["oc-side-bin"], LILY_SIDE_VAR="1"))
    assert snap.get("dual-gated") is not None


def test_openclaw_os_names_are_mapped_to_lilys(oc):
    assert reason(oc.snapshot(host=host(oc)), "windows-only") == \
        "metadata.openclaw.os: requires win32; this is linux"
    assert oc.snapshot(host=host(oc, "win32")).get("windows-only") is not None


def test_always_true_skips_the_openclaw_gates(oc):
    assert oc.snapshot(host=host(oc)).get("always-on") is not None


def test_no_fallback_to_a_shadowed_copy(oc):
    # an ungated user copy of apple-notes does not stand in for the ineligible workspace one
    oc.write_skill(oc.user_skills, "apple-notes", "description: An ungated copy.")
    snap = oc.snapshot(host=host(oc))
    assert snap.get("apple-notes") is None
    assert "metadata.openclaw" in reason(snap, "apple-notes")
    assert any(d.kind == "shadowed" and d.source == "user" for d in snap.for_skill("apple-notes"))


def test_ineligible_openclaw_skills_are_not_offered_to_the_model(oc):
    from lily_kernel.agent.prompt import skills_index
    index = skills_index(oc.snapshot(host=host(oc)))
    for name in ("apple-notes", "clawd-weather", "molt-github", "coding-agent",
                 "browser-control", "dual-gated", "windows-only"):
        assert f"- {name}:" not in index
    assert "- always-on:" in index


def test_help_shows_the_effective_requirements(oc):
    snap = oc.snapshot(host=host(oc, "darwin", bins=["memo", "oc-side-bin"], LILY_SIDE_VAR="1"))
    page = skill_help(snap, snap.get("apple-notes")).markdown
    assert ("| eligibility | os: darwin (metadata.openclaw.os); "
            "binaries: memo (metadata.openclaw.requires.bins) |") in page
    page = skill_help(snap, snap.get("dual-gated")).markdown
    assert ("| eligibility | env: LILY_SIDE_VAR; os: linux, darwin (metadata.openclaw.os); "
            "binaries: oc-side-bin (metadata.openclaw.requires.bins) |") in page


def test_lily_skills_check_reports_the_gate(oc):
    # requires.config fails on any machine; the PATH is the test's own folder
    proc = oc.cli("skills", "info", "browser-control", PATH=str(oc.oc_bin), check_rc=1)
    assert "excluded (ineligible)" in proc.stderr
    assert "metadata.openclaw.requires.config: browser.enabled" in proc.stderr
    proc = oc.cli("skills", "check", PATH=str(oc.oc_bin), check_rc=0)  # ineligible is no error
    assert ("ineligible: coding-agent (workspace): metadata.openclaw.requires.anyBins: "
            "none of claude, codex, opencode on PATH") in proc.stdout


def test_json_lists_the_gate(oc):
    snap = oc.snapshot(host=host(oc, bins=["codex"]))
    from lily_kernel.skills.snapshot import skill_dict
    assert skill_dict(snap.get("coding-agent"))["openclaw"] == {
        "origin": "metadata.openclaw", "os": None, "always": False,
        "requires": {"bins": [], "anyBins": ["claude", "codex", "opencode"], "env": [],
                     "config": []}}


def test_a_malformed_gate_is_a_skill_error_naming_the_key(env):
    env.write_skill(env.ws_skills, "bad-gate",
                    'metadata: {"openclaw": {"requires": {"anyBins": {"claude": 1}}}}')
    d = env.diag(env.snapshot(), "skill_error", "bad-gate")
    assert d.reason == "'metadata.openclaw.requires.anyBins' must be a list of non-empty strings"


# -- Lily's own any_binaries -----------------------------------------------------------

def test_any_binaries_needs_at_least_one_on_path(env):
    env.write_skill(env.ws_skills, "any-coder", "summary: s\neligibility:\n"
                                                "  any_binaries: [claude-x, codex-x]")
    d = env.diag(env.snapshot(), "ineligible", "any-coder")
    assert d.reason == "requires one of the binaries claude-x, codex-x on PATH (none found)"
    env.make_bin(env.bin, "codex-x")
    snap = env.snapshot()
    assert snap.get("any-coder") is not None
    assert "any of the binaries: claude-x, codex-x" in skill_help(snap, snap.get("any-coder")).markdown


def test_any_binaries_with_binaries_both_apply(env):
    env.write_skill(env.ws_skills, "both", "summary: s\neligibility:\n  binaries: [fakebin]\n"
                                           "  any_binaries: [nope-a, nope-b]")
    assert "nope-a, nope-b" in env.diag(env.snapshot(), "ineligible", "both").reason
    env.make_bin(env.bin, "nope-b")
    assert env.snapshot().get("both") is not None


def test_excluded_skill_command_names_the_openclaw_reason(oc):
    session = oc.session()
    session.host = host(oc)
    session.reload_skills()
    with pytest.raises(CommandError) as info:
        run_command(session, "/skill apple-notes")
    assert "metadata.openclaw.requires.bins: memo not on PATH" in str(info.value)
