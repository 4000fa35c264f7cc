"""Name resolution through the workspace contacts.yaml (docs/typed-skills.md#resolvers).

The resolver reads a real ``contacts.yaml``: names and aliases resolve to actor
URIs, unknown or ambiguous names and malformed files are errors naming the file,
and nothing is guessed. Through :func:`values.validate` a resolver's error names
the parameter and a direct https URI is taken as is. Nothing here calls a model.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from contacts_support import ALICE, BOB, CONTACTS

from lily_kernel.errors import ParamError
from lily_kernel.skills import typed_declaration
from lily_kernel.typed import contacts
from lily_kernel.typed.values import validate

# -- the contact resolver ------------------------------------------------------------------

FOUR_CONTACTS = CONTACTS + """\
carol:
  actor: https://carol.example/users/carol
  aliases: [Sam]
dave:
  actor: https://dave.example/users/dave
  aliases: [sam, Dee]
"""


@pytest.fixture
def ws(tmp_path) -> Path:
    (tmp_path / "contacts.yaml").write_text(FOUR_CONTACTS, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("name, actor", [
    ("alice", ALICE), ("ALICE", ALICE), ("Alice Chen", ALICE), ("  alice   CHEN ", ALICE),
    ("alice\tchen", ALICE), ("ali", ALICE), ("Ali", ALICE), ("bob", BOB), ("BOB ", BOB),
    ("dee", "https://dave.example/users/dave"),
])
def test_name_or_alias_resolves_to_the_actor(ws, name, actor):
    assert contacts.resolve(ws, name) == actor


@pytest.mark.parametrize("name", ["alic", "alice chen x", "Alice-Chen", "alicechen", "bobby",
                                  "a", "", "https://alice.example/users/alice "])
def test_unknown_name_is_an_error_and_nothing_is_guessed(ws, name):
    with pytest.raises(ParamError) as info:
        contacts.resolve(ws, name)
    msg = str(info.value)
    assert f"no contact named '{name}'" in msg
    assert "did you mean" not in msg.lower()
    assert "https://" not in msg.replace(name, "")  # no actor offered in its place


def test_ambiguous_name_is_an_error(ws):
    with pytest.raises(ParamError, match="'SAM' is ambiguous") as info:
        contacts.resolve(ws, "SAM")
    assert "carol" in str(info.value) and "dave" in str(info.value)


def test_missing_contacts_file_resolves_nothing(tmp_path):
    with pytest.raises(ParamError, match="contacts.yaml is empty or missing"):
        contacts.resolve(tmp_path, "alice")


@pytest.mark.parametrize("content, fragment", [
    ("alice: [unclosed\n", "cannot be read"),
    ("- alice\n- bob\n", "must map contact names to entries"),
    ("alice: https://alice.example/users/alice\n", "contact 'alice' needs an 'actor' URI"),
    ("alice:\n  aliases: [ali]\n", "contact 'alice' needs an 'actor' URI"),
    ("alice:\n  actor: http://alice.example/users/alice\n", "not an absolute https URI"),
    ("alice:\n  actor: https://alice.example/users/alice\n  aliases: ali\n",
     "aliases must be a list"),
    ("alice:\n  actor: https://alice.example/users/alice\n  aliases: [1, 2]\n",
     "aliases must be a list"),
], ids=["bad yaml", "a list", "actor not a mapping", "no actor", "http actor", "aliases str",
        "aliases not names"])
def test_malformed_contacts_file_is_a_clear_error_naming_the_file(tmp_path, content, fragment):
    path = tmp_path / "contacts.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ParamError) as info:
        contacts.resolve(tmp_path, "alice")
    assert str(path) in str(info.value) and fragment in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


RESOLVED_BODY = """\
## Purpose
Message someone.
## Type
external
## Parameters
- recipient: actorUri (required) — who
    resolve: contact
- content: string (required) — what
## Behaviour
1. Send.
"""
RESOLVED = typed_declaration.parse(RESOLVED_BODY)


def test_validate_resolves_names_and_passes_https_uris_through(ws):
    asked = []

    def resolve(resolver, name):
        asked.append((resolver, name))
        return contacts.resolve(ws, name)

    assert validate(RESOLVED, {"recipient": " Alice  chen", "content": "hi"}, resolve) == \
        {"recipient": ALICE, "content": "hi"}
    assert asked == [("contact", " Alice  chen")]
    stranger = "https://zed.example/users/zed"  # not a contact: a direct URI is taken as is
    assert validate(RESOLVED, {"recipient": stranger, "content": "hi"}, resolve)["recipient"] == stranger
    assert len(asked) == 1  # the resolver was not asked about a URI


@pytest.mark.parametrize("name", ["zed", "sam", "http://alice.example/users/alice"])
def test_resolver_errors_name_the_parameter(ws, name):
    with pytest.raises(ParamError) as info:
        validate(RESOLVED, {"recipient": name, "content": "hi"},
                 lambda resolver, value: contacts.resolve(ws, value))
    assert "'recipient'" in str(info.value), str(info.value)


def test_resolver_error_for_a_malformed_file_names_parameter_and_file(tmp_path):
    (tmp_path / "contacts.yaml").write_text("[not, a, mapping]\n")
    with pytest.raises(ParamError) as info:
        validate(RESOLVED, {"recipient": "alice", "content": "hi"},
                 lambda resolver, value: contacts.resolve(tmp_path, value))
    msg = str(info.value)
    assert "'recipient'" in msg and str(tmp_path / "contacts.yaml") in msg
