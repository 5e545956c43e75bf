"""The workflow a conductor writes: 1 to 5 steps `{worker, subtask, access}`, validated with pydantic.

Accepts the JSON form (`{"steps": [...]}` or a bare list) and the original three parallel lists
(`subtasks`, `model_ids`, `access_lists`). Steps are numbered from 0; `access` names earlier steps only.
Parsing never raises anything but `PlanError`, whose message is fit to show the conductor in a repair round.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fugu_cli.errors import FuguError

MAX_STEPS = 5
CONDUCTOR = "conductor"  # a step with this worker hands its part back to the conductor (recursion)
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)```", re.DOTALL)


class PlanError(FuguError):
    """A workflow that cannot be parsed or is invalid; the message says what to fix."""


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    worker: str = Field(min_length=1)
    subtask: str = Field(min_length=1)
    access: tuple[int, ...] = ()

    @field_validator("access", mode="before")
    @classmethod
    def _no_duplicates(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return (value,)
        if isinstance(value, list | tuple):
            return tuple(dict.fromkeys(value))
        return value


class Workflow(BaseModel):
    """Validate with `Workflow.model_validate(data, context={"workers": names, "allow_conductor": bool})`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: tuple[Step, ...]

    @field_validator("steps", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        if isinstance(value, list | tuple) and not 1 <= len(value) <= MAX_STEPS:
            raise ValueError(f"a workflow has 1 to {MAX_STEPS} steps (got {len(value)})")
        return value

    @model_validator(mode="before")
    @classmethod
    def _accept_lists(cls, data: Any) -> Any:
        if isinstance(data, list):
            return {"steps": data}
        if isinstance(data, dict) and "steps" not in data and "subtasks" in data:
            return {"steps": _from_parallel_lists(data)}
        return data

    @model_validator(mode="after")
    def _check_refs(self, info: ValidationInfo) -> Workflow:
        context = info.context or {}
        workers: Collection[str] | None = context.get("workers")
        allow_conductor = bool(context.get("allow_conductor", True))
        for i, step in enumerate(self.steps):
            if step.worker == CONDUCTOR:
                if not allow_conductor:
                    raise ValueError(
                        f"step {i}: worker 'conductor' is not allowed (recursion depth limit reached)"
                    )
            elif workers is not None and step.worker not in workers:
                raise ValueError(
                    f"step {i}: unknown worker {step.worker!r}; use one of: {', '.join(workers)}"
                    + (f" or {CONDUCTOR!r}" if allow_conductor else "")
                )
            bad = [a for a in step.access if a < 0 or a >= i]
            if bad:
                raise ValueError(
                    f"step {i}: access {bad} must name earlier steps only (0 to {i - 1})"
                    if i
                    else "step 0: access must be empty (there is no earlier step)"
                )
        return self

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {"step": i, "worker": s.worker, "subtask": s.subtask, "access": list(s.access)}
            for i, s in enumerate(self.steps)
        ]

    def readers(self, index: int) -> list[int]:
        """The steps whose access list names step `index`."""
        return [i for i, s in enumerate(self.steps) if index in s.access]


def _from_parallel_lists(data: dict[str, Any]) -> list[dict[str, Any]]:
    subtasks = data.get("subtasks")
    workers = next((data[k] for k in ("model_ids", "models", "workers") if k in data), None)
    access = next((data[k] for k in ("access_lists", "access_list", "access") if k in data), None)
    if not isinstance(subtasks, list) or not isinstance(workers, list):
        raise ValueError("the three-list form needs 'subtasks' and 'model_ids' lists")
    if access is None:
        access = [[] for _ in subtasks]
    if not isinstance(access, list) or not len(subtasks) == len(workers) == len(access):
        raise ValueError(
            f"subtasks, model_ids and access_lists must be lists of the same length "
            f"(got {len(subtasks)}, {len(workers)}, {len(access) if isinstance(access, list) else 'none'})"
        )
    return [
        {"worker": w, "subtask": s, "access": a} for s, w, a in zip(subtasks, workers, access, strict=True)
    ]


def _expand_all(data: Any) -> Any:
    """`"access": "all"` means every earlier step (the original format allows it)."""
    if isinstance(data, dict) and isinstance(data.get("steps"), list):
        steps = []
        for i, step in enumerate(data["steps"]):
            if isinstance(step, dict) and step.get("access") == "all":
                step = {**step, "access": list(range(i))}
            steps.append(step)
        return {**data, "steps": steps}
    if isinstance(data, dict) and isinstance(data.get("access_lists"), list):
        lists = [list(range(i)) if a == "all" else a for i, a in enumerate(data["access_lists"])]
        return {**data, "access_lists": lists}
    if isinstance(data, list):
        return _expand_all({"steps": data})["steps"]
    return data


def validate(data: Any, workers: Collection[str], *, allow_conductor: bool = True) -> Workflow:
    """A valid workflow from already-decoded JSON, or `PlanError` with every problem listed."""
    try:
        return Workflow.model_validate(
            _expand_all(data), context={"workers": list(workers), "allow_conductor": allow_conductor}
        )
    except ValidationError as e:
        raise PlanError(describe(e)) from None


def parse(text: str, workers: Collection[str], *, allow_conductor: bool = True) -> Workflow:
    """A valid workflow from a model's reply (JSON, possibly in a ```json fence or amid prose)."""
    return validate(extract_json(text), workers, allow_conductor=allow_conductor)


def load(path: Path, workers: Collection[str], *, allow_conductor: bool = True) -> Workflow:
    """A workflow file given with `--plan`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PlanError(f"cannot read the plan {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise PlanError(f"the plan {path} is not UTF-8 text (byte {e.start}): save it as UTF-8") from None
    try:
        return validate(json.loads(text), workers, allow_conductor=allow_conductor)
    except json.JSONDecodeError as e:
        raise PlanError(f"the plan {path} is not valid JSON: {e}") from None
    except PlanError as e:
        raise PlanError(f"the plan {path} is invalid: {e}") from None


def extract_json(text: str) -> Any:
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for candidate in candidates:
        decoded = _first_json(candidate)
        if decoded is not None:
            return decoded
    raise PlanError("no JSON workflow found in the reply; answer with one JSON object and nothing else")


def _first_json(text: str) -> Any:
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                value, _ = decoder.raw_decode(text, i)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict | list):
                return value
    return None


def describe(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        where = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)
