"""Layered configuration: defaults < user config < `.fugu/config.toml` < `FUGU_*` environment < flags.

Owns where state lives (`FUGU_HOME`) and how config files are read and validated. Never prints.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fugu_cli.errors import ConfigError

PermissionModeName = Literal["ask", "auto-edit", "full-auto", "read-only"]


class WorkerConfig(BaseModel):
    """One `[[workers]]` table, as a user writes it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    model: str = Field(min_length=1)
    api_base: str | None = None
    api_key_env: str | None = None
    description: str = ""
    priority: float = 0.0
    price_in: float | None = Field(default=None, ge=0)
    price_out: float | None = Field(default=None, ge=0)
    context_limit: int | None = Field(default=None, gt=0)


class LLMSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    backoff_base_s: float = Field(default=0.5, ge=0)
    stream: bool = True


class PermissionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)


class UltraSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conductor: str | None = None
    max_depth: int = Field(default=2, ge=0)
    step_max_turns: int = Field(default=20, ge=1)
    step_timeout_s: float = Field(default=900.0, gt=0)
    step_max_budget_usd: float | None = Field(default=None, gt=0)


class Config(BaseModel):
    """The merged configuration."""

    model_config = ConfigDict(extra="forbid")

    router: str | None = None
    cost_weight: float | None = Field(default=None, ge=0)  # λ, reward per USD; None: the router's own
    permission_mode: PermissionModeName | None = None
    max_turns: int = Field(default=40, ge=1)
    max_budget_usd: float | None = Field(default=None, gt=0)
    shell_timeout_s: float = Field(default=120.0, gt=0)
    worker: str | None = None
    pool: str | None = None
    ultra: bool = False
    workers: list[WorkerConfig] = Field(default_factory=list)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    permissions: PermissionSettings = Field(default_factory=PermissionSettings)
    ultra_settings: UltraSettings = Field(default_factory=UltraSettings, alias="ultra-settings")


ENV_KEYS: dict[str, str] = {
    "FUGU_ROUTER": "router",
    "FUGU_COST_WEIGHT": "cost_weight",
    "FUGU_PERMISSION_MODE": "permission_mode",
    "FUGU_MAX_TURNS": "max_turns",
    "FUGU_MAX_BUDGET_USD": "max_budget_usd",
    "FUGU_WORKER": "worker",
    "FUGU_POOL": "pool",
}


def fugu_home() -> Path:
    """Where all state lives: `FUGU_HOME`, else the platform's user data directory."""
    env = os.environ.get("FUGU_HOME")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("fugu", appauthor=False))


def user_config_path() -> Path:
    if os.environ.get("FUGU_HOME"):
        return fugu_home() / "config.toml"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "fugu" / "config.toml"


def find_repo_root(start: Path) -> Path | None:
    for d in (start, *start.parents):
        if (d / ".git").exists():
            return d
    return None


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}. Fix the file or move it away.") from e
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from e


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _normalise(raw: dict[str, Any]) -> dict[str, Any]:
    """Accept `[ultra]` as a table (settings) as well as `ultra = true` (the mode flag)."""
    data = dict(raw)
    if isinstance(data.get("ultra"), dict):
        data["ultra-settings"] = data.pop("ultra")
    return data


def load_config(cwd: Path, overrides: dict[str, Any] | None = None) -> Config:
    """Merge every layer. `overrides` are the flags the user gave (None values are ignored)."""
    layers: list[tuple[str, dict[str, Any]]] = []
    user = user_config_path()
    if user.is_file():
        layers.append((str(user), _normalise(read_toml(user))))
    root = find_repo_root(cwd) or cwd
    project = root / ".fugu" / "config.toml"
    if project.is_file():
        layers.append((str(project), _normalise(read_toml(project))))
    env = {key: os.environ[var] for var, key in ENV_KEYS.items() if os.environ.get(var)}
    if env:
        layers.append(("FUGU_* environment", env))
    if overrides:
        layers.append(("flags", {k: v for k, v in overrides.items() if v is not None}))
    merged: dict[str, Any] = {}
    for source, layer in layers:
        merged = _merge(merged, layer)
        try:
            Config.model_validate(merged)
        except ValidationError as e:
            raise ConfigError(f"invalid setting in {source}: {_first_error(e)}") from e
    return Config.model_validate(merged)


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        return f"unknown setting {where!r} (see README.md, Configuration)"
    return f"{where}: {err['msg']}"
