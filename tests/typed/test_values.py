"""The run-time value check of typed skills (docs/typed-skills.md#validation).

Every type against a matrix of valid and invalid values through
:func:`typed_declaration.check_value` and :func:`values.validate`, whose errors
must name the parameter; defaults, missing and unknown parameters; and
hypothesis properties that nothing but :class:`ParamError` ever escapes.
Nothing here calls a model.
"""
from __future__ import annotations

import json
import math

import pytest
from contacts_support import BOB
from hypothesis import given, settings
from hypothesis import strategies as st

from lily_kernel.errors import ParamError
from lily_kernel.skills import typed_declaration
from lily_kernel.skills.typed_declaration import check_value
from lily_kernel.typed.values import validate

# -- the parameter-validation matrix -------------------------------------------------------

MATRIX_BODY = """\
## Purpose
Exercise every type.

## Type
external

## Parameters
- text: string (required) — any text
- note: string (optional) — with a default
    default: hello
- amount: number (required) — bounded
    min: 0.01
    max: 100
- count: number (optional) — unbounded
- flag: boolean (required) — a switch
- quiet: boolean (optional) — with a default
    default: false
- tone: enum (required) — a choice
    enum: [chime, alert, silent]
- mode: enum (optional) — with a default
    enum: [fast, slow]
    default: slow
- actor: actorUri (required) — an actor
- post: objectId (optional) — an object

## Behaviour
1. Nothing.
"""
SPEC = typed_declaration.parse(MATRIX_BODY)
P = {p.name: p for p in SPEC.params}
REQUIRED = [p.name for p in SPEC.params if p.required]
GOOD = {"text": "hi", "amount": 1, "flag": True, "tone": "chime", "actor": BOB}

VALID = [
    ("text", ""), ("text", "héllo ✓ \n multi-line"), ("text", "  spaced  "),
    ("note", "x"),
    ("amount", 0.01), ("amount", 100), ("amount", 100.0), ("amount", 50), ("amount", 0.5),
    ("count", -1e9), ("count", 0), ("count", 3.25), ("count", 10 ** 30),
    ("flag", True), ("flag", False), ("quiet", True),
    ("tone", "chime"), ("tone", "alert"), ("tone", "silent"), ("mode", "fast"),
    ("actor", BOB), ("actor", "https://bob.example"), ("actor", "https://[::1]/users/me"),
    ("actor", "https://bob.example:8443/users/bob?x=1#main-key"),
    ("post", "https://alice.example/objects/abc123"),
]

INVALID = [
    # strings are strings
    ("text", 5), ("text", True), ("text", None), ("text", ["a"]), ("text", {"a": "b"}),
    ("note", 1.5),
    # numbers: min/max, finite, and booleans are not numbers
    ("amount", 0.0099), ("amount", 0), ("amount", -1), ("amount", 100.0001), ("amount", 101),
    ("amount", True), ("amount", False), ("amount", "5"), ("amount", None), ("amount", [5]),
    ("amount", math.nan), ("amount", math.inf), ("amount", -math.inf),
    ("count", True), ("count", "1"), ("count", math.nan), ("count", math.inf), ("count", {}),
    # booleans: numbers and strings are not booleans
    ("flag", 1), ("flag", 0), ("flag", 1.0), ("flag", "true"), ("flag", "yes"), ("flag", None),
    ("quiet", "false"),
    # enums: exact, case matters
    ("tone", "Chime"), ("tone", "CHIME"), ("tone", " chime"), ("tone", "chime "), ("tone", "bell"),
    ("tone", ""), ("tone", 1), ("tone", True), ("tone", None), ("tone", ["chime"]),
    ("mode", "Slow"),
    # actorUri / objectId: absolute https URIs only
    ("actor", "http://bob.example/users/bob"), ("actor", "/users/bob"),
    ("actor", "bob.example/users/bob"), ("actor", "//bob.example/users/bob"),
    ("actor", "https://"), ("actor", "https:///users/bob"), ("actor", "https:/users/bob"),
    ("actor", "https://bob example/users/bob"), ("actor", "https://bob.example/users/b ob"),
    ("actor", " https://bob.example/users/bob"), ("actor", "https://bob.example/users/bob\n"),
    ("actor", "ftp://bob.example/users/bob"), ("actor", "mailto:bob@bob.example"),
    ("actor", "https://[oops/users/bob"), ("actor", ""), ("actor", "bob"),
    ("actor", 5), ("actor", True), ("actor", None), ("actor", [BOB]), ("actor", {"id": BOB}),
    ("post", "http://alice.example/objects/abc123"), ("post", "objects/abc123"),
    ("post", "https://alice.example/objects/a b"), ("post", 123),
]


@pytest.mark.parametrize("name, value", VALID, ids=[f"{n}={v!r}" for n, v in VALID])
def test_valid_value_is_accepted(name, value):
    assert check_value(P[name], value) == value
    out = validate(SPEC, {**GOOD, name: value})
    assert out[name] == value


@pytest.mark.parametrize("name, value", INVALID, ids=[f"{n}={v!r}" for n, v in INVALID])
def test_invalid_value_is_refused_naming_the_parameter(name, value):
    with pytest.raises(ParamError) as info:
        check_value(P[name], value)
    assert f"'{name}'" in str(info.value)
    if value is not None:  # None means "absent" to validate()
        with pytest.raises(ParamError) as info:
            validate(SPEC, {**GOOD, name: value})
        assert f"'{name}'" in str(info.value)


def test_defaults_fill_absent_optional_parameters():
    out = validate(SPEC, GOOD)
    assert out == {**GOOD, "note": "hello", "quiet": False, "mode": "slow"}
    assert "count" not in out and "post" not in out  # optional without a default: absent
    # null means absent: the default applies
    assert validate(SPEC, {**GOOD, "note": None, "count": None})["note"] == "hello"
    # a given value wins over the default
    assert validate(SPEC, {**GOOD, "quiet": True, "mode": "fast"})["mode"] == "fast"


@pytest.mark.parametrize("name", REQUIRED)
@pytest.mark.parametrize("how", ["missing", "null"])
def test_missing_required_parameter_is_named(name, how):
    values = {k: v for k, v in GOOD.items() if k != name}
    if how == "null":
        values[name] = None
    with pytest.raises(ParamError, match=rf"'{name}' is required \({P[name].type}\)"):
        validate(SPEC, values)


def test_unknown_parameter_is_named():
    with pytest.raises(ParamError, match="unknown parameter.*'colour'") as info:
        validate(SPEC, {**GOOD, "colour": "red"})
    assert "declared: text, note" in str(info.value)


@pytest.mark.parametrize("values", [[], "text=hi", 5, None])
def test_parameters_must_be_an_object(values):
    with pytest.raises(ParamError, match="JSON object"):
        validate(SPEC, values)


JSON_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | st.text()
                | st.integers(min_value=10 ** 300, max_value=10 ** 400)
                | st.sampled_from(["chime", "Chime", "true", "0.01", "100", BOB]))
URI_LIKE = st.builds(lambda scheme, rest: scheme + rest,
                     st.sampled_from(["https://", "http://", "https:", "//", "https://[", ""]),
                     st.text())
JSON_VALUES = st.recursive(JSON_SCALARS | URI_LIKE,
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                           max_leaves=6)


@settings(max_examples=400, deadline=None)
@given(param=st.sampled_from(SPEC.params), value=JSON_VALUES)
def test_check_value_only_ever_raises_param_error(param, value):
    try:
        out = check_value(param, value)
    except ParamError as exc:
        assert f"'{param.name}'" in str(exc)
        return
    assert out is value
    if param.type == "number":
        assert not isinstance(value, bool) and isinstance(value, (int, float))
        assert isinstance(value, int) or math.isfinite(value)
        assert param.min is None or value >= param.min
        assert param.max is None or value <= param.max
    elif param.type == "boolean":
        assert isinstance(value, bool)
    elif param.type == "enum":
        assert value in param.enum
    else:
        assert isinstance(value, str)
        if param.type in ("actorUri", "objectId"):
            assert value.lower().startswith("https://") and " " not in value


@settings(max_examples=200, deadline=None)
@given(values=st.dictionaries(st.sampled_from(list(P)) | st.text(max_size=4), JSON_VALUES,
                              max_size=6))
def test_validate_only_ever_raises_param_error(values):
    try:
        out = validate(SPEC, {**GOOD, **values})
    except ParamError:
        return
    assert set(out) <= set(P) and set(REQUIRED) <= set(out)
    json.dumps(out)  # what validate returns is plain JSON
