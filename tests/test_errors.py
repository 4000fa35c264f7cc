"""One error hierarchy and one Error: line (docs/architecture.md#errors)."""
from __future__ import annotations

import pytest
from agent_support import run_command

from lily_kernel import errors
from lily_kernel.errors import (
    AclError,
    ActionError,
    AgentError,
    CommandError,
    FrontmatterError,
    LoaderError,
    ModelError,
    ParamError,
    PersonaError,
    SkillError,
    ToolError,
    TypedError,
)
from lily_kernel.errors import ConfigError as ModelConfigError
from lily_kernel.errors import ConfigError as RegistryConfigError


@pytest.mark.parametrize("cls, family, builtin", [
    (LoaderError, errors.LoaderError, RuntimeError),
    (SkillError, errors.SkillError, ValueError),
    (FrontmatterError, errors.SkillError, ValueError),
    (TypedError, errors.SkillError, ValueError),
    (CommandError, errors.CommandError, Exception),
    (AgentError, errors.CommandError, Exception),
    (ModelConfigError, errors.ConfigError, ValueError),
    (RegistryConfigError, errors.ConfigError, ValueError),
    (PersonaError, errors.ConfigError, ValueError),
    (ModelError, errors.ModelError, Exception),
    (ActionError, errors.ActionError, ValueError),
    (ParamError, errors.ActionError, ValueError),
    (AclError, errors.ActionError, PermissionError),
    (ToolError, errors.LilyError, Exception),
])
def test_every_error_has_its_family_and_keeps_its_builtin_base(cls, family, builtin):
    assert issubclass(cls, family) and issubclass(cls, errors.LilyError)
    assert issubclass(cls, builtin)  # existing except clauses keep their meaning


def test_one_config_error():
    assert ModelConfigError is RegistryConfigError is errors.ConfigError


def test_error_line_is_one_line():
    assert errors.error_line(CommandError("no skill named 'x'.")) == "Error: no skill named 'x'."
    assert errors.error_line(SkillError("bad\n  frontmatter\n")) == "Error: bad frontmatter"
    assert CommandError("x.").line() == "Error: x."
    assert errors.error_line(KeyError("k")) == "Error: 'k'"  # any exception, if one slips through


def test_command_error_makes_a_sentence():
    assert str(errors.command_error(ActionError("nothing is waiting"))) == "nothing is waiting."
    assert str(errors.command_error(ActionError("done."))) == "done."
    assert isinstance(errors.command_error(ModelConfigError("x")), CommandError)


def test_a_command_shows_action_and_config_errors_as_one_sentence(env):
    session = env.session(journal=False)
    for cell, line in [("/confirm", "Error: nothing is waiting for confirmation."),
                       ("/model temperature=9", "Error: temperature must be between 0 and 2, not 9.")]:
        with pytest.raises(CommandError) as info:
            run_command(session, cell)
        assert info.value.line() == line
