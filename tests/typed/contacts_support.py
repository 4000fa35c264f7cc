"""The people the typed-skill tests write to: their ActivityPub actors and the workspace
``contacts.yaml`` that names them (shared by tests/typed/test_contacts.py, test_values.py
and test_typed_runtime.py)."""
from __future__ import annotations

ALICE = "https://alice.example/users/alice"
BOB = "https://bob.example/users/bob"
CONTACTS = f"""\
alice:
  actor: {ALICE}
  aliases: [Alice Chen, ali]
bob:
  actor: {BOB}
"""
