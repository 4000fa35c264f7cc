"""The ``contact`` resolver: names and aliases from ``contacts.yaml`` in the workspace.

    alice:
      actor: https://alice.example/users/alice
      aliases: [Alice Chen, ali]
    bob:
      actor: https://bob.example/users/bob

A name matches a contact's key or one of its aliases, ignoring case and extra
spaces — nothing looser. An unknown name and a name that matches two contacts
are errors: the resolver never guesses.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from lily_kernel.errors import ParamError
from lily_kernel.skills.typed_declaration import is_https_uri

CONTACTS_FILE = "contacts.yaml"


@dataclass(frozen=True)
class Contact:
    """One contact: a name, its actor URI and aliases."""
    name: str
    actor: str
    aliases: tuple[str, ...] = ()


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def load(workspace: Path) -> list[Contact]:
    """The contacts of ``workspace``; ParamError (naming the file) when the file is malformed."""
    path = Path(workspace) / CONTACTS_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, yaml.YAMLError) as exc:
        raise ParamError(f"{path} cannot be read: {str(exc).splitlines()[0]}") from None
    if data is None:
        return []
    if not isinstance(data, dict):
        raise ParamError(f"{path} must map contact names to entries")
    contacts = []
    for name, entry in sorted(data.items(), key=lambda kv: str(kv[0])):
        if not isinstance(entry, dict) or not isinstance(entry.get("actor"), str):
            raise ParamError(f"{path}: contact '{name}' needs an 'actor' URI")
        if not is_https_uri(entry["actor"]):
            raise ParamError(f"{path}: contact '{name}' has an actor that is not an absolute "
                             f"https URI: {entry['actor']!r}")
        aliases = entry.get("aliases") or []
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise ParamError(f"{path}: contact '{name}': aliases must be a list of names")
        contacts.append(Contact(str(name), entry["actor"], tuple(aliases)))
    return contacts


def resolve(workspace: Path, name: str) -> str:
    """The actor URI of the one contact called ``name``; ParamError otherwise."""
    wanted = _norm(name)
    contacts = load(workspace)
    hits = [c for c in contacts if wanted in {_norm(c.name), *(_norm(a) for a in c.aliases)}]
    if len(hits) == 1:
        return hits[0].actor
    if not hits:
        known = ", ".join(c.name for c in contacts) or f"none: {CONTACTS_FILE} is empty or missing"
        raise ParamError(f"no contact named '{name}' in {CONTACTS_FILE} (contacts: {known})")
    raise ParamError(f"'{name}' is ambiguous: it names contacts {', '.join(c.name for c in hits)}; "
                     "use the contact's own name or its actor URI")
