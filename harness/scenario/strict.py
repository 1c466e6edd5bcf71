"""The base of every scenario section: unknown keys are errors, numbers finite, true/false never a number."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from harness.scenario.limits import no_bool_for_numbers


class Strict(BaseModel):
    """Base for every scenario section: unknown keys are errors, numbers are finite, and
    true/false is never a number."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_numbers(cls, v: Any, info: ValidationInfo) -> Any:
        return no_bool_for_numbers(v, cls.model_fields[info.field_name].annotation)
