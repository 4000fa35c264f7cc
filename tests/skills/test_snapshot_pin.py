"""docs/loader.md#snapshot: the content hash of a fixed tree is pinned, so a faster reading
or parsing of SKILL.md files (issue 18) cannot change it, and the loader reads every
skill's frontmatter as PyYAML does."""
from __future__ import annotations

import yaml

from lily_kernel.skills import frontmatter

# A tree that takes every path through reading and parsing: the usual shape, flow and block
# lists, nested mappings, quoting, YAML 1.1 scalars (booleans, numbers, dates: PyYAML's
# answer), comments, CRLF and a BOM, no frontmatter, a typed skill, and broken skills.
PINNED_TREE: dict[str, dict[str, str | bytes]] = {
    "workspace": {
        "usual": "---\nname: usual\ndescription: The usual shape. Use when testing.\n"
                 "summary: Usual\ninvocation_mode: prompt_rewrite\nrequires_tools: [read]\n"
                 "eligibility:\n  os: [darwin, linux, win32]\nmetadata:\n  author: pin\n"
                 "  version: \"1.0\"\n---\n\n# Usual\n\nDo the usual thing.\n",
        "block-lists": "---\ndescription: 'Single quoted: with a colon'\nrequires_tools:\n"
                       "  - read\n  - write\n# a comment\nallowed-tools: Read Grep\n"
                       "command: blk\n---\nBody.\n",
        "scalars": "---\ndescription: Yes we can\nsummary: \"no\"\nlicense: MIT\n"
                   "metadata:\n  n: 12\n  f: 1.5\n  d: 2024-01-01\n  b: on\n  z: ~\n"
                   "  nested: {a: [1, 2], b: {c: d}}\n"
                   "x-unknown: |\n  literal\n  block\n---\nBody.\n",
        "crlf-bom": b"\xef\xbb\xbf---\r\nname: crlf-bom\r\ndescription: Windows line ends\r\n"
                    b"---\r\nBody \xc3\xa9t\xc3\xa9.\r\n",
        "no-frontmatter": "# Just a body\n\nThe first paragraph stands in.\n",
        "typed": "---\ndescription: A typed skill\nactivity: Create\n---\n# Typed\n\n"
                 "## Purpose\nSend a note.\n\n## Type\nexternal\n\n## Parameters\n"
                 "- content: string (required) — the text\n\n"
                 "## Behaviour\n1. Propose it.\n",
        "bad-yaml": "---\nsummary: [unclosed\n---\nBody.\n",
        "bad-name": "---\nname: other\n---\nBody.\n",
        "bad-alias": "---\n&a x: 1\n---\nBody.\n",
        "gated": "---\neligibility:\n  env: [PRESENT_VAR]\n  binaries: [fakebin]\n"
                 "disable-model-invocation: true\nuser-invocable: false\n---\nBody.\n",
    },
    "user": {
        "usual": "---\ndescription: Shadowed by the workspace copy\n---\nBody.\n",
        "other-os": "---\neligibility:\n  os: [win32]\n---\nBody.\n",
        "clash-a": "---\ncommand: same\n---\nA.\n",
        "clash-b": "---\ncommand: same\n---\nB.\n",
    },
    "bundled": {
        "openclaw": "---\nname: openclaw\ndescription: Gated the OpenClaw way\n"
                    "metadata: {\"openclaw\": {\"requires\": {\"env\": [\"PRESENT_VAR\"]}}}\n"
                    "---\nBody.\n",
    },
}

# sha256 over name, source and text of every included skill (loader._content_hash), as
# the loader computed it before issue 18's snapshot work.
PINNED_HASH = "3c90dda7cf121dd6dae093aaabf4e7f4d2c37e9c306a4a028ff7b084badb044b"


def _write(env) -> None:
    for source, skills in PINNED_TREE.items():
        for name, content in skills.items():
            folder = env.root_dir(source) / name
            folder.mkdir(parents=True)
            data = content if isinstance(content, bytes) else content.encode("utf-8")
            (folder / "SKILL.md").write_bytes(data)


def test_the_hash_of_a_fixed_tree_is_pinned(env):
    _write(env)
    snap = env.snapshot()
    assert snap.names() == ["block-lists", "clash-a", "clash-b", "crlf-bom", "gated",
                            "no-frontmatter", "openclaw", "scalars", "typed", "usual"]
    assert snap.hash == PINNED_HASH
    from lily_kernel.skills.loader import _content_hash
    assert _content_hash(snap.skills) == PINNED_HASH  # (the load feeds the hash inline)
    # every broken skill is reported at load, with its reason
    assert [(d.skill, d.reason) for d in snap.diagnostics if d.kind == "skill_error"] == [
        ("bad-alias", "invalid YAML frontmatter: anchors (&name) are not allowed (line 2)"),
        ("bad-name", "'name' is 'other' but the skill directory is 'bad-name'"),
        ("bad-yaml", "invalid YAML frontmatter: did not find expected ',' or ']' "
                     "(line 3, column 1)")]
    assert env.snapshot().hash == snap.hash  # and a second load gives it again


def test_the_loader_reads_every_frontmatter_as_pyyaml_does(env):
    _write(env)
    snap = env.snapshot()
    for skill in snap.skills:
        source = frontmatter.split(frontmatter.decode(skill.text.encode("utf-8")))[0]
        expected = yaml.load(source, Loader=yaml.SafeLoader) if source else None
        assert dict(skill.frontmatter) == (expected or {}), skill.name


def test_deep_nesting_is_refused_at_load(env):
    """The nesting limit is checked before PyYAML sees the text (it recurses once per
    level): a flow bomb, a block one, and block levels under the limit holding flow levels
    under it whose sum is over it, are skill errors naming the limit."""
    env.write_skill(env.ws_skills, "flow-bomb", "description: x\nmetadata: "
                    + "[" * 30_000 + "]" * 30_000)
    env.write_skill(env.ws_skills, "block-bomb", "description: x\n"
                    + "".join(" " * i + f"k{i}:\n" for i in range(70)) + " " * 70 + "z: 1")
    env.write_skill(env.ws_skills, "both-halves", "description: x\n"
                    + "".join(" " * i + f"k{i}:\n" for i in range(40)) + " " * 40 + "z: "
                    + "[" * 40 + "]" * 40)
    env.write_skill(env.ws_skills, "just-under", "description: x\n"
                    + "".join(" " * i + f"k{i}:\n" for i in range(30)) + " " * 30 + "z: "
                    + "[" * 30 + "]" * 30)
    snap = env.snapshot()
    assert snap.names() == ["just-under"]
    for name in ("flow-bomb", "block-bomb", "both-halves"):
        assert "nesting limit" in env.diag(snap, "skill_error", name).reason
