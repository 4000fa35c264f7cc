"""A hostile skill against a real Lily kernel (issue 15 point 7): frontmatter nested 30,000
lists deep in 60 KB -- enough to crash libyaml's recursive reader -- is a skill error naming
the nesting limit, and the kernel starts and answers (docs/skill-format.md#reading)."""
from __future__ import annotations

from kernel_support import Kernel, make_world, write_skill


def test_deeply_nested_frontmatter_is_a_skill_error_and_the_kernel_starts(tmp_path):
    world = make_world(tmp_path)
    nested = "[" * 30_000 + "]" * 30_000
    assert len(nested) <= 60 * 1024
    write_skill(world.ws_skills, "bomb", f"name: bomb\ndescription: x\nmetadata: {nested}")
    write_skill(world.ws_skills, "fine", "name: fine\ndescription: A fine skill.")
    kernel = Kernel("lily", world)
    try:
        listing = str(kernel.ok("/skills --all").displays)
        assert "fine" in listing
        assert "bomb" in listing and "nesting limit" in listing
        assert kernel.ok("%%python\nprint(1 + 1)").stdout.strip() == "2"  # still answering
    finally:
        kernel.shutdown()
