"""The one composition root: turns options and configuration into a ready Session (and its parts).

Tests inject a scripted LLM or an approver here instead of patching. Never prints.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fugu_cli.agent import AgentDeps, Limits
from fugu_cli.config import Config, PermissionModeName, fugu_home, load_config
from fugu_cli.errors import ConfigError, NoWorkerError, UsageError
from fugu_cli.events import ignore
from fugu_cli.ledger import Ledger
from fugu_cli.llm import LLM
from fugu_cli.pool import POOL_HINT, configured_pool, key_missing
from fugu_cli.router import Router
from fugu_cli.router.prior import PriorRouter
from fugu_cli.router.roles import role_instructions
from fugu_cli.session import Session, SessionConfig, SessionDeps
from fugu_cli.store import Store, new_session_id
from fugu_cli.tools import Approver, PermissionPolicy, ToolContext
from fugu_cli.types import Message, Worker

if TYPE_CHECKING:
    from fugu_cli.conductor import Conductor


@dataclass
class RunOptions:
    """What the user asked for on the command line (None: not given, the config decides)."""

    cwd: Path = field(default_factory=Path.cwd)
    pool: str | None = None
    worker: str | None = None
    router: str | None = None
    cost_weight: float | None = None
    permission_mode: str | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    resume: str | None = None
    continue_last: bool = False
    stream: bool = False
    ultra: bool | None = None
    plan: Path | None = None  # --plan FILE: the workflow ultra mode runs instead of asking the conductor


@dataclass(frozen=True)
class Availability:
    worker: Worker
    ok: bool
    reason: str


def open_store() -> Store:
    return Store(fugu_home() / "fugu.db")


def repo_root(cwd: Path) -> Path:
    from fugu_cli.config import find_repo_root

    return find_repo_root(cwd.resolve()) or cwd.resolve()


def check_pool(workers: Sequence[Worker], *, probe_servers: bool = True) -> list[Availability]:
    """Whether each worker can be used now: its key is set and, for a local server, the server answers."""
    from fugu_cli.llm.probe import check_available

    out: list[Availability] = []
    for w in workers:
        missing = key_missing(w)
        if missing:
            out.append(Availability(w, False, f"{missing} is not set"))
        elif w.api_base and probe_servers:
            ok, reason = check_available(w, timeout_s=2.0)
            out.append(Availability(w, ok, reason))
        else:
            out.append(Availability(w, True, "key set" if w.api_key_env else "no key needed"))
    return out


def load_options_config(opts: RunOptions) -> Config:
    overrides: dict[str, Any] = {
        "pool": opts.pool,
        "worker": opts.worker,
        "router": opts.router,
        "cost_weight": opts.cost_weight,
        "permission_mode": opts.permission_mode,
        "max_turns": opts.max_turns,
        "max_budget_usd": opts.max_budget_usd,
        "ultra": opts.ultra,
    }
    return load_config(opts.cwd, overrides)


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
    workers, source = discover_pool(config, cwd, saved)
    if not workers:
        raise NoWorkerError(f"no worker is configured: {POOL_HINT}")
    checked = check_pool(workers)
    usable = [a.worker for a in checked if a.ok]
    if not usable:
        why = "; ".join(f"{a.worker.name}: {a.reason}" for a in checked)
        raise NoWorkerError(f"no usable worker in {source} ({why}): {POOL_HINT}")
    return usable


def with_table_prices(pool: Sequence[Worker]) -> list[Worker]:
    """Workers without their own prices get litellm's, so the router's cost term (λ) sees every price.
    Only asked for when λ > 0: it imports litellm."""
    from fugu_cli.llm.client import table_price

    out: list[Worker] = []
    for w in pool:
        found = table_price(w.model) if w.price_in is None and w.price_out is None else None
        out.append(dataclasses.replace(w, price_in=found[0], price_out=found[1]) if found else w)
    return out


def default_checkpoint() -> Path:
    """The router shipped in the package (trained on swebench_verified_dev)."""
    return Path(str(resources.files("fugu_cli").joinpath("data", "router_default")))


def known_workers(checkpoint: Path, pool: Sequence[Worker]) -> list[str]:
    """Pool workers the checkpoint was trained on (same name or same litellm model); reads JSON only."""
    meta = json.loads((checkpoint / "router.json").read_text())
    names = {w["name"] for w in meta["workers"]}
    models = {w["model"] for w in meta["workers"] if w.get("model")}
    return [w.name for w in pool if w.name in names or w.model in models]


def build_router(config: Config, pool: Sequence[Worker]) -> Router:
    """The configured router. With none configured (or "default"): the shipped checkpoint when at least two
    of its workers are in the pool, else the prior."""
    spec = config.router
    if spec == "prior":
        return PriorRouter()
    if not spec or spec == "default":
        shipped = default_checkpoint()
        if not (shipped / "router.json").is_file() or len(known_workers(shipped, pool)) < 2:
            return PriorRouter()
        spec = str(shipped)
    from fugu_cli.router.learned import LearnedRouter

    path = Path(spec).expanduser()
    if not path.exists():
        raise ConfigError(
            f"router checkpoint {spec} does not exist (give a directory made by fugu router train)"
        )
    try:
        return LearnedRouter.load(path, cost_weight=config.cost_weight)
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"cannot load router checkpoint {spec}: {e}") from e


def system_prompt(root: Path, name: str = "system") -> str:
    from fugu_cli import prompts

    text = prompts.load(name)
    for name in ("AGENTS.md", "CLAUDE.md"):
        path = root / name
        if path.is_file():
            text += f"\n\nProject instructions from {name}:\n{path.read_text(errors='replace')[:20_000]}"
            break
    return text


def make_llm(config: Config) -> LLM:
    from fugu_cli.llm.client import ClientConfig, LiteLLMClient

    s = config.llm
    return LiteLLMClient(
        ClientConfig(
            timeout_s=s.timeout_s, max_retries=s.max_retries, backoff_base_s=s.backoff_base_s, stream=s.stream
        )
    )


def build_session(
    opts: RunOptions,
    *,
    llm: LLM | None = None,
    approver: Approver | None = None,
    store: Store | None = None,
) -> Session:
    """Everything a turn needs, from flags, config, the store (on resume) and the pool."""
    config = load_options_config(opts)
    store = store or open_store()
    root = repo_root(opts.cwd)
    resumed, saved_pool, messages = _resume(store, opts, root)
    pool = usable_pool(config, opts.cwd, saved_pool)
    if (config.cost_weight or 0.0) > 0:
        pool = with_table_prices(pool)
    names = [w.name for w in pool]
    if config.worker and config.worker not in names:
        raise UsageError(
            f"--worker {config.worker}: no such usable worker; choose one of: {', '.join(names)}"
        )
    router = build_router(config, pool)
    mode: PermissionModeName = config.permission_mode or "ask"
    policy = PermissionPolicy(
        mode=mode, allow=list(config.permissions.allow), deny=list(config.permissions.deny)
    )
    sid = resumed or new_session_id()
    if not resumed:
        store.create_session(
            sid,
            str(root),
            "ultra" if config.ultra else "fugu",
            json.dumps([asdict(w) for w in pool]),
            router.name,
        )
    from fugu_cli.tools.registry import ToolRegistry

    agent = AgentDeps(
        llm=llm or make_llm(config),
        tools=ToolRegistry.default(),
        tool_ctx=ToolContext(
            root=root, agent="", policy=policy, approve=approver, shell_timeout_s=config.shell_timeout_s
        ),
        ledger=Ledger(store, sid),
        workers={w.name: w for w in pool},
        emit=ignore,
        session_id=sid,
        stream=opts.stream,
        role_prompt=role_instructions,
    )
    session_config = SessionConfig(
        root=root,
        limits=Limits(max_steps=_max_steps(config, opts, router), max_budget_usd=config.max_budget_usd),
        forced_worker=config.worker,
        system_prompt=system_prompt(root),
        permission_mode=mode,
        router_name=router.name,
    )
    ultra = build_conductor(config, opts, agent, store, pool, root)
    session_config.ultra = config.ultra
    deps = SessionDeps(
        agent=agent, store=store, pool=pool, router=router, fallback=PriorRouter(), ultra=ultra
    )
    return Session(deps, session_config, messages)


def build_conductor(
    config: Config, opts: RunOptions, agent: AgentDeps, store: Store, pool: Sequence[Worker], root: Path
) -> Conductor:
    """Ultra mode's conductor (always built, so `/ultra on` works in any session)."""
    from fugu_cli.conductor import Conductor, ConductorConfig, ConductorDeps
    from fugu_cli.conductor.workflow import PlanError, load

    u = config.ultra_settings
    names = [w.name for w in pool]
    conductor = u.conductor or max(pool, key=lambda w: w.priority).name
    if conductor not in names:
        choose = ", ".join(names)
        raise UsageError(f"[ultra] conductor = {conductor!r} is not a usable worker; choose one of: {choose}")
    plan = None
    if opts.plan is not None:
        try:
            plan = load(opts.plan, names, allow_conductor=u.max_depth > 0)
        except PlanError as e:
            raise UsageError(str(e)) from None
    cfg = ConductorConfig(
        root=root,
        conductor=conductor,
        home=fugu_home(),
        max_depth=u.max_depth,
        step_limits=Limits(u.step_max_turns, u.step_max_budget_usd, u.step_timeout_s),
        system_prompt=system_prompt(root, "workflow_step"),
        plan=plan,
    )
    return Conductor(ConductorDeps(agent=agent, store=store, pool=pool), cfg)


def _resume(store: Store, opts: RunOptions, root: Path) -> tuple[str | None, list[Worker], list[Message]]:
    if not (opts.resume or opts.continue_last):
        return None, [], []
    row = store.get_session(opts.resume) if opts.resume else store.latest_session(str(root))
    if row is None:
        what = f"session {opts.resume}" if opts.resume else f"a previous session in {root}"
        raise UsageError(f"cannot resume: no {what} (list them with: fugu sessions)")
    saved = [Worker(**w) for w in json.loads(row.pool_json)]
    messages = [m for _, m in store.load_messages(row.id)]
    return row.id, saved, messages


def _max_steps(config: Config, opts: RunOptions, router: Router) -> int:
    """The role variant works in short turns (ROLE_MAX_STEPS) unless the user asked for another limit."""
    from fugu_cli.router.roles import ROLE_MAX_STEPS

    if getattr(router, "has_roles", False) and opts.max_turns is None:
        return min(config.max_turns, ROLE_MAX_STEPS)
    return config.max_turns
