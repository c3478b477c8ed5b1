"""Structured output: the JSON schema a model must answer with, and validating its answer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .._errors import ConfigurationError, OutputValidationError

__all__ = ["OutputSpec"]

_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class OutputSpec:
    """What ``output_type=`` asks of the model's final answer.

    Attributes:
        output_type: The type the answer is validated into (a pydantic model,
            a dataclass or a TypedDict: anything whose JSON schema is an object).
        schema: Its JSON schema, sent with every model call.
        name: A provider-safe name for the schema.
    """

    output_type: Any
    schema: dict[str, Any]
    name: str
    adapter: TypeAdapter[Any]

    @classmethod
    def of(cls, output_type: Any) -> OutputSpec | None:
        """The spec of ``output_type`` (None for free text).

        Raises:
            ConfigurationError: The type has no JSON schema, or it is not an object.
        """
        if output_type is None:
            return None
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(output_type)
            schema = adapter.json_schema()
        except Exception as exc:  # pydantic raises several kinds for unsupported types
            raise ConfigurationError(
                f"output_type {output_type!r} has no JSON schema: {exc}"
            ) from exc
        if schema.get("type") != "object":
            raise ConfigurationError(
                f"output_type must describe a JSON object (a pydantic model, dataclass or "
                f"TypedDict), not {output_type!r}"
            )
        name = _NAME.sub("_", getattr(output_type, "__name__", "output"))[:64] or "output"
        return cls(output_type=output_type, schema=schema, name=name, adapter=adapter)

    def parse(self, text: str) -> Any:
        """Validate the model's answer into :attr:`output_type`.

        Raises:
            OutputValidationError: The text is not JSON matching the schema.
        """
        try:
            return self.adapter.validate_json(text.strip())
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                for e in exc.errors()[:5]
            )
            raise OutputValidationError(
                f"the model's output does not validate as {self.name}: {problems}", output=text
            ) from exc
