"""The one composition root: run options become a `Resolved` (configuration, pool, router) once, and a
`Resolved` becomes ready Sessions (`assemble`), as many as a server or an eval run needs.

Tests inject a scripted LLM or an approver here instead of patching. Never prints.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from fugu_cli import custom_agents
from fugu_cli.agent import AgentDeps, Limits, TurnIO
from fugu_cli.calls import HealthSettings, RetryPolicy, WorkerCall, WorkerHealth
from fugu_cli.config import Config, fugu_home, load_config, user_config_path
from fugu_cli.context import ContextPolicy
from fugu_cli.context.instructions import Instructions
from fugu_cli.errors import ConfigError, UsageError
from fugu_cli.events import Emit
from fugu_cli.extension_config import ExtensionConfig, load_extensions, parse_mcp_config
from fugu_cli.hooks import HookEnv, Hooks, ToolHooks
from fugu_cli.ledger import Ledger
from fugu_cli.llm import LLM
from fugu_cli.llm.tokens import CharTokens, TokenCounter
from fugu_cli.options import RunOptions, added_dir, find_repo_root
from fugu_cli.pool import usable_pool, with_table_prices
from fugu_cli.redact import register_secret_env
from fugu_cli.router import Router
from fugu_cli.router.prior import PriorRouter
from fugu_cli.router.roles import ROLE_MAX_STEPS, role_instructions
from fugu_cli.session import Session, SessionConfig, SessionDeps, UltraMode
from fugu_cli.store import SessionRow, Store, new_session_id
from fugu_cli.subagents import SubagentLimits
from fugu_cli.tools import Approver, PermissionPolicy, configure_tools
from fugu_cli.tools.background import BackgroundShells
from fugu_cli.turn_settings import Check, TurnSettings
from fugu_cli.types import FallBack, Message, PermissionMode, TurnResult, Worker

if TYPE_CHECKING:
    from fugu_cli.conductor import Conductor
    from fugu_cli.llm.client import ClientConfig
    from fugu_cli.llm.modelinfo import ModelInfo
    from fugu_cli.router.backbone import Backbone
    from fugu_cli.tools.registry import ToolRegistry

__all__ = ["Resolved", "RunOptions", "assemble", "build_session", "open_store", "resolve"]

# what may differ between sessions assembled from one Resolved (the rest is resolved once)
_PER_SESSION = ("worker", "permission_mode", "max_turns", "max_budget_usd", "ultra")


def open_store() -> Store:
    return Store(fugu_home() / "fugu.db")


def repo_root(cwd: Path) -> Path:
    return find_repo_root(cwd.resolve()) or cwd.resolve()


def default_checkpoint() -> Path:
    """The router shipped in the package."""
    return Path(str(resources.files("fugu_cli").joinpath("data", "router_default")))


def known_workers(checkpoint: Path, pool: Sequence[Worker]) -> list[str]:
    """Pool workers the checkpoint was trained on (same name or same litellm model); reads JSON only."""
    meta = json.loads((checkpoint / "router.json").read_text())
    names = {w["name"] for w in meta["workers"]}
    models = {w["model"] for w in meta["workers"] if w.get("model")}
    return [w.name for w in pool if w.name in names or w.model in models]


class RouterSource:
    """Makes each session's router. A learned router's backbone is loaded once and shared by the sessions
    of one process (a server's, an eval run's); the head and the per-transcript cache are each session's.
    A one-shot run `start`s its one learned router in a process of its own while it builds the rest."""

    def __init__(self, checkpoint: Path | None, cost_weight: float | None, threads: int = 2) -> None:
        self.checkpoint = checkpoint  # None: the prior
        self.cost_weight = cost_weight
        self.threads = threads  # torch's intra-op threads for the learned router's backbone (process-wide)
        self._backbone: Backbone | None = None
        self._started: Router | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Begin loading the learned router in a child process now; the next `make` returns it. A checkpoint
        whose description cannot be read is left to `make`, which says what is wrong."""
        if self.checkpoint is None or self._started is not None:
            return
        from fugu_cli.router.remote import RouterProcess

        try:
            self._started = RouterProcess(self.checkpoint, self.cost_weight)
        except (OSError, ValueError):
            self._started = None

    def __getstate__(self) -> dict[str, object]:
        # pickled to a cluster node (fugu eval on Ray): the checkpoint's path travels, the loaded backbone,
        # its router process and the lock stay here; the node loads its own backbone on its first session
        return {**self.__dict__, "_backbone": None, "_started": None, "_lock": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return "prior" if self.checkpoint is None else f"learned:{self.checkpoint.name}"

    def make(self) -> Router:
        if self.checkpoint is None:
            return PriorRouter()
        spec = self.checkpoint
        with self._lock:
            if self._started is not None:
                started, self._started = self._started, None
                return started
            from fugu_cli.router.learned import LearnedRouter

            try:
                if self._backbone is not None:
                    try:
                        return LearnedRouter.load(spec, cost_weight=self.cost_weight, backbone=self._backbone)
                    except ValueError:  # its SVF changes the backbone's weights: it needs its own
                        return LearnedRouter.load(spec, cost_weight=self.cost_weight)
                router = LearnedRouter.load(spec, cost_weight=self.cost_weight, threads=self.threads)
            except (OSError, ValueError, KeyError) as e:
                raise ConfigError(f"cannot load router checkpoint {spec}: {e}") from e
            self._backbone = router.backbone
            return router


def router_source(config: Config, pool: Sequence[Worker]) -> RouterSource:
    """The configured router. With none configured (or "default"): the shipped checkpoint when at least two
    of its workers are in the pool, else the prior."""
    return router_choice(config, pool)[0]


def router_choice(config: Config, pool: Sequence[Worker]) -> tuple[RouterSource, str]:
    """The router a session with this config and pool uses, and why (in words a user can act on)."""
    spec = config.router
    if spec == "prior":
        return RouterSource(None, config.cost_weight), "router = prior is configured"
    if not spec or spec == "default":
        shipped = default_checkpoint()
        known = known_workers(shipped, pool) if (shipped / "router.json").is_file() else []
        if len(known) < 2:
            why = (
                f"the shipped router knows {len(known)} of your workers ({', '.join(known) or 'none'}); "
                "it needs two, so the prior (priority, then description) routes"
            )
            return RouterSource(None, config.cost_weight), why
        why = f"the shipped router knows {len(known)} of your workers: {', '.join(known)}"
        return RouterSource(shipped, config.cost_weight), why
    path = Path(spec).expanduser()
    if not path.exists():
        raise ConfigError(
            f"router checkpoint {spec} does not exist: give 'prior', 'default' or a directory made by "
            "fugu router train"
        )
    return RouterSource(path, config.cost_weight), f"router = {spec} is configured"


class SharedParts:
    """What the sessions assembled from one Resolved share (a server's, an eval run's): the LLM client, so one
    HTTP connection pool and its TLS context (about 1 MiB of native memory each) serve them all, and the token
    counter, so one bounded cache of counts does. Made on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._llm: LLM | None = None
        self._tokens: TokenCounter | None = None

    def llm(self, config: Config) -> LLM:
        with self._lock:
            if self._llm is None:
                self._llm = make_llm(config)
            return self._llm

    def tokens(self, config: Config) -> TokenCounter:
        with self._lock:
            if self._tokens is None:
                self._tokens = make_tokens(config)
            return self._tokens

    def __getstate__(self) -> dict[str, object]:
        return {}  # pickled to a cluster node (fugu eval on Ray): the node makes its own

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__()  # type: ignore[misc]


@dataclass(frozen=True)
class Resolved:
    """Configuration, pool and router, resolved once from run options; sessions are assembled from it."""

    options: RunOptions
    config: Config
    pool: tuple[Worker, ...]
    routers: RouterSource = field(compare=False)
    router_reason: str = ""  # why this router (said once when the shipped router cannot serve the pool)
    shared: SharedParts = field(default_factory=SharedParts, compare=False, repr=False)
    # the workers' health, shared by every session (and serve's pass-through) assembled from this
    health: WorkerHealth = field(compare=False, default_factory=WorkerHealth)

    def worker_call(self) -> WorkerCall:
        """How this pool's workers are called: the configured retries, this process's worker health."""
        s = self.config.llm
        return WorkerCall(self.health, RetryPolicy(s.max_retries, s.backoff_base_s))

    @property
    def names(self) -> list[str]:
        return [w.name for w in self.pool]


def resolve(opts: RunOptions, *, saved_pool: Sequence[Worker] = (), router_process: bool = False) -> Resolved:
    """Read the configuration layers, find the usable pool (probing local servers) and the router.

    `saved_pool` is a resumed session's pool, used when nothing else is configured. `router_process`: a
    learned router starts loading in a process of its own right away (a one-shot run's one session)."""
    config = load_config(opts.cwd, opts.overrides(), trust_project=opts.trust_project)
    pool = usable_pool(config, opts.cwd, saved_pool)
    if (config.cost_weight or 0.0) > 0:
        pool = with_table_prices(pool, kept_model_info())
    config = config.model_copy(update={"worker": worker_named(pool, config.worker)})
    register_secret_env(w.api_key_env for w in pool)
    routers, why = router_choice(config, pool)
    if router_process:
        routers.start()
    return Resolved(opts, config, tuple(pool), routers, why, health=worker_health(config))


def worker_health(config: Config) -> WorkerHealth:
    """The workers' health as this machine's fugu processes have seen it (FUGU_HOME/health.json)."""
    s = config.llm
    return WorkerHealth(HealthSettings(s.cooldown_s, s.cooldown_max_s), fugu_home() / "health.json")


def worker_named(pool: Sequence[Worker], spec: str | None) -> str | None:
    """The pool worker `spec` names: a worker name, its litellm model id (with or without the provider
    prefix), or "auto"/None for the router."""
    if not spec or spec == "auto":
        return None
    for w in pool:
        if spec in (w.name, w.model, w.model.split("/", 1)[-1]):
            return w.name
    names = ", ".join(w.name for w in pool)
    raise UsageError(f"--worker/--model {spec}: no such usable worker or model; choose one of: {names}, auto")


def build_session(
    opts: RunOptions,
    *,
    llm: LLM | None = None,
    approver: Approver | None = None,
    store: Store | None = None,
    tokens: TokenCounter | None = None,
    router_process: bool = False,
) -> Session:
    """One session from flags, config, the store (on resume) and the pool; `router_process`: see `resolve`."""
    store = store or open_store()
    row = _resumed_row(store, opts) if opts.resuming else None
    saved = [Worker(**w) for w in json.loads(row.pool_json)] if row else []
    resolved = resolve(opts, saved_pool=saved, router_process=router_process)
    session = assemble(resolved, opts, llm=llm, approver=approver, store=store, tokens=tokens)
    # a person reads this session's output: advice is theirs once per FUGU_HOME (`fugu doctor` repeats it)
    session.config = replace(session.config, hints=tuple(h for h in session.config.hints if first_time(h)))
    return session


def first_time(text: str) -> bool:
    """Whether `text` is said for the first time in this FUGU_HOME (and from now on it has been). A home that
    cannot be written says it every time."""
    import hashlib

    folder = fugu_home() / "said"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / hashlib.sha256(text.encode()).hexdigest()[:24]).open("x").close()
    except FileExistsError:
        return False
    except OSError:
        return True
    return True


def assemble(
    resolved: Resolved,
    opts: RunOptions | None = None,
    *,
    llm: LLM | None = None,
    approver: Approver | None = None,
    store: Store | None = None,
    tokens: TokenCounter | None = None,
) -> Session:
    """A session in `opts.cwd` with `resolved`'s pool and router. `opts` may differ from the resolved
    options in where the session runs, whether it resumes, and the per-session settings (worker, permission
    mode, limits, ultra); the pool, the router and the configuration files are `resolved`'s."""
    opts = opts or resolved.options
    update = {k: v for k, v in opts.overrides().items() if k in _PER_SESSION and v is not None}
    config = resolved.config.model_copy(update=update)
    config = config.model_copy(update={"worker": worker_named(resolved.pool, config.worker)})
    store = store or open_store()
    root = repo_root(opts.cwd)
    check = session_check(config, opts, root)  # a check that cannot work is refused before anything starts
    row = _resumed_row(store, opts) if opts.resuming else None
    messages = store.transcript(row.id) if row else []
    router = resolved.routers.make()
    sid = row.id if row and not opts.fork_session else new_session_id()
    if row is not None and opts.fork_session:
        row = _forked(store, row, sid, messages)
    if row is None:
        pool_json = json.dumps([asdict(w) for w in resolved.pool])
        store.create_session(sid, str(root), "ultra" if config.ultra else "fugu", pool_json, router.name)
    mode: PermissionMode = config.permission_mode or "ask"
    from fugu_cli.tools.registry import ToolRegistry

    permission = PermissionPolicy(
        mode=mode,
        allow=(*config.permissions.allow, *opts.allow),
        deny=(*config.permissions.deny, *opts.deny),
    )
    tool_ctx = configure_tools(config, root, permission, approver)
    dirs = tuple(added_dir(d, opts.cwd) for d in opts.add_dirs)
    extensions = extension_config(config, opts, root)
    budget = config.context.instructions_tokens
    instructions = Instructions(root, opts.cwd, budget, user_config_path().parent, dirs)
    hooks = Hooks(extensions.hooks, HookEnv(root, tool_ctx.sandbox), sid)
    registry = ToolRegistry.default()
    mcp = None
    if extensions.servers:
        from fugu_cli.mcp import McpManager, McpTools

        mcp = McpManager(extensions.servers, root, tool_ctx.sandbox, fugu_home())
        registry = registry.with_source(McpTools(mcp))
    if config.web.search:
        registry = with_search(registry, config.web.search)
    around: list[ToolHooks] = [hooks] if hooks else []
    agent = AgentDeps(
        llm=llm or resolved.shared.llm(config),
        calls=resolved.worker_call(),
        tools=_tools(registry, opts),
        tool_ctx=tool_ctx,
        hooks=(*around, instructions),
        ledger=Ledger(store, sid),
        workers={w.name: w for w in resolved.pool},
        session_id=sid,
        role_prompt=role_instructions,
        context=context_policy(
            config,
            tokens
            or (resolved.shared.tokens(config) if llm is None else CharTokens(config.context.output_reserve)),
        ),
    )
    settings = TurnSettings(
        permission=permission,
        worker=config.worker,
        ultra=config.ultra,
        limits=Limits(max_steps=_max_steps(config, opts, router), max_budget_usd=config.max_budget_usd),
        dirs=dirs,
        check=check,
    )
    session_config = SessionConfig(
        root=root,
        settings=settings,
        system_prompt=system_prompt(
            root,
            base=opts.system_prompt,
            append=opts.append_system_prompt,
            instructions=instructions.prompt_text(),
        ),
        router_name=router.name,
        stream=opts.stream,
        notices=(*_notices(config), *extensions.notices, *_agent_notices(config, root)),
        hints=_hints(config, resolved),
        keep_checkpoint_sessions=config.tools.keep_checkpoint_sessions,
        trusted=config.project_trusted,
        slash_commands=_custom_command_names(root),
        agents=custom_agents.load(root, config.project_trusted),
        subagents=SubagentLimits(**dict(config.subagents)),  # dict(): model_dump would build its serializer
    )
    ultra = build_conductor(config, opts, agent, store, resolved.pool, root, instructions.prompt_text())
    deps = SessionDeps(
        agent=agent,
        store=store,
        pool=resolved.pool,
        router=router,
        fallback=PriorRouter(),
        ultra=ultra,
        repo_map=repo_map_source(config, root, agent.context),
        hooks=hooks if hooks else None,
        mcp=mcp,
        instructions=instructions,
        observers=_observers(config, resolved.pool),
        background=BackgroundShells(),
    )
    return Session(deps, session_config, messages)


def _forked(store: Store, row: SessionRow, sid: str, messages: Sequence[Message]) -> SessionRow:
    """`--fork-session`: a new session `sid` holding `row`'s transcript as it stands (the original goes on
    unchanged); its checkpoints start afresh."""
    store.create_session(sid, row.cwd, row.mode, row.pool_json, row.router)
    ledger = Ledger(store, sid)
    for message in messages:
        ledger.turn(0).message(message)
    store.touch_session(sid, title=f"fork of {row.id[:8]}: {row.title}"[:80])
    forked = store.get_session(sid)
    assert forked is not None
    return forked


def _agent_notices(config: Config, root: Path) -> tuple[str, ...]:
    """What the repository's own agents would add once its folder is trusted."""
    names = [] if config.project_trusted else custom_agents.untrusted(root)
    if not names:
        return ()
    return (
        f"this folder is not trusted, so its agents ({', '.join(names)}) are not offered; "
        "`fugu trust` (or --trust-project) offers them",
    )


def _observers(config: Config, pool: Sequence[Worker]) -> tuple[Emit, ...]:
    """Who sees every event besides the front end: the telemetry exporter, when it is on."""
    from fugu_cli import telemetry

    export = telemetry.observer(config.telemetry, pool)
    return (export,) if export is not None else ()


def system_prompt(
    root: Path,
    name: str = "system",
    *,
    base: str | None = None,
    append: str | None = None,
    instructions: str | None = None,
) -> str:
    """The workers' instructions: fugu's prompt `name` (or `base`, a caller's replacement), the instruction
    files (the user's, the repository's and its folders' AGENTS.md or CLAUDE.md; all of them within their
    budget when not given), then `append`."""
    from fugu_cli import prompts

    text = base if base else prompts.load(name)
    if instructions is None:
        budget = Config().context.instructions_tokens
        instructions = Instructions(root, root, budget, user_config_path().parent).prompt_text()
    if instructions:
        text += f"\n\n{instructions}"
    if append:
        text += f"\n\n{append}"
    return text


def extension_config(config: Config, opts: RunOptions, root: Path) -> ExtensionConfig:
    """The session's MCP servers and hooks (`--mcp-config` adds servers; `--strict-mcp-config` keeps only
    those)."""
    extra: dict[str, object] = {}
    for given in opts.mcp_config:
        try:
            extra.update(parse_mcp_config(given))
        except ConfigError as e:
            raise UsageError(str(e)) from None
    return load_extensions(config, root, extra_servers=extra, strict=opts.strict_mcp_config)


def _custom_command_names(root: Path) -> tuple[str, ...]:
    from fugu_cli import custom_commands

    return tuple(c.name for c in custom_commands.load(root).values())


def with_search(registry: ToolRegistry, provider: str) -> ToolRegistry:
    """`registry` with web_search through `provider` (`[web] search`)."""
    from fugu_cli.tools.web_search import search_tool

    try:
        return registry.adding(search_tool(provider, registry.get))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _tools(registry: ToolRegistry, opts: RunOptions) -> ToolRegistry:
    """The tools the workers see: all, or `--tools`'s, less the hidden ones (an MCP server's name hides all
    of its tools)."""
    hidden = opts.hidden_tools
    try:
        if opts.only_tools is not None:
            registry = registry.subset(list(opts.only_tools))
    except ValueError as e:
        raise UsageError(f"--tools: {e}") from None
    if not hidden:
        return registry
    return registry.filtered(lambda n: not any(n == h or n.startswith(h + "__") for h in hidden))


def make_tokens(config: Config) -> TokenCounter:
    """litellm's tokenizers for each worker's model (litellm loads on the first count)."""
    from fugu_cli.llm.client import load_litellm
    from fugu_cli.llm.tokens import LiteLLMTokens

    return LiteLLMTokens(load_litellm, config.context.output_reserve, model_info_path())


def context_policy(config: Config, tokens: TokenCounter) -> ContextPolicy:
    c = config.context
    return ContextPolicy(tokens, compact_at=c.compact_at, keep_recent=c.keep_recent, summarizer=c.summarizer)


def repo_map_source(
    config: Config, root: Path, policy: ContextPolicy | None
) -> Callable[[Sequence[Message], Sequence[Path]], str] | None:
    """What gives each turn its repo map (None with `--no-repo-map` or a zero budget): the repository's, and
    each added folder's (the budget shared)."""
    c = config.context
    if not c.repo_map or c.repo_map_tokens <= 0 or policy is None:
        return None
    from fugu_cli.context.repomap import RepoMap

    counter = policy.counter
    maps: dict[Path, RepoMap] = {root: RepoMap(root, fugu_home() / "repomap", counter)}
    budget = c.repo_map_tokens

    def make(messages: Sequence[Message], dirs: Sequence[Path]) -> str:
        share = budget // (1 + len(dirs))
        parts = [maps[root].render(messages, share if dirs else budget)]
        for folder in dirs:
            repo = maps.setdefault(folder, RepoMap(folder, fugu_home() / "repomap", counter))
            text = repo.render(messages, share)
            if text:
                where = os.path.relpath(folder, root)
                parts.append(
                    f"In {where}/ (a folder added beside the repository; paths are relative to it):\n{text}"
                )
        return "\n\n".join(p for p in parts if p)

    return make


def make_llm(config: Config) -> LLM:
    from fugu_cli.llm.client import LiteLLMClient

    return LiteLLMClient(client_config(config))


def client_config(config: Config) -> ClientConfig:
    """How each attempt at a worker is made (`[llm]`), for the agent's client and serve's pass-through."""
    from fugu_cli.llm.client import ClientConfig

    s = config.llm
    return ClientConfig(
        timeout_s=s.timeout_s,
        stream=s.stream,
        direct=s.direct,
        first_byte_timeout_s=s.first_byte_timeout_s,
        model_info=model_info_path(),
    )


def model_info_path() -> Path:
    """Where litellm's answers about models (windows, tokenizers, their prices) are kept."""
    return fugu_home() / "cache" / "models.json"


def kept_model_info() -> ModelInfo:
    """litellm's answers about models, kept between runs (litellm is imported for a model met first)."""
    from fugu_cli.llm.client import kept_answers

    return kept_answers(model_info_path())


def build_conductor(
    config: Config,
    opts: RunOptions,
    agent: AgentDeps,
    store: Store,
    pool: Sequence[Worker],
    root: Path,
    instructions: str | None = None,
) -> UltraMode:
    """Ultra mode's conductor, for every session so `/ultra on` works anywhere; its settings are checked now,
    but a session that does not start in ultra mode loads the conductor's modules on its first ultra turn."""
    u = config.ultra_settings
    names = [w.name for w in pool]
    trained = _local_conductor(u.conductor, root)
    conductor = (None if trained else u.conductor) or max(pool, key=lambda w: w.priority).name
    if conductor not in names:
        choose = ", ".join(names)
        raise UsageError(f"[ultra] conductor = {conductor!r} is not a usable worker; choose one of: {choose}")
    plan = None
    if opts.plan is not None:
        from fugu_cli.conductor.workflow import PlanError, load

        try:
            plan = load(opts.plan, names, allow_conductor=u.max_depth > 0)
        except PlanError as e:
            raise UsageError(str(e)) from None

    def make() -> Conductor:
        from fugu_cli.conductor import Conductor, ConductorConfig, ConductorDeps

        cfg = ConductorConfig(
            root=root,
            conductor=conductor,
            home=fugu_home(),
            max_depth=u.max_depth,
            step_limits=Limits(u.step_max_turns, u.step_max_budget_usd, u.step_timeout_s),
            system_prompt=system_prompt(
                root, "workflow_step", append=opts.append_system_prompt, instructions=instructions
            ),
            plan=plan,
            trained=trained,
        )
        return Conductor(ConductorDeps(agent=agent, store=store, pool=pool), cfg)

    return make() if config.ultra else _Deferred(make)


def _local_conductor(setting: str | None, root: Path) -> Path | None:
    """The model folder `[ultra] conductor = "local:PATH"` names (relative to the project), or None for a
    pool worker. A folder that is not a causal-LM folder is a usage error now, not at the first turn."""
    if not setting or not setting.startswith("local:"):
        return None
    raw = setting.removeprefix("local:").strip()
    path = Path(raw).expanduser()
    path = path if path.is_absolute() else root / path
    if not raw or not (path / "config.json").is_file():
        raise UsageError(
            f'[ultra] conductor = "{setting}": {path} is not a model folder (no config.json). Train one with '
            "`fugu conductor train`, or name a pool worker."
        )
    return path


class _Deferred:
    """Ultra mode built on its first turn."""

    def __init__(self, make: Callable[[], Conductor]) -> None:
        self._make = make
        self._conductor: Conductor | None = None

    def run_turn(
        self,
        text: str,
        turn: int,
        io: TurnIO,
        *,
        agent: AgentDeps | None = None,
        before_apply: Callable[[], None] | None = None,
        record: Callable[[Message], None] = lambda m: None,
    ) -> TurnResult | FallBack:
        if self._conductor is None:
            self._conductor = self._make()
        return self._conductor.run_turn(text, turn, io, agent=agent, before_apply=before_apply, record=record)


def _resumed_row(store: Store, opts: RunOptions) -> SessionRow:
    root = repo_root(opts.cwd)
    row = store.get_session(opts.resume) if opts.resume else store.latest_session(str(root))
    if row is None:
        what = f"no session {opts.resume}" if opts.resume else f"no earlier session in {root}"
        raise UsageError(f"cannot resume: {what} (list them with: fugu sessions)")
    return row


def _hints(config: Config, resolved: Resolved) -> tuple[str, ...]:
    """Said once, at the first turn: why the shipped router does not route this pool, and the way to one."""
    if resolved.routers.checkpoint is not None or config.router or len(resolved.pool) < 2:
        return ()
    return (
        f"{resolved.router_reason}. For a learned router for your own workers: run `fugu eval SUITE`, then "
        "`fugu router train --store`; or give each worker a `description` a checkpoint can score "
        "(README: Routers for your own pool)",
    )


def _notices(config: Config) -> tuple[str, ...]:
    if not config.ignored:
        return ()
    what = ", ".join(config.ignored)
    return (
        f"this folder is not trusted, so its .fugu/config.toml was obeyed only in part (ignored: {what}). "
        "Trust it with --trust-project, or answer yes when the REPL asks",
    )


def session_check(config: Config, opts: RunOptions, root: Path) -> Check | None:
    """The check that judges each attempt (`--check`, else `[checks] verify`; "auto": the repository's own
    test command), validated in the sandbox."""
    command = opts.check if opts.check is not None else config.checks.verify
    if command is None:
        return None
    from fugu_cli.tools.sandbox import policy_from_config
    from fugu_cli.tools.verify import resolve, validate

    check = Check(resolve(command, root), config.checks.verify_timeout_s)
    validate(check.command, root, policy_from_config(config.sandbox))
    return check


def _max_steps(config: Config, opts: RunOptions, router: Router) -> int:
    """The role variant works in short turns (ROLE_MAX_STEPS) unless the user asked for another limit."""
    if getattr(router, "has_roles", False) and opts.max_turns is None:
        return min(config.max_turns, ROLE_MAX_STEPS)
    return config.max_turns
