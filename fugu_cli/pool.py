"""The pool: workers from a pool file, from config, from the provider keys present, or a local Ollama, and
which of them can be used now (key set, server answering).

Never talks to a provider itself: whether a server answers, and litellm's prices, are asked of `fugu_cli.llm`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from fugu_cli.config import Config, WorkerConfig, explain, read_toml, workers_from_tables
from fugu_cli.errors import ConfigError, NoWorkerError
from fugu_cli.llm.modelinfo import ModelInfo
from fugu_cli.types import Worker


@dataclass(frozen=True)
class KnownProvider:
    key_env: str
    workers: tuple[Worker, ...]


# Built when no pool is configured: one or two sensible workers per key that is set.
KNOWN_PROVIDERS: tuple[KnownProvider, ...] = (
    KnownProvider(
        "ANTHROPIC_API_KEY",
        (
            Worker(
                name="claude-sonnet",
                model="anthropic/claude-sonnet-4-5-20250929",
                api_key_env="ANTHROPIC_API_KEY",
                description="Anthropic Claude Sonnet 4.5: strong agentic coder, careful multi-file edits, "
                "good at following repository conventions and running tests.",
                priority=3.0,
            ),
        ),
    ),
    KnownProvider(
        "OPENAI_API_KEY",
        (
            Worker(
                name="gpt-5",
                model="openai/gpt-5",
                api_key_env="OPENAI_API_KEY",
                description="OpenAI GPT-5: strong reasoning, debugging and planning; precise targeted fixes.",
                priority=2.5,
            ),
            Worker(
                name="gpt-5-mini",
                model="openai/gpt-5-mini",
                api_key_env="OPENAI_API_KEY",
                description="OpenAI GPT-5 mini: fast and cheap; good for reading code, small edits, "
                "running commands and summarising.",
                priority=1.0,
            ),
        ),
    ),
    KnownProvider(
        "GEMINI_API_KEY",
        (
            Worker(
                name="gemini-pro",
                model="gemini/gemini-2.5-pro",
                api_key_env="GEMINI_API_KEY",
                description="Google Gemini 2.5 Pro: long context, reads large codebases, broad knowledge.",
                priority=2.0,
            ),
        ),
    ),
    KnownProvider(
        "DEEPSEEK_API_KEY",
        (
            Worker(
                name="deepseek",
                model="deepseek/deepseek-chat",
                api_key_env="DEEPSEEK_API_KEY",
                description="DeepSeek V3: very cheap, capable coder for routine edits and scripts.",
                priority=1.5,
            ),
        ),
    ),
)

POOL_HINT = (
    "set ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY or DEEPSEEK_API_KEY, "
    "or start a local Ollama server (found at OLLAMA_HOST, default http://127.0.0.1:11434), "
    "or describe your workers in a pool file (--pool FILE, or [[workers]] in .fugu/config.toml; "
    "see README.md)"
)


def unusable_hint(source: str) -> str:
    """What to do when none of the workers from `source` (`discover_pool`'s) can be used: for workers the
    user described (a pool file, [[workers]] in a config), mend those; else the ways to get any."""
    if source.startswith("pool file "):
        return "start the servers its workers name, set the keys they need, or mend the file (`fugu pool`)"
    if source == "config":
        return "start the servers the [[workers]] name, set the keys they need, or mend them (`fugu pool`)"
    return POOL_HINT


def worker_from_config(w: WorkerConfig) -> Worker:
    return Worker(**{name: getattr(w, name) for name in WorkerConfig.model_fields})


def load_pool_file(path: Path) -> list[Worker]:
    if path.is_dir():
        raise ConfigError(
            f"--pool {path} is a folder: give the pool's TOML file (holding [[workers]] tables)"
        )
    if not path.is_file():
        raise ConfigError(f"pool file {path} does not exist")
    raw = read_toml(path)
    items = raw.get("workers")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{path} has no [[workers]] tables: each worker needs at least name and model")
    try:
        workers = [worker_from_config(w) for w in workers_from_tables(items)]
    except ValidationError as e:
        raise ConfigError(f"{path}: a worker: {explain(e, WorkerConfig)}") from e
    return check_unique(workers, str(path))


def check_unique(workers: Sequence[Worker], source: str) -> list[Worker]:
    seen: set[str] = set()
    for w in workers:
        if w.name in seen:
            raise ConfigError(f"{source}: two workers are named {w.name!r}; names must be unique")
        seen.add(w.name)
    return list(workers)


def pool_from_keys(env: Mapping[str, str] | None = None) -> list[Worker]:
    env = os.environ if env is None else env
    return [w for p in KNOWN_PROVIDERS if env.get(p.key_env) for w in p.workers]


def configured_pool(config: Config, cwd: Path) -> tuple[list[Worker], str]:
    """The pool and where it came from ("pool file X", "config", "provider keys")."""
    if config.pool:
        path = Path(config.pool).expanduser()
        if not path.is_absolute():
            path = cwd / path
        return load_pool_file(path), f"pool file {path}"
    if config.workers:
        return check_unique([worker_from_config(w) for w in config.workers], "config"), "config"
    return pool_from_keys(), "provider keys"


def key_missing(worker: Worker, env: Mapping[str, str] | None = None) -> str | None:
    """The name of the unset key variable this worker needs, if any."""
    env = os.environ if env is None else env
    if worker.api_key_env and not env.get(worker.api_key_env):
        return worker.api_key_env
    return None


@dataclass(frozen=True)
class Availability:
    worker: Worker
    ok: bool
    reason: str


def check_pool(workers: Sequence[Worker], *, probe_servers: bool = True) -> list[Availability]:
    """Whether each worker can be used now: its key is set and, for a local server, the server answers."""
    from fugu_cli.llm.probe import check_available

    out: list[Availability] = []
    servers: dict[str, tuple[bool, str]] = {}  # a server that answers one worker answers all of its workers
    for w in workers:
        missing = key_missing(w)
        if missing:
            out.append(Availability(w, False, f"{missing} is not set"))
        elif w.api_base and probe_servers:
            if w.api_base not in servers:
                servers[w.api_base] = check_available(w, timeout_s=2.0)
            out.append(Availability(w, *servers[w.api_base]))
        else:
            out.append(Availability(w, True, "key set" if w.api_key_env else "no key needed"))
    return out


def discover_pool(config: Config, cwd: Path, saved: Sequence[Worker] = ()) -> tuple[list[Worker], str]:
    """The configured pool; else a resumed session's; else one from the keys present or a local Ollama."""
    workers, source = configured_pool(config, cwd)
    if not workers and saved:
        workers, source = list(saved), "the resumed session"
    if not workers:
        from fugu_cli.llm.probe import ollama_workers

        workers, source = ollama_workers(), "a local Ollama server"
    return workers, source


def usable_pool(config: Config, cwd: Path, saved: Sequence[Worker] = ()) -> list[Worker]:
    """The workers that can be used now; `NoWorkerError` (exit 2, saying what to set) when none can."""
    workers, source = discover_pool(config, cwd, saved)
    if not workers:
        raise NoWorkerError(f"no worker is configured: {POOL_HINT}")
    checked = check_pool(workers)
    usable = [a.worker for a in checked if a.ok]
    if not usable:
        why = "; ".join(f"{a.worker.name}: {a.reason}" for a in checked)
        raise NoWorkerError(f"no usable worker in {source} ({why}): {unusable_hint(source)}")
    return usable


def with_table_prices(pool: Sequence[Worker], info: ModelInfo | None = None) -> list[Worker]:
    """Workers without their own prices get litellm's, so the router's cost term (λ) sees every price.
    Only asked for when λ > 0: it imports litellm, unless `info` (litellm's kept answers) has them."""
    from fugu_cli.llm.client import table_cached_price, table_price

    out: list[Worker] = []
    for w in pool:
        found = table_price(w.model, info) if w.price_in is None and w.price_out is None else None
        if found:
            w = dataclasses.replace(w, price_in=found[0], price_out=found[1], table_prices=True)
            if w.price_cached is None:
                w = dataclasses.replace(w, price_cached=table_cached_price(w.model, info))
        out.append(w)
    return out
