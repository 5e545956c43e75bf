"""Layered configuration: defaults < user config < `.fugu/config.toml` < `FUGU_*` environment < flags.

Owns where state lives (`FUGU_HOME`), how config files are read and validated, and which folders the user
trusts (per repository root: a nested repository is never trusted through its parent): a repository's own
config is untrusted until then, and may only make fugu more careful (no workers, endpoints, routers,
permissions or tools from a cloned repo). Never prints.
"""

from __future__ import annotations

import difflib
import json
import os
import threading
import tomllib
from collections.abc import Sequence
from pathlib import Path
from types import UnionType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from fugu_cli import __version__
from fugu_cli.errors import ConfigError
from fugu_cli.home import fugu_home as fugu_home  # where it always lived, for its many callers
from fugu_cli.options import find_repo_root, project_config_path
from fugu_cli.types import PermissionMode

# Validators are built on first use, not when this module is imported: a run whose layers were validated
# before builds its Config from the cache (`load_config`) and never needs them.
_STRICT = ConfigDict(extra="forbid", defer_build=True)


class WorkerConfig(BaseModel):
    """One `[[workers]]` table, as a user writes it."""

    model_config = _STRICT

    name: str = Field(min_length=1)
    model: str = Field(min_length=1)
    api_base: str | None = None
    api_key_env: str | None = None
    description: str = ""
    priority: float = 0.0
    price_in: float | None = Field(default=None, ge=0)
    price_out: float | None = Field(default=None, ge=0)
    context_limit: int | None = Field(default=None, gt=0)
    price_cached: float | None = Field(default=None, ge=0)
    vision: bool | None = None  # it accepts images (default: as litellm's model table says)
    embedding_model: str | None = Field(default=None, min_length=1)  # served on fugu serve's /v1/embeddings


class LLMSettings(BaseModel):
    model_config = _STRICT

    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    backoff_base_s: float = Field(default=0.5, ge=0)
    stream: bool = True
    direct: bool = True  # OpenAI-compatible workers over HTTP directly; false: through litellm as well
    first_byte_timeout_s: float = Field(default=30.0, gt=0)  # a silent worker fails over, not retried
    # a worker whose call failed is left alone this long (doubling with each failure in a row, up to
    # cooldown_max_s), then probed with one attempt; 0: no cool-down
    cooldown_s: float = Field(default=30.0, ge=0)
    cooldown_max_s: float = Field(default=600.0, ge=0)


class PermissionSettings(BaseModel):
    model_config = _STRICT

    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)


SandboxModeName = Literal["read-only", "workspace-write", "off"]


class SandboxSettings(BaseModel):
    """`[sandbox]`: how every command fugu starts is confined (see docs/SECURITY.md)."""

    model_config = _STRICT

    mode: SandboxModeName = "workspace-write"
    allow_network: bool = False
    pass_env: list[str] = Field(default_factory=list)  # extra variables commands may see
    writable: list[str] = Field(default_factory=list)  # extra writable paths, e.g. "~/.cache/uv"
    hide: list[str] | None = None  # paths made invisible besides the maintained credential list


class ToolSettings(BaseModel):
    """`[tools]`: bounds on tool output and what fugu keeps."""

    model_config = _STRICT

    output_tokens: int = Field(default=8000, ge=250)  # one tool result, estimated as characters / 4
    keep_checkpoint_sessions: int = Field(default=20, ge=1)


class WebSettings(BaseModel):
    """`[web]`: which hosts web_fetch reaches without asking or never, how much it reads, and web_search's
    provider (docs/SECURITY.md, Web)."""

    model_config = _STRICT

    allow: list[str] = Field(default_factory=list)  # hosts (and their subdomains); "*": every public host
    deny: list[str] = Field(default_factory=list)
    max_bytes: int = Field(default=2_000_000, ge=1_000)
    timeout_s: float = Field(default=30.0, gt=0)
    search: str | None = None  # "brave" (a key in BRAVE_API_KEY), or an MCP tool: "mcp__server__tool"
    search_url: str | None = None
    search_key_env: str | None = None


class ChecksSettings(BaseModel):
    """`[checks]`: `after_edit` commands run in the sandbox after each edit (and `lsp`, a language server,
    is asked about the edited files), their findings given back to the worker; `verify` is a shell command
    that judges each attempt at a turn (as `--check` does): it runs in the sandbox when a worker ends its
    attempt; exit code 0 passes."""

    model_config = _STRICT

    after_edit: list[str] = Field(default_factory=list)  # "ruff check {files}": {files} is the edited files
    lsp: list[str] = Field(default_factory=list)  # a language server's command, e.g. ["pylsp"]
    timeout_s: float = Field(default=60.0, gt=0)
    max_chars: int = Field(default=4000, ge=200)  # of the findings given back after one edit
    verify: str | None = None
    verify_timeout_s: float = Field(default=600.0, gt=0)


class UltraSettings(BaseModel):
    model_config = _STRICT

    conductor: str | None = None
    max_depth: int = Field(default=2, ge=0)
    step_max_turns: int = Field(default=20, ge=1)
    step_timeout_s: float = Field(default=900.0, gt=0)
    step_max_budget_usd: float | None = Field(default=None, gt=0)


class SubagentSettings(BaseModel):
    """`[subagents]`: the `task` tool's subagents (0 for max_depth: no `task` tool)."""

    model_config = _STRICT

    max_depth: int = Field(default=1, ge=0)  # 1: the turn's agent may hand off, its subagents may not
    max_per_turn: int = Field(default=8, ge=1)
    max_turns: int = Field(default=20, ge=1)  # steps of one subagent
    max_budget_usd: float | None = Field(default=None, gt=0)  # one subagent's (never above the turn's left)


class ContextSettings(BaseModel):
    """`[context]`: how fugu keeps every request inside its worker's window."""

    model_config = _STRICT

    compact_at: float = Field(default=0.8, gt=0.1, le=1.0)  # share of the chosen worker's window
    summarizer: str | None = None  # the worker that writes summaries (default: the cheapest that fits)
    keep_recent: float = Field(default=0.3, gt=0.0, lt=0.9)  # share of the window kept verbatim
    output_reserve: int | None = Field(default=None, gt=0)  # tokens kept for the reply
    repo_map: bool = True
    repo_map_tokens: int = Field(default=1024, ge=0)
    instructions_tokens: int = Field(default=8000, ge=0)  # AGENTS.md / CLAUDE.md files, all levels together


DEFAULT_MCP_TOOL_TIMEOUT_S = 120.0  # one MCP tool call; a hanging tool is cut off after this


class McpServerSettings(BaseModel):
    """`[mcp_servers.NAME]`: an MCP server, started as a command (stdio) or reached at a URL (HTTP)."""

    model_config = _STRICT

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)  # the server's whole environment beyond the minimal one
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    type: Literal["stdio", "http", "streamable-http", "sse"] | None = None
    enabled: bool = True
    network: bool = True  # a stdio server's sandbox may reach the network (most servers exist to)
    writable: list[str] = Field(default_factory=list)  # extra writable paths for a stdio server (~/.npm)
    startup_timeout_s: float = Field(default=30.0, gt=0)
    tool_timeout_s: float = Field(default=DEFAULT_MCP_TOOL_TIMEOUT_S, gt=0)  # `timeout` (ms) in .mcp.json

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if self.enabled and (self.command is None) == (self.url is None):
            raise ValueError(
                "give either command (a stdio server) or url (an HTTP server), not both or neither"
            )
        return self


class HookCommandSettings(BaseModel):
    """One command of a Claude-style matcher group: `{type = "command", command = "...", timeout = 10}`."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["command"] = "command"
    command: str = Field(min_length=1)
    timeout: float | None = Field(default=None, gt=0)


class HookSettings(BaseModel):
    """One `[[hooks.EVENT]]` entry: a matcher and a command (fugu's flat form) or a list of commands (Claude's
    nested form)."""

    model_config = _STRICT

    matcher: str = ""
    command: str | None = None
    timeout: float | None = Field(default=None, gt=0)
    hooks: list[HookCommandSettings] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_command(self) -> HookSettings:
        if self.command is None and not self.hooks:
            raise ValueError('give a command (or Claude\'s hooks = [{type = "command", command = ...}])')
        return self

    def commands(self) -> list[HookCommandSettings]:
        own = [HookCommandSettings(command=self.command, timeout=self.timeout)] if self.command else []
        return own + list(self.hooks)


HOOK_EVENTS = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SessionStart")
HookEventName = Literal["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SessionStart"]


class ExecutorSettings(BaseModel):
    """`[executor]`: where `fugu eval` jobs and router training run (README.md, Running on a cluster)."""

    model_config = _STRICT

    kind: Literal["local", "ray"] = "local"
    address: str | None = None  # ray: "auto", "ray://head:10001"; none: a local Ray instance
    num_cpus: int | None = Field(default=None, ge=1)  # a local Ray instance's CPUs
    cpus_per_job: float = Field(default=1.0, gt=0)
    max_retries: int = Field(default=3, ge=0)  # re-runs of a job whose worker process or node died


class TelemetrySettings(BaseModel):
    """`[telemetry]`: OpenTelemetry export (fugu_cli/telemetry.py). Off unless `enabled = true`, or unset
    and an `OTEL_EXPORTER_OTLP_*ENDPOINT` variable is set; a repository's own config cannot turn it on."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    enabled: bool | None = None
    endpoint: str | None = None  # OTLP/HTTP base URL (http://collector:4318); default: the OTEL_* variables
    headers: dict[str, str] = Field(default_factory=dict)  # e.g. an API key of the backend (redacted)
    service_name: str | None = None  # default: OTEL_SERVICE_NAME, else "fugu"
    metrics: bool = True


class Config(BaseModel):
    """The merged configuration."""

    model_config = _STRICT

    router: str | None = None
    cost_weight: float | None = Field(default=None, ge=0)  # λ, reward per USD; None: the router's own
    permission_mode: PermissionMode | None = None
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
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    subagents: SubagentSettings = Field(default_factory=SubagentSettings)
    mcp_servers: dict[str, McpServerSettings] = Field(default_factory=dict)
    hooks: dict[HookEventName, list[HookSettings]] = Field(default_factory=dict)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    web: WebSettings = Field(default_factory=WebSettings)
    checks: ChecksSettings = Field(default_factory=ChecksSettings)
    # what an untrusted project config asked for and did not get ("workers", "permission_mode=full-auto")
    _ignored: tuple[str, ...] = PrivateAttr(default=())
    _trusted: bool = PrivateAttr(default=False)

    @property
    def ignored(self) -> tuple[str, ...]:
        return self._ignored

    @property
    def project_trusted(self) -> bool:
        """Whether the repository's own files may add MCP servers and hooks (its folder is trusted)."""
        return self._trusted


ENV_KEYS: dict[str, str] = {
    "FUGU_ROUTER": "router",
    "FUGU_COST_WEIGHT": "cost_weight",
    "FUGU_PERMISSION_MODE": "permission_mode",
    "FUGU_MAX_TURNS": "max_turns",
    "FUGU_MAX_BUDGET_USD": "max_budget_usd",
    "FUGU_WORKER": "worker",
    "FUGU_POOL": "pool",
}


def user_config_path() -> Path:
    if os.environ.get("FUGU_HOME"):
        return fugu_home() / "config.toml"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "fugu" / "config.toml"


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}. Fix the file or move it away.") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text (byte {e.start}): save it as UTF-8.") from e
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from e


# What a repository's own config may set before its folder is trusted: limits, timeouts and choices among
# the user's own workers. Everything else (workers, endpoints, keys, routers, permissions) is the user's.
_SAFE_PROJECT_KEYS = frozenset(
    {
        "max_turns",
        "max_budget_usd",
        "shell_timeout_s",
        "worker",
        "ultra",
        "ultra-settings",
        "llm",
        "cost_weight",
        "context",
    }
)


def trust_path() -> Path:
    """The user's list of trusted folders (beside the user config)."""
    return user_config_path().parent / "trusted.toml"


def trusted_folders() -> list[str]:
    path = trust_path()
    if not path.is_file():
        return []
    folders = read_toml(path).get("folders", [])
    return [str(f) for f in folders] if isinstance(folders, list) else []


def is_trusted(path: Path) -> bool:
    """Whether the user trusts the repository `path` is in. Trust belongs to one repository root: a nested
    repository (a vendored dependency, a submodule, a clone) under a trusted one is not trusted, nor is a
    repository under a trusted plain folder. A folder in no repository inherits a trusted parent's."""
    here = path.resolve()
    root = find_repo_root(here)
    folders = [Path(f) for f in trusted_folders()]
    if root is not None:
        return root in folders
    return any(here == f or here.is_relative_to(f) for f in folders)


def trust(root: Path) -> None:
    """Remember that the user trusts `root` (its config may then set workers, permissions and tools)."""
    folders = trusted_folders()
    here = str(root.resolve())
    if here in folders:
        return
    path = trust_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# folders whose .fugu/config.toml fugu obeys in full (fugu trust adds to it)", "folders = ["]
    lines += [f"  {json.dumps(f)}," for f in [*folders, here]]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join([*lines, "]", ""]), encoding="utf-8")
    tmp.replace(path)


def needs_trust(cwd: Path) -> list[str]:
    """What the project config here would be refused while its folder is untrusted ([] when nothing)."""
    project = project_config_path(cwd)
    if not project.is_file() or is_trusted(project.parent.parent):
        return []
    return untrusted_settings(_normalise(read_toml(project)))[1]


def untrusted_settings(layer: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Split a project layer into what an untrusted folder may set and what is ignored (described)."""
    kept = {k: v for k, v in layer.items() if k in _SAFE_PROJECT_KEYS}
    special = ("permission_mode", "permissions", "web")
    ignored = [k for k in layer if k not in _SAFE_PROJECT_KEYS and k not in special]
    mode = layer.get("permission_mode")
    if mode == "read-only":  # more careful is always fine
        kept["permission_mode"] = mode
    elif mode is not None:
        ignored.append(f"permission_mode={mode}")
    for table in ("permissions", "web"):  # deny rules only make fugu more careful
        rules = layer.get(table)
        if isinstance(rules, dict):
            if rules.get("deny"):
                kept[table] = {"deny": rules["deny"]}
            ignored += [f"{table}.{k}" for k in rules if k != "deny"]
    return kept, ignored


def _merge(base: dict[str, Any], over: dict[str, Any], *, top: bool = True) -> dict[str, Any]:
    """`over` on top of `base`, table by table; every layer's hooks run (their lists are joined)."""
    out = dict(base)
    for key, value in over.items():
        if top and key == "hooks" and isinstance(value, dict) and isinstance(out.get(key), dict):
            joined = dict(out[key])
            for event, entries in value.items():
                before = joined.get(event)
                if isinstance(before, list) and isinstance(entries, list):
                    joined[event] = [*before, *entries]
                else:
                    joined[event] = entries
            out[key] = joined
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value, top=False)
        else:
            out[key] = value
    return out


def _normalise(raw: dict[str, Any]) -> dict[str, Any]:
    """Accept `[ultra]` as a table (settings) as well as `ultra = true` (the mode flag)."""
    data = dict(raw)
    if isinstance(data.get("ultra"), dict):
        data["ultra-settings"] = data.pop("ultra")
    return data


def load_config(cwd: Path, overrides: dict[str, Any] | None = None, *, trust_project: bool = False) -> Config:
    """Merge every layer. `overrides` are the flags the user gave (None values are ignored). The project's
    own config counts in full only when its folder is trusted (or `trust_project`); else see `ignored`."""
    layers: list[tuple[str, dict[str, Any]]] = []
    user = user_config_path()
    if user.is_file():
        layers.append((str(user), _normalise(read_toml(user))))
    project = project_config_path(cwd)
    ignored: list[str] = []
    trusted = trust_project or is_trusted(project.parent.parent)
    if project.is_file():
        layer = _normalise(read_toml(project))
        if not trusted:
            layer, ignored = untrusted_settings(layer)
        layers.append((str(project), layer))
    env = {key: os.environ[var] for var, key in ENV_KEYS.items() if os.environ.get(var)}
    if env:
        layers.append(("FUGU_* environment", env))
    if overrides:
        layers.append(("flags", {k: v for k, v in overrides.items() if v is not None}))
    merged: dict[str, Any] = {}
    for _, layer in layers:
        merged = _merge(merged, layer)
    config = _cached(merged) or _validated(layers)
    config._ignored = tuple(ignored)
    config._trusted = trusted
    return config


def _validated(layers: Sequence[tuple[str, dict[str, Any]]]) -> Config:
    """Each layer checked on top of the ones below it (so an error names the file that caused it); the result
    is kept in the cache for the next run with the same layers."""
    merged: dict[str, Any] = {}
    for source, layer in layers:
        merged = _merge(merged, layer)
        try:
            Config.model_validate(merged)
        except ValidationError as e:
            raise ConfigError(f"invalid setting in {source}: {explain(e)}") from e
    config = Config.model_validate(merged)
    if not _holds_secrets(
        merged
    ):  # the cache is a plain file: a secret the user gave stays where they gave it
        _cache_write("config", merged, config.model_dump(mode="json"))
    return config


_SECRET_TABLES = frozenset(
    {"env", "headers"}
)  # an MCP server's environment, an HTTP server's headers, hooks'


def _holds_secrets(data: Any) -> bool:
    """Whether a raw config holds values that are secrets by where they are (an `env` or `headers` table with
    values), which must never be copied out of the file the user wrote them in."""
    if isinstance(data, dict):
        return any(
            (str(k).lower() in _SECRET_TABLES and bool(v)) or _holds_secrets(v) for k, v in data.items()
        )
    if isinstance(data, list):
        return any(_holds_secrets(v) for v in data)
    return False


def _cached(merged: dict[str, Any]) -> Config | None:
    """The Config the same layers validated to last time, built without validating: pydantic's validators
    were the largest cost of a run's start. None when the layers differ."""
    found = _cache_read("config", merged)
    config = _construct(Config, found) if isinstance(found, dict) else None
    return config if isinstance(config, Config) else None


def workers_from_tables(items: Sequence[Any]) -> list[WorkerConfig]:
    """`[[workers]]` tables (of a pool file) validated, or built as they validated last time; raises
    ValidationError for the first bad one."""
    found = _cache_read("pool", items)
    if isinstance(found, list):
        return [_construct(WorkerConfig, w) for w in found]
    workers = [WorkerConfig.model_validate(item) for item in items]
    if not _holds_secrets(list(items)):
        _cache_write("pool", items, [w.model_dump(mode="json") for w in workers])
    return workers


def _cache_key(data: Any) -> str:
    """What was validated and this fugu's schema: a changed setting or an edited config.py misses."""
    import hashlib

    here = os.stat(__file__)
    raw = json.dumps([__version__, here.st_mtime_ns, here.st_size, data], sort_keys=True, default=repr)
    return hashlib.sha256(raw.encode()).hexdigest()


def _cache_read(name: str, data: Any) -> Any:
    """What `data` validated to last time (one entry per name, under FUGU_HOME/cache); None on a miss."""
    try:
        entry = json.loads((fugu_home() / "cache" / f"{name}.json").read_text(encoding="utf-8"))
        return entry["value"] if entry.get("key") == _cache_key(data) else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _cache_write(name: str, data: Any, value: Any) -> None:
    path = fugu_home() / "cache" / f"{name}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"key": _cache_key(data), "value": value}), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # no cache this time: the next run validates again


def _construct(kind: Any, value: Any) -> Any:
    """`value` (a validated model's JSON dump) as `kind`, models built with `model_construct` (no checks)."""
    import typing

    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        fields = {
            name: _construct(field.annotation, value[name])
            for name, field in kind.model_fields.items()
            if name in value
        }
        return kind.model_construct(**fields)
    if origin is list and isinstance(value, list):
        return [_construct(args[0], v) for v in value]
    if origin is dict and isinstance(value, dict):
        return {k: _construct(args[1], v) for k, v in value.items()}
    if origin in (typing.Union, UnionType) and value is not None:
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        return _construct(models[0], value) if models else value
    return value


def explain(e: ValidationError, root: type[BaseModel] | None = None) -> str:
    """The first problem of a validation error in the user's terms (with a did-you-mean for a typo)."""
    errors = e.errors()
    # a misspelt key also shows up as a missing one: the misspelling is what the user should read
    err = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
    where = ".".join(str(p) for p in err["loc"]).replace("ultra-settings", "ultra", 1)
    if err["type"] == "extra_forbidden":
        known = _known_keys(err["loc"][:-1], root or Config)
        guess = difflib.get_close_matches(str(err["loc"][-1]), known, n=1, cutoff=0.6)
        hint = f"; did you mean {guess[0]!r}?" if guess else ""
        return f"unknown setting {where!r}{hint} (see README.md, Configuration)"
    return f"{where}: {err['msg']}"


def _known_keys(path: Sequence[int | str], model: type[BaseModel]) -> list[str]:
    """The keys a config table accepts at `path` (("llm",) → timeout_s, max_retries, ...)."""
    for part in path:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) or next(
            (f for f in model.model_fields.values() if f.alias == part), None
        )
        inner = field.annotation if field else None
        inner = next(iter(getattr(inner, "__args__", ())), inner)  # list[WorkerConfig] -> WorkerConfig
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return []
        model = inner
    names = [f.alias or name for name, f in model.model_fields.items()]
    return ["ultra" if n == "ultra-settings" else n for n in names]
