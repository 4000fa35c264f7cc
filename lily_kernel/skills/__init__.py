"""Skills: the SKILL.md format, the loader and the snapshot."""
