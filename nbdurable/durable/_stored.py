"""Reading records a store holds, tolerant of fields a newer nbdurable added.

During a rolling upgrade old and new workers share one store: a newer release
may write a run record, tool intent, event or checkpoint line with an optional
field this release does not know. Reading such a record ignores the unknown
fields instead of failing, while the fields this release knows are validated as
strictly as ever (a record built in code still refuses an unknown field).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["validate_stored"]

M = TypeVar("M", bound=BaseModel)


def validate_stored(model: type[M], data: str | bytes | dict[str, Any]) -> M:
    """``model`` from its stored JSON (or decoded JSON object), ignoring unknown fields.

    Args:
        model: The record's model (``extra="forbid"`` or not).
        data: The stored JSON text, or the JSON object already decoded.

    Returns:
        The validated record; fields ``model`` does not declare are dropped.

    Raises:
        pydantic.ValidationError: A known field is invalid or a required one is missing.
    """
    try:
        if isinstance(data, dict):
            return model.model_validate(data)
        return model.model_validate_json(data)
    except ValidationError as exc:
        # The common case (a record of this release) costs one validation; only
        # a record with unknown fields is decoded and validated a second time.
        if not any(error["type"] == "extra_forbidden" for error in exc.errors()):
            raise
    decoded: Any = data if isinstance(data, dict) else json.loads(data)
    known = {key: value for key, value in decoded.items() if key in model.model_fields}
    if isinstance(data, dict):
        return model.model_validate(known)
    return model.model_validate_json(json.dumps(known))
