"""A typed skill's call checked in code (docs/typed-skills.md#validation): every parameter
present or defaulted, none unknown, each resolved and fitting its declared type.

The declaration itself (:class:`~lily_kernel.skills.typed_declaration.TypedSpec`) is part of
the skill format, parsed when the skill loads; this is the run-time side.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lily_kernel.errors import ParamError
from lily_kernel.skills.typed_declaration import TypedSpec, check_value, is_https_uri


def validate(spec: TypedSpec, values: Mapping[str, Any],
             resolve: Callable[[str, Any], Any] | None = None) -> dict[str, Any]:
    """All parameters checked in code: required present, no unknown names, each value fits.

    ``resolve(resolver, value)`` turns a name into the canonical value first
    (e.g. a contact alias into an actorUri); it raises ParamError when it cannot.
    Defaults fill optional parameters that are absent. Returns the final values.
    """
    if not isinstance(values, Mapping):
        raise ParamError("parameters must be a JSON object")
    unknown = sorted(set(values) - {p.name for p in spec.params})
    if unknown:
        raise ParamError(f"unknown parameter(s) {', '.join(map(repr, unknown))} "
                         f"(declared: {', '.join(p.name for p in spec.params) or 'none'})")
    out: dict[str, Any] = {}
    for p in spec.params:
        if p.name not in values or values[p.name] is None:
            if p.required:
                raise ParamError(f"'{p.name}' is required ({p.type})")
            if p.has_default:
                out[p.name] = p.default
            continue
        value = values[p.name]
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # no file, database or socket can hold it
                raise ParamError(f"'{p.name}' is not valid text (it holds a lone surrogate)") from None
        if p.resolve and resolve is not None and isinstance(value, str) and not is_https_uri(value):
            try:
                value = resolve(p.resolve, value)
            except ParamError as exc:
                raise ParamError(f"'{p.name}': {exc}") from None
        out[p.name] = check_value(p, value)
    return out
