"""The session: its state, persona files and journal."""
