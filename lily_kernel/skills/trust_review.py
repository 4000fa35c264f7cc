"""What the skills of a workspace's own folders are now, for the trust record
(docs/trust-boundary.md#what-asks-again).

``/trust --yes`` records, for each skill of those folders, what it can do without the
model and its text (:func:`lily_kernel.skills.untrusted.review_digest`); the review's
fingerprint covers what they can do. Every candidate is read, included or not (an
ineligible skill may become eligible later, with what it could do when trusted), with the
loader's own discovery, reader and parser; a folder that is not a skill is left out (the
loader never loads it).
"""
from __future__ import annotations

from collections.abc import Iterable

from lily_kernel.errors import LoaderError, SkillError
from lily_kernel.skills import skill_md
from lily_kernel.skills.loader import discover
from lily_kernel.skills.paths import Root
from lily_kernel.skills.skill import parse
from lily_kernel.skills.untrusted import review_digest


def current(roots: Iterable[Root], sources: frozenset[str]) -> dict[str, str]:
    """``source/name`` -> ``CAPS TEXT`` of every skill in the roots of ``sources`` now."""
    out: dict[str, str] = {}
    for root in roots:
        if root.source not in sources:
            continue
        try:
            found = discover(root, [])
        except LoaderError:
            continue  # an unreadable root loads nothing: nothing to record
        for cand in found:
            read = None if cand.error else skill_md.read(str(cand.path))
            if read is None or isinstance(read, skill_md.Unreadable):
                continue
            try:
                skill = parse(cand.name, root.source, str(cand.path), read[0])
            except SkillError:
                continue
            out[f"{root.source}/{cand.name}"] = review_digest(skill)
    return out
