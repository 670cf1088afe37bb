"""What the models of every resource share: the names of the job states, the base of a
request body (an unknown field refused) and the validator of the numbers in one."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

StateName = Literal[
    "PENDING", "RUNNING", "PREEMPTING", "RESTARTING", "SUCCEEDED", "FAILED", "CANCELLED"
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _no_boolean(value: Any) -> Any:
    """A before-validator of a number in a request body: ``true`` or ``false`` is refused
    (pydantic read ``true`` as 1: ``{"quota_gpu_memory": true}`` set a quota of one byte,
    ``{"at": true}`` a cordon at the epoch, done now), and so is a string (pydantic read
    ``{"priority": "3"}`` as 3: a number sent as text, which a client in another language
    then reads back as a number and compares wrong)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}: write a number")
    if isinstance(value, str):
        raise ValueError(
            f"expected a number, got the string {value[:40]!r}: write the number without quotes"
        )
    return value
