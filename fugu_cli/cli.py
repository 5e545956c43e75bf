"""Typer commands: parse flags, call app.py, pick a renderer, return the exit code. No logic lives here.

`fugu --version` answers before typer is imported; nothing heavy is imported before a command runs.
"""

from __future__ import annotations

import dataclasses
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from fugu_cli import __version__

SUBCOMMANDS = (
    "pool",
    "sessions",
    "router",
    "conductor",
    "demo",
    "eval",
    "serve",
    "acp",
    "doctor",
    "completion",
    "mcp",
    "help",
)

app = typer.Typer(
    name="fugu",
    help="fugu: a team of LLMs behind one prompt, routed step by step.",
    no_args_is_help=False,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
sessions_app = typer.Typer(help="List and inspect past sessions.", rich_markup_mode=None)
router_app = typer.Typer(help="Inspect, train and judge routers.", rich_markup_mode=None)
mcp_app = typer.Typer(help="The MCP servers a session here gets.", rich_markup_mode=None)
conductor_app = typer.Typer(help="Train and judge a conductor model (ultra mode).", rich_markup_mode=None)
app.add_typer(sessions_app, name="sessions")
app.add_typer(router_app, name="router")
app.add_typer(conductor_app, name="conductor")
app.add_typer(mcp_app, name="mcp")


class OutputFormat(StrEnum):
    text = "text"
    json = "json"
    stream_json = "stream-json"


class InputFormat(StrEnum):
    text = "text"
    stream_json = "stream-json"


class PermissionChoice(StrEnum):
    """fugu's permission modes and Claude Code's names for them (fugu_cli.options maps those)."""

    ask = "ask"
    auto_edit = "auto-edit"
    full_auto = "full-auto"
    read_only = "read-only"
    default = "default"
    accept_edits = "acceptEdits"
    bypass_permissions = "bypassPermissions"
    plan = "plan"
    dont_ask = "dontAsk"


def run(
    ctx: typer.Context,
    task: Annotated[
        list[str] | None, typer.Argument(help="The task. Without one (and nothing on stdin): the REPL.")
    ] = None,
    print_mode: Annotated[
        bool, typer.Option("-p", "--print", help="Run the task non-interactively and exit.")
    ] = False,
    output_format: Annotated[
        OutputFormat,
        typer.Option("--output-format", help="text, json (one object) or stream-json (a line per event)."),
    ] = OutputFormat.text,
    max_turns: Annotated[int | None, typer.Option("--max-turns", min=1, help="Most steps per task.")] = None,
    max_budget_usd: Annotated[
        float | None, typer.Option("--max-budget-usd", min=0.0, help="Stop when the task has cost this much.")
    ] = None,
    check: Annotated[
        str | None,
        typer.Option(
            "--check",
            help="A shell command that judges each attempt (exit 0 passes; auto: the repository's test "
            "command); a failed attempt is set aside and the next worker tries.",
        ),
    ] = None,
    worker: Annotated[str | None, typer.Option("--worker", help="Force this worker for every step.")] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Force a worker by name or litellm model id; auto: the router picks."),
    ] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="A TOML file of [[workers]].")] = None,
    permission_mode: Annotated[
        PermissionChoice | None,
        typer.Option(
            "--permission-mode",
            help="ask, auto-edit, full-auto or read-only (or Claude Code's default, acceptEdits, "
            "bypassPermissions, plan, dontAsk).",
        ),
    ] = None,
    allowed_tools: Annotated[
        list[str] | None,
        typer.Option(
            "--allowedTools", "--allowed-tools", help="Allow these without asking: Bash(git status:*),Edit."
        ),
    ] = None,
    disallowed_tools: Annotated[
        list[str] | None,
        typer.Option("--disallowedTools", "--disallowed-tools", help="Refuse these: Bash(rm:*),Write."),
    ] = None,
    tools: Annotated[
        str | None, typer.Option("--tools", help="The only tools the workers see (default: all; '': none).")
    ] = None,
    system_prompt: Annotated[
        str | None, typer.Option("--system-prompt", help="Replace fugu's instructions to the workers.")
    ] = None,
    system_prompt_file: Annotated[
        Path | None, typer.Option("--system-prompt-file", help="Replace them with this file's text.")
    ] = None,
    append_system_prompt: Annotated[
        str | None, typer.Option("--append-system-prompt", help="Add this to fugu's instructions.")
    ] = None,
    input_format: Annotated[
        InputFormat,
        typer.Option("--input-format", help="text, or stream-json: user messages as JSON lines on stdin."),
    ] = InputFormat.text,
    prompt_tool: Annotated[
        str | None,
        typer.Option(
            "--permission-prompt-tool",
            help="stdio (with --input-format stream-json): ask the client before edits and commands.",
        ),
    ] = None,
    partial: Annotated[
        bool,
        typer.Option(
            "--include-partial-messages", help="stream-json: also send the workers' text as it comes."
        ),
    ] = False,
    await_initialize: Annotated[
        bool,
        typer.Option(
            "--await-initialize",
            help="stream-json: wait for the client's initialize request (its system prompt, MCP servers) "
            "before starting.",
        ),
    ] = False,
    permission_prompts: Annotated[
        str | None,
        typer.Option(
            "--permission-prompts",
            help="host: the client answers permission questions (with --permission-prompt-tool stdio); "
            "none: what would be asked is refused.",
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Allow edits and commands (same as full-auto).")
    ] = False,
    continue_last: Annotated[
        bool, typer.Option("--continue", "-c", help="Continue the last session here.")
    ] = False,
    resume: Annotated[
        str | None, typer.Option("--resume", "-r", help="Resume the session with this id.")
    ] = None,
    fork_session: Annotated[
        bool,
        typer.Option("--fork-session", help="With --resume/--continue: a new session from that one's point."),
    ] = False,
    router: Annotated[
        str | None, typer.Option("--router", help="A router checkpoint directory, 'default' or 'prior'.")
    ] = None,
    cost_weight: Annotated[
        float | None,
        typer.Option(
            "--cost-weight", min=0.0, help="λ in reward per US dollar (default: the router checkpoint's own)."
        ),
    ] = None,
    ultra: Annotated[
        bool, typer.Option("--ultra", help="Let a conductor plan a multi-worker workflow.")
    ] = False,
    plan: Annotated[Path | None, typer.Option("--plan", help="Run this workflow file (ultra mode).")] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Show route decisions and tool calls on stderr.")
    ] = False,
    trust_project: Annotated[
        bool,
        typer.Option(
            "--trust-project",
            help="Obey this repository's own files in full: .fugu/config.toml (workers, permissions), "
            ".mcp.json and hooks.",
        ),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Also print fugu's log (kept in FUGU_HOME/logs) on stderr.")
    ] = False,
    debug_file: Annotated[
        Path | None, typer.Option("--debug-file", help="Also write fugu's full log to this file.")
    ] = None,
    no_repo_map: Annotated[
        bool, typer.Option("--no-repo-map", help="Give the workers no repository map at each turn.")
    ] = False,
    mcp_config: Annotated[
        list[str] | None,
        typer.Option("--mcp-config", help='MCP servers from a file or JSON string: {"mcpServers": {...}}.'),
    ] = None,
    strict_mcp_config: Annotated[
        bool, typer.Option("--strict-mcp-config", help="Use only the MCP servers of --mcp-config.")
    ] = False,
    add_dir: Annotated[
        list[Path] | None,
        typer.Option("--add-dir", help="Let the tools reach this folder beside the repository (repeatable)."),
    ] = None,
    image: Annotated[
        list[Path] | None,
        typer.Option(
            "--image", help="Send this picture with the task, to a worker that sees images (repeatable)."
        ),
    ] = None,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    """Run a task (fugu TASK, fugu -p TASK, or the task on stdin), or open the REPL."""
    if version:
        print(f"fugu {__version__}")
        raise typer.Exit(0)
    from fugu_cli import logs
    from fugu_cli.options import RunOptions
    from fugu_cli.ui import run as runner

    logs.setup(debug=debug, debug_file=debug_file)
    opts = RunOptions(
        cwd=Path.cwd(),
        pool=pool,
        worker=worker,
        router=router,
        cost_weight=cost_weight,
        max_turns=max_turns,
        max_budget_usd=max_budget_usd,
        resume=resume,
        continue_last=continue_last,
        fork_session=fork_session,
        stream=output_format is OutputFormat.text and sys.stdout.isatty(),
        ultra=True if ultra or plan is not None else None,
        plan=plan,
        trust_project=trust_project,
        repo_map=False if no_repo_map else None,
        mcp_config=tuple(mcp_config or ()),
        strict_mcp_config=strict_mcp_config,
        add_dirs=tuple(add_dir or ()),
        images=tuple(image or ()),
        check=check,
    )
    out = runner.Output(
        task=" ".join(task or []),
        print_mode=print_mode,
        format=output_format.value,
        input_format=input_format.value,
        notes=tuple(ctx.obj or ()),
        await_initialize=await_initialize,
    )
    flags = runner.Flags(
        model=model,
        permission_mode=permission_mode.value if permission_mode else None,
        yes=yes,
        allowed_tools=tuple(allowed_tools or ()),
        disallowed_tools=tuple(disallowed_tools or ()),
        tools=tools,
        system_prompt=system_prompt,
        system_prompt_file=system_prompt_file,
        append_system_prompt=append_system_prompt,
        prompt_tool=prompt_tool,
        partial=partial,
        permission_prompts=permission_prompts,
    )
    raise typer.Exit(runner.main(opts, out, flags))


@app.command("pool")
def pool_cmd(
    pool: Annotated[str | None, typer.Option("--pool", help="A TOML file of [[workers]].")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    reset_health: Annotated[
        bool, typer.Option("--reset-health", help="Forget recent failures: no worker is cooling down.")
    ] = False,
) -> None:
    """List the workers: usable or not (and why), model, price, window, and any cool-down after failing."""
    from fugu_cli.ui import admin

    raise typer.Exit(admin.pool_command(pool, json_out, reset_health))


@app.command("doctor")
def doctor_cmd(
    pool: Annotated[str | None, typer.Option("--pool", help="A TOML file of [[workers]].")] = None,
) -> None:
    """Check this machine and folder: versions, keys, usable workers, the router a session would use."""
    from fugu_cli.ui import doctor

    raise typer.Exit(doctor.main(pool))


@mcp_app.command("list")
def mcp_list_cmd(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    trust_project: Annotated[
        bool, typer.Option("--trust-project", help="Count this repository's .mcp.json and config in full.")
    ] = False,
) -> None:
    """Start each MCP server once and show where it comes from, its status, tools and prompts."""
    from fugu_cli.ui import mcp_list

    raise typer.Exit(mcp_list.main(Path.cwd(), json_out, trust_project))


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


@app.command("completion")
def completion_cmd(shell: Annotated[Shell, typer.Argument(help="bash, zsh or fish.")]) -> None:
    """Print the shell completion script (where to put it: README.md, Shell completions)."""
    from importlib import resources

    script = resources.files("fugu_cli").joinpath("data", "completions", f"fugu.{shell.value}")
    sys.stdout.write(script.read_text(encoding="utf-8"))


@app.command("demo")
def demo_cmd(
    router: Annotated[str | None, typer.Option("--router", help="A router checkpoint, or 'prior'.")] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the demo repository.")] = False,
) -> None:
    """Replay a recorded multi-worker session offline: see fugu work without a key."""
    from fugu_cli.ui import demo

    raise typer.Exit(demo.main(router, keep))


@app.command("eval")
def eval_cmd(
    suite: Annotated[
        str, typer.Argument(help="A suite folder (holding suite.toml) or a shipped suite's name, e.g. pyfix.")
    ],
    worker: Annotated[
        list[str] | None, typer.Option("--worker", help="Evaluate this worker alone (repeatable).")
    ] = None,
    mode: Annotated[
        list[str] | None, typer.Option("--mode", help="fugu (the router picks) or ultra (repeatable).")
    ] = None,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Runs per task and arm.")] = 1,
    parallel: Annotated[
        int | None,
        typer.Option("--parallel", min=1, help="Runs at once (default 2; with Ray: the cluster's CPUs)."),
    ] = None,
    task: Annotated[
        list[str] | None, typer.Option("--task", help="Only tasks whose id matches this glob (repeatable).")
    ] = None,
    executor: Annotated[
        str | None, typer.Option("--executor", help="local (threads here) or ray (a Ray cluster).")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address", help="A Ray cluster to join (auto, ray://HOST:10001); none: start one."
        ),
    ] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="A TOML file of [[workers]].")] = None,
    router: Annotated[
        str | None, typer.Option("--router", help="A router checkpoint for the fugu arm, or 'prior'.")
    ] = None,
    max_turns: Annotated[int | None, typer.Option("--max-turns", min=1, help="Most steps per run.")] = None,
    max_budget_usd: Annotated[
        float | None, typer.Option("--max-budget-usd", min=0.0, help="Stop a run when it has cost this much.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
    keep: Annotated[bool, typer.Option("--keep", help="Keep each run's task repo.")] = False,
) -> None:
    """Run a task suite per worker and per mode, score each run by the task's check, and store the rewards
    that router training learns from. Without --worker/--mode: every usable worker and fugu."""
    from fugu_cli import logs
    from fugu_cli.eval import EvalOptions
    from fugu_cli.eval import main as eval_main
    from fugu_cli.options import RunOptions

    logs.setup()
    options = EvalOptions(
        suite=suite,
        workers=worker or [],
        modes=mode or [],
        repeats=repeats,
        parallel=parallel,
        tasks=task or [],
        executor=executor,
        ray_address=ray_address,
        run=RunOptions(pool=pool, router=router, max_turns=max_turns, max_budget_usd=max_budget_usd),
        json_out=json_out,
        keep=keep,
    )
    raise typer.Exit(eval_main(options))


@conductor_app.command("train")
def conductor_train(
    base: Annotated[
        Path, typer.Option("--base", help="A local Hugging Face causal-LM folder to start from.")
    ],
    out: Annotated[Path, typer.Option("--out", help="The folder to write the trained conductor to.")],
    data: Annotated[
        Path | None, typer.Option("--data", help="An outcome folder (dataset.toml) to replay workflows on.")
    ] = None,
    steps: Annotated[int, typer.Option("--steps", min=1, help="GRPO steps.")] = 40,
    group: Annotated[int, typer.Option("--group", min=2, help="Workflows sampled per prompt.")] = 4,
    prompts_per_step: Annotated[int, typer.Option("--prompts-per-step", min=1)] = 2,
    lr: Annotated[float, typer.Option("--lr", min=0.0, help="GRPO learning rate.")] = 2e-5,
    completion_tokens: Annotated[int, typer.Option("--completion-tokens", min=8)] = 96,
    lora_rank: Annotated[int, typer.Option("--lora-rank", min=0, help="LoRA rank; 0: full fine-tune.")] = 16,
    sft_steps: Annotated[int, typer.Option("--sft-steps", min=0, help="Warm-start steps (0: none).")] = 40,
    sft_lr: Annotated[float, typer.Option("--sft-lr", min=0.0)] = 2e-4,
    sft_batch: Annotated[int, typer.Option("--sft-batch", min=1, help="Workflows per warm-start step.")] = 8,
    beta: Annotated[
        float, typer.Option("--beta", min=0.0, help="KL weight toward the base (0: none).")
    ] = 0.0,
    lam: Annotated[float, typer.Option("--lambda", min=0.0, help="λ: reward per USD spent.")] = 0.0,
    carry: Annotated[
        float,
        typer.Option(
            "--carry-accuracy", min=0.0, max=1.0, help="Replay: P(a step carries a right answer it sees)."
        ),
    ] = 0.8,
    max_depth: Annotated[int, typer.Option("--max-depth", min=0, help="Recursion depth (0: none).")] = 1,
    split: Annotated[
        str | None, typer.Option("--split", help="given[:LABEL] | kfold:K:SEED:FOLD | tasks:A,B | all.")
    ] = None,
    min_workers: Annotated[int, typer.Option("--min-workers", min=1, help="Smallest pool subset shown.")] = 2,
    max_workers: Annotated[int, typer.Option("--max-workers", min=1, help="Largest pool subset shown.")] = 5,
    env: Annotated[
        str, typer.Option("--env", help="replay (an outcome folder) or live (a suite).")
    ] = "replay",
    suite: Annotated[str | None, typer.Option("--suite", help="live: the suite to run (e.g. pyfix).")] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="live: a TOML file of [[workers]].")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")] = "auto",
    bf16: Annotated[bool, typer.Option("--bf16", help="bfloat16 training (GPU).")] = False,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="CPU threads for torch.")] = None,
) -> None:
    """Train a conductor with GRPO (TRL): a warm start on valid workflows, then workflows sampled per prompt,
    run in the environment, rewarded 0 / 0.5 / 1 − λ·USD against their group."""
    from fugu_cli.conductor.lm import LMConfig
    from fugu_cli.conductor.replay import Rules
    from fugu_cli.eval.conductor_cmd import TrainRequest, train_main

    cfg = LMConfig(
        steps=steps,
        group=group,
        prompts_per_step=prompts_per_step,
        learning_rate=lr,
        completion_tokens=completion_tokens,
        beta=beta,
        lora_rank=lora_rank,
        lora_alpha=2 * max(lora_rank, 1),
        sft_steps=sft_steps,
        sft_learning_rate=sft_lr,
        sft_batch=sft_batch,
        seed=seed,
        device=device,
        bf16=bf16,
        threads=threads,
    )
    rules = Rules(carry_accuracy=carry, lam=lam, max_depth=max_depth)
    req = TrainRequest(data, base, out, cfg, rules, split, min_workers, max_workers, env, suite, pool)
    raise typer.Exit(train_main(req))


@conductor_app.command("eval")
def conductor_eval(
    data: Annotated[Path, typer.Option("--data", help="An outcome folder (dataset.toml) to judge on.")],
    conductor: Annotated[
        Path, typer.Option("--conductor", help="A trained conductor (or any causal-LM folder).")
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
    lam: Annotated[
        float | None, typer.Option("--lambda", min=0.0, help="λ (default: the conductor's).")
    ] = None,
    subset: Annotated[
        int | None, typer.Option("--subset", min=1, help="Show each prompt this many random workers.")
    ] = None,
    best_of: Annotated[int, typer.Option("--best-of", min=1, help="N of best-of-N and of the cascade.")] = 3,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Judge only the first N prompts.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")] = "auto",
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="CPU threads for torch.")] = None,
) -> None:
    """Judge a conductor on prompts it never trained on, by replay, beside the baselines: best single,
    best-of-N with a judge, cheap-first cascade, fixed templates, random workflows, oracle."""
    from fugu_cli.conductor.evaluate import EvalSpec
    from fugu_cli.eval.conductor_cmd import eval_main

    spec = EvalSpec(data, conductor, lam, None, subset, best_of, limit, seed, device=device, threads=threads)
    raise typer.Exit(eval_main(spec, json_out))


@app.command("serve")
def serve_cmd(
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (loopback only by default).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0: any free one).")] = 8787,
    pool: Annotated[str | None, typer.Option("--pool", help="A TOML file of [[workers]].")] = None,
    permission_mode: Annotated[
        PermissionChoice,
        typer.Option(
            "--permission-mode",
            help="What the agent's tools may do: read-only (default), auto-edit, full-auto; ask refuses.",
        ),
    ] = PermissionChoice.read_only,
    api_key: Annotated[
        str | None, typer.Option("--api-key", envvar="FUGU_SERVE_KEY", help="Require this bearer token.")
    ] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option("--api-key-env", metavar="VAR", help="Require the bearer token held in variable VAR."),
    ] = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option("--cors-origin", metavar="ORIGIN", help="Let web pages from ORIGIN call (repeatable)."),
    ] = None,
    store_days: Annotated[
        float,
        typer.Option("--store-days", min=0.0, help="Keep stored Responses (store: true) this many days."),
    ] = 30.0,
    header_timeout: Annotated[
        float,
        typer.Option(
            "--header-timeout", min=0.1, metavar="S", help="Close a connection whose request head is late."
        ),
    ] = 10.0,
    body_timeout: Annotated[
        float,
        typer.Option("--body-timeout", min=0.1, metavar="S", help="Answer 408 to a request body this late."),
    ] = 60.0,
) -> None:
    """Serve an OpenAI-compatible endpoint: fugu (router-only pass-through), fugu-agent, fugu-ultra,
    fugu/<worker>."""
    from fugu_cli import logs, serve
    from fugu_cli.options import RunOptions
    from fugu_cli.options import permission_mode as mode_named

    logs.setup()
    options = serve.ServeOptions(
        run=RunOptions(pool=pool, permission_mode=mode_named(permission_mode.value)),
        host=host,
        port=port,
        api_key=api_key,
        api_key_env=api_key_env,
        cors_origins=tuple(cors_origin or ()),
        response_ttl_s=store_days * 86400.0,
        header_timeout_s=header_timeout,
        body_timeout_s=body_timeout,
    )
    raise typer.Exit(serve.main(options))


@app.command("acp")
def acp_cmd(
    pool: Annotated[str | None, typer.Option("--pool", help="A TOML file of [[workers]].")] = None,
    worker: Annotated[str | None, typer.Option("--worker", help="Force this worker for every step.")] = None,
    router: Annotated[
        str | None, typer.Option("--router", help="A router checkpoint directory, 'default' or 'prior'.")
    ] = None,
    permission_mode: Annotated[
        PermissionChoice | None,
        typer.Option("--permission-mode", help="The sessions' starting mode (default ask: the editor asks)."),
    ] = None,
    max_turns: Annotated[
        int | None, typer.Option("--max-turns", min=1, help="Most steps per prompt.")
    ] = None,
    max_budget_usd: Annotated[
        float | None,
        typer.Option("--max-budget-usd", min=0.0, help="Stop a prompt when it has cost this much."),
    ] = None,
    trust_project: Annotated[
        bool, typer.Option("--trust-project", help="Obey the repositories' own .fugu/config.toml in full.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Also print fugu's log on stderr.")] = False,
) -> None:
    """Serve the Agent Client Protocol on stdin/stdout: fugu as the agent of an editor (Zed, JetBrains)."""
    from fugu_cli import acp, logs
    from fugu_cli.options import RunOptions
    from fugu_cli.options import permission_mode as mode_named

    logs.setup(debug=debug)
    opts = RunOptions(
        pool=pool,
        worker=worker,
        router=router,
        permission_mode=mode_named(permission_mode.value) if permission_mode else None,
        max_turns=max_turns,
        max_budget_usd=max_budget_usd,
        trust_project=trust_project,
    )
    raise typer.Exit(acp.main(opts))


@sessions_app.callback(invoke_without_command=True)
def sessions_list(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1)] = 20,
) -> None:
    """List recent sessions (newest first)."""
    if ctx.invoked_subcommand is None:
        from fugu_cli.ui import admin

        raise typer.Exit(admin.sessions_list(limit))


@sessions_app.command("show")
def sessions_show(
    session_id: Annotated[str, typer.Argument(help="A session id (a unique prefix will do).")],
) -> None:
    """Print each step of a session: worker, why it was chosen, tools called, cost."""
    from fugu_cli.ui import admin

    raise typer.Exit(admin.sessions_show(session_id))


class ExportFormat(StrEnum):
    md = "md"
    json = "json"
    html = "html"


@sessions_app.command("export")
def sessions_export(
    session_id: Annotated[str, typer.Argument(help="A session id (a unique prefix will do).")],
    fmt: Annotated[
        ExportFormat, typer.Option("--format", "-f", help="md (Markdown), json or html.")
    ] = ExportFormat.md,
    out: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file (default: stdout).")
    ] = None,
) -> None:
    """Write a session as a readable transcript: each routing decision, tool call, diff and cost, redacted."""
    from fugu_cli.ui import admin

    raise typer.Exit(admin.sessions_export(session_id, fmt.value, out))


@router_app.command("info")
def router_info(
    checkpoint: Annotated[
        str | None,
        typer.Argument(
            help="A checkpoint directory, 'default' (the shipped one) or 'prior'; none: this session's."
        ),
    ] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="A TOML file of [[workers]].")] = None,
) -> None:
    """Print what a router checkpoint holds (backbone, workers, training data, metrics); without one, which
    router a session here would use and why."""
    from fugu_cli.ui import admin

    raise typer.Exit(admin.router_info(checkpoint, pool))


@router_app.command("train")
def router_train(
    data: Annotated[
        list[Path],
        typer.Option(
            "--data", help="A data set folder (dataset.toml), or a fugu store; repeat to stack sets."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="The checkpoint directory to write.")],
    stage: Annotated[str, typer.Option("--stage", help="sft, es or both.")] = "both",
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            help="given[:LABEL] | kfold:K:SEED:FOLD | tasks:A,B | all (default: given, or kfold:5:0:0).",
        ),
    ] = None,
    tau: Annotated[
        float | None,
        typer.Option(
            "--tau", min=0.001, help="Temperature of the soft targets (default: chosen from 0.05, 0.1, 0.2)."
        ),
    ] = None,
    svf: Annotated[str, typer.Option("--svf", help="SVF targets, e.g. last:1; empty: head only.")] = "last:1",
    generations: Annotated[int, typer.Option("--generations", min=1, help="sep-CMA-ES generations.")] = 30,
    lam: Annotated[
        float,
        typer.Option(
            "--lambda",
            min=0.0,
            help="λ in reward per USD: every stage maximises normalised reward − λ × cost (USD a prompt).",
        ),
    ] = 0.0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    threads: Annotated[int | None, typer.Option("--threads", min=1)] = None,
    store: Annotated[
        bool, typer.Option("--store", help="--data is a fugu store (fugu eval's outcomes).")
    ] = False,
    prices: Annotated[
        Path | None,
        typer.Option(
            "--prices", help="CSV model,input_price_per_mtok,output_price_per_mtok for data without cost."
        ),
    ] = None,
    processes: Annotated[
        int, typer.Option("--processes", min=1, help="Processes for embedding and stage 2 (1: this one).")
    ] = 1,
    executor: Annotated[
        str | None,
        typer.Option("--executor", help="local (--processes here) or ray: embedding and stage 2 on Ray."),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address", help="A Ray cluster to join (auto, ray://HOST:10001); none: start one."
        ),
    ] = None,
    verifier_accuracy: Annotated[
        float,
        typer.Option(
            "--verifier-accuracy",
            min=0.0,
            max=1.0,
            help="How often the check that judges each attempt is right (the escalation policy's replay).",
        ),
    ] = 0.9,
) -> None:
    """Train a router from measured outcomes: soft-label KL with SVF, then sep-CMA-ES over its escalation
    policy on replayed episodes."""
    from fugu_cli.errors import UsageError
    from fugu_cli.router.stages import stage_named

    try:
        chosen = stage_named(stage)  # before the imports below load torch
    except UsageError as e:
        print(f"fugu: {e}", file=sys.stderr)
        raise typer.Exit(2) from None
    from fugu_cli.router.commands import TrainOptions
    from fugu_cli.router.es import ESConfig
    from fugu_cli.router.train import TrainConfig
    from fugu_cli.router.trainer import Stage2
    from fugu_cli.ui import admin

    config = TrainConfig(
        lam=lam,
        seed=seed,
        threads=threads,
        svf_targets=tuple(t for t in svf.split(",") if t),
        check_accuracy=verifier_accuracy,
    )
    opts = TrainOptions(
        tuple(data),
        out,
        stage=chosen,
        split=split,
        config=config if tau is None else dataclasses.replace(config, taus=(tau,)),
        stage2=Stage2(es=ESConfig(generations=generations, seed=seed, processes=processes)),
        store=store,
        prices=prices,
        processes=processes,
        executor=executor,
        ray_address=ray_address,
    )
    raise typer.Exit(admin.router_train(opts))


@router_app.command("eval")
def router_eval(
    data: Annotated[Path, typer.Option("--data", help="A data set folder (dataset.toml), or a fugu store.")],
    router: Annotated[Path, typer.Option("--router", help="The checkpoint to judge.")],
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            help="Judge only this part (default: all rows; the held-out part if it trained on this set).",
        ),
    ] = None,
    k: Annotated[int, typer.Option("--k", min=1, help="Neighbours of the kNN baseline.")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as one JSON object.")] = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write the reward–cost curves to a PNG.")
    ] = None,
    threads: Annotated[int | None, typer.Option("--threads", min=1)] = None,
    store: Annotated[bool, typer.Option("--store", help="--data is a fugu store.")] = False,
    train_data: Annotated[
        list[Path] | None,
        typer.Option(
            "--train-data", help="Fit the baselines on this (default: the checkpoint's training data)."
        ),
    ] = None,
    allow_train_rows: Annotated[
        bool, typer.Option("--allow-train-rows", help="Judge rows the checkpoint trained on too.")
    ] = False,
    skip_train_rows: Annotated[
        bool, typer.Option("--skip-train-rows", help="Leave out rows the checkpoint trained on.")
    ] = False,
    prices: Annotated[
        Path | None, typer.Option("--prices", help="Price list CSV for a data set without cost.")
    ] = None,
    lambdas: Annotated[
        str | None, typer.Option("--lambdas", help="Comma-separated λ values to sweep (reward per USD).")
    ] = None,
    verifier_accuracy: Annotated[
        float,
        typer.Option(
            "--verifier-accuracy",
            min=0.0,
            max=1.0,
            help="How often the check is right in the escalation policy's replay (0.9: one verdict in ten "
            "is wrong).",
        ),
    ] = 0.9,
    worlds: Annotated[
        int, typer.Option("--worlds", min=1, help="Replayed worlds (seeds) each escalation point averages.")
    ] = 5,
) -> None:
    """Judge a router on rows it never trained on: its reward–cost curve against the single models' hull,
    best single, random mix, kNN, logistic regression and the oracle; and its escalation policy (a check
    judges each attempt; a failed one escalates) replayed on the measured outcomes."""
    from fugu_cli.ui import admin

    try:
        grid = tuple(float(x) for x in (lambdas or "").split(",") if x.strip())
    except ValueError as e:
        raise typer.BadParameter(f"--lambdas {lambdas!r}: give numbers separated by commas") from e
    req = admin.EvalRequest(
        data,
        router,
        split,
        k,
        json_out,
        plot,
        threads,
        store,
        tuple(train_data or ()),
        allow_train_rows,
        skip_train_rows,
        prices,
        grid,
        verifier_accuracy,
        worlds,
    )
    raise typer.Exit(admin.router_eval(req))


def main(argv: list[str] | None = None) -> Any:
    """Entry point: `fugu TASK` and `fugu -p` go to `run`, known subcommands to the typer app."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:
        print(f"fugu {__version__}")
        return 0
    first = next((a for a in args if not a.startswith("-")), None)
    if first in SUBCOMMANDS or any(
        a.startswith("--install-completion") or a.startswith("--show-completion") for a in args
    ):
        return app(args=args, prog_name="fugu")
    from fugu_cli.compat import screen_argv
    from fugu_cli.errors import UsageError
    from fugu_cli.ui.argv import near_subcommand

    typo = near_subcommand(args, SUBCOMMANDS)
    if typo is not None:
        word, name = typo
        print(
            f"fugu: {word!r} is not a command; did you mean `{name}`? (to send it to the workers as a task: "
            f"fugu -p {word})",
            file=sys.stderr,
        )
        return 2
    try:
        args, notes = screen_argv(args)
    except UsageError as e:
        print(f"fugu: {e}", file=sys.stderr)
        return 2
    root = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False)
    root.command(
        help=(run.__doc__ or "")
        + "\n\nCommands: fugu pool | fugu sessions [show|export ID] | fugu router info|train|eval"
        " | fugu conductor train|eval | fugu eval SUITE | fugu serve | fugu acp | fugu mcp list | fugu demo"
        " | fugu doctor | fugu completion SHELL"
    )(run)
    return root(args=args, prog_name="fugu", obj=notes)
