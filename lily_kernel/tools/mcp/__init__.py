"""MCP tool servers under Lily's policy (docs/mcp.md)."""
