"""``lily acp``: Lily as an Agent Client Protocol agent over stdio (docs/front-ends.md#acp)."""
