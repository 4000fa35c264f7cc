"""Every docs/ citation points at a real file and section (docs/architecture.md#contracts).

Code comments and docs cite contracts as ``docs/loader.md#precedence``; the anchor
is the heading's GitHub slug. A renamed heading or a typo fails here.
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

_CITE_IN_CODE = re.compile(r"docs/([a-z0-9-]+\.md)(?:#([a-z0-9_-]+))?")
_LINK_IN_DOCS = re.compile(r"\]\(([a-z0-9-]+\.md)?(?:#([a-z0-9_-]+))?\)")


def slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    lines = doc.read_text(encoding="utf-8").splitlines()
    return {slug(line.lstrip("#")) for line in lines if re.match(r"^#{1,6} ", line)}


def citations() -> list[tuple[str, str, str | None]]:
    """(where, file, anchor) for every citation in the package, tests, scripts and docs."""
    out = []
    for path in [*REPO.glob("lily_kernel/**/*.py"), *REPO.glob("lily/*.py"),
                 *REPO.glob("tests/**/*.py"), *REPO.glob("scripts/*.py")]:
        for m in _CITE_IN_CODE.finditer(path.read_text(encoding="utf-8")):
            out.append((str(path.relative_to(REPO)), m.group(1), m.group(2)))
    for doc in DOCS.glob("*.md"):
        for m in _LINK_IN_DOCS.finditer(doc.read_text(encoding="utf-8")):
            if m.group(1) or m.group(2):
                out.append((str(doc.relative_to(REPO)), m.group(1) or doc.name, m.group(2)))
    return out


def test_slugs_follow_github():
    assert slug("A `/skills` cell in the kernel") == "a-skills-cell-in-the-kernel"
    assert slug("lily.toml") == "lilytoml"


def test_every_citation_resolves():
    broken = []
    for where, name, anchor in citations():
        doc = DOCS / name
        if not doc.exists():
            broken.append(f"{where}: docs/{name} does not exist")
            continue
        if anchor and anchor not in anchors(doc):
            broken.append(f"{where}: docs/{name}#{anchor}: no such section")
    assert broken == [], "\n".join(broken)


def test_the_contracts_exist():
    for name in ("architecture", "skill-format", "loader", "commands", "session", "agent",
                 "typed-skills", "testing"):
        assert (DOCS / f"{name}.md").is_file(), name
