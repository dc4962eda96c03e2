"""Strict record models and the one way plain values are validated against them.

Every record is frozen, forbids unknown fields and validates in pydantic's strict JSON mode:
plain values (as parsed from YAML) go through JSON, so a JSON array fills a tuple field and an
ISO string fills a datetime, while an int never fills a string field.
"""
from __future__ import annotations

import json

import pydantic
from pydantic import BaseModel, ConfigDict
from pydantic_core import ErrorDetails

from ole.errors import ValidationError


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)



def _one_error(item: ErrorDetails) -> str:
    where = ".".join(str(p) for p in item["loc"]) or "(top level)"
    got = item.get("input")
    got_text = "" if item["type"] in ("missing", "extra_forbidden") or isinstance(got, dict) else f" (got {got!r})"
    message = "unknown field" if item["type"] == "extra_forbidden" else item["msg"].removeprefix("Value error, ")
    return f"{where}: {message}{got_text}"


def _describe(error: pydantic.ValidationError, source: str) -> ValidationError:
    details = [_one_error(item) for item in error.errors()]
    more = f"; {len(details) - 1} more error(s)" if len(details) > 1 else ""
    return ValidationError(f"{source}: {details[0]}{more}", details=details,
                           hint="see docs/loop-policy.md for every field and its range")


def validate_data(model: type[BaseModel], data: object, *, source: str = "<data>"):
    """Validate plain values (dicts, lists, scalars) against a strict record model."""
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{source}: not plain data: {exc}", hint="use strings, numbers, lists, maps") from None
    try:
        return model.model_validate_json(text)
    except pydantic.ValidationError as exc:
        raise _describe(exc, source) from None
