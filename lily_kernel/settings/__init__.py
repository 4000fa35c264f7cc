"""Every configuration layer: lily.toml and the environment, workspace trust, the limits
(docs/architecture.md#rooms).
"""
