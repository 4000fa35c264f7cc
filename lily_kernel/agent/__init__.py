"""The agent loop: model client and configuration, system prompt, tools."""
