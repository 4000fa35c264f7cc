"""The tools Lily offers a model: the registry, the built-in, workspace-file, notebook and
MCP tools, the protected paths, the bounds and the offering rule (docs/architecture.md#rooms).
"""
