"""The profile schema's building blocks, free of pydantic until a profile is validated.

Profile sections are frozen standard dataclasses (`Strict`). pydantic validates them when a
profile is read from YAML (`validate`, `json_schema`), and only then: a process that reuses a
cached profile (`reconciler.profile_cache`) never imports pydantic, whose import and model
building were most of the start-up time of `tune plan`. The markers below go in `Annotated[...]`
and build their part of the validator through pydantic's `__get_pydantic_core_schema__` hook, so
pydantic is imported when the hook runs, not when a kind module is imported. Field constraints
(`ge`, `alias`, `min_length`, ...) go in `dataclasses.field(metadata=...)`, which pydantic reads
as `Field` arguments.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler as Handler
    from pydantic_core import CoreSchema

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Strict:
    """Profile models reject unknown keys and are immutable once loaded."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}


_ADAPTERS: dict[Any, Any] = {}


def _adapter(model: Any) -> Any:
    """pydantic's validator for `model`, built once per process."""
    if model not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[model] = TypeAdapter(model)
    return _ADAPTERS[model]


def validate(model: type[T], data: Any) -> T:
    """`data` (plain YAML data) as `model`; raises pydantic's ValidationError."""
    result: T = _adapter(model).validate_python(data)
    return result


def json_schema(model: Any) -> dict[str, Any]:
    schema: dict[str, Any] = _adapter(model).json_schema()
    return schema


class Constrain:
    """pydantic `Field` constraints on a type (`Annotated[str, Constrain(min_length=1)]`); put
    it first in the metadata so that it applies to the bare type."""

    def __init__(self, **field: Any) -> None:
        self.field = field

    def __repr__(self) -> str:  # pydantic names JSON schema definitions after it
        return f"Constrain({self.field})"

    def __get_pydantic_core_schema__(self, source: Any, handler: Handler) -> CoreSchema:
        from pydantic import Field

        return handler(Annotated[source, Field(**self.field)])


class Before:
    """Run `convert` on the raw input before the type validates it (short forms, `5%`);
    `accepts` is what the JSON schema then admits as input."""

    def __init__(self, convert: Callable[[Any], Any], accepts: Any = None) -> None:
        self.convert = convert
        self.accepts = accepts

    def __repr__(self) -> str:
        return f"Before({self.convert.__name__})"

    def __get_pydantic_core_schema__(self, source: Any, handler: Handler) -> CoreSchema:
        from pydantic_core import core_schema

        extra: dict[str, Any] = {}
        if self.accepts is not None:
            extra["json_schema_input_schema"] = handler.generate_schema(self.accepts)
        return core_schema.no_info_before_validator_function(self.convert, handler(source), **extra)


class After:
    """Run `check` on the validated value; it returns the value or raises `invalid`."""

    def __init__(self, check: Callable[[Any], Any]) -> None:
        self.check = check

    def __repr__(self) -> str:
        return f"After({self.check.__name__})"

    def __get_pydantic_core_schema__(self, source: Any, handler: Handler) -> CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.check, handler(source))


def invalid(error_type: str, message: str, **context: Any) -> Exception:
    """The error a validator raises: pydantic's custom error, with a stable type."""
    from pydantic_core import PydanticCustomError

    return PydanticCustomError(error_type, message, context)


def pattern_check(pattern: str, what: str, example: str) -> Callable[[str], str]:
    """A validator that accepts only strings matching `pattern` entirely."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise invalid(
                "unsafe_value",
                "{value} is not a valid {what} (expected something like {example})",
                value=repr(value),
                what=what,
                example=example,
            )
        return value

    return check
