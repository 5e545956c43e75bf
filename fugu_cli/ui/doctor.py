"""`fugu doctor`: what a newcomer needs on one screen. Versions, keys and local servers found, which workers
are usable and why not, which router a session here would use and why, where state and config live, and
which MCP servers, hooks and custom commands a session here gets.

Exit 0 when a session could run here, 2 otherwise. Reads package versions from metadata (imports no torch).
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from fugu_cli import __version__
from fugu_cli.errors import FuguError

if TYPE_CHECKING:
    from fugu_cli.config import Config
    from fugu_cli.types import Worker


def main(pool: str | None) -> int:
    from fugu_cli.config import fugu_home, is_trusted, load_config, trust_path, user_config_path
    from fugu_cli.logs import log_path
    from fugu_cli.options import RunOptions, find_repo_root, project_config_path
    from fugu_cli.pool import KNOWN_PROVIDERS, check_pool, discover_pool

    cwd = Path.cwd()
    ok = True
    print(f"fugu {__version__} · Python {platform.python_version()} ({sys.executable})")
    versions = " · ".join(f"{p} {_version(p)}" for p in ("torch", "transformers", "litellm"))
    print(f"  {versions}")
    home = fugu_home()
    print("\nwhere things are")
    print(f"  FUGU_HOME      {home}{'' if os.environ.get('FUGU_HOME') else ' (default)'}")
    store_ok, store_line = _store_state(home / "fugu.db")
    ok = ok and store_ok
    print(f"  store          {store_line}")
    print(f"  log            {log_path()}")
    user = user_config_path()
    print(f"  user config    {user}{'' if user.is_file() else ' (none)'}")
    project = project_config_path(cwd)
    if project.is_file():
        state = "trusted" if is_trusted(project.parent.parent) else "not trusted: obeyed only in part"
        print(f"  project config {project} ({state}; trusted folders: {trust_path()})")
    else:
        repo = find_repo_root(cwd.resolve())
        print(f"  project config none ({'repository ' + str(repo) if repo else 'not in a git repository'})")
    from fugu_cli.tools.sandbox import unavailable_reason

    no_sandbox = unavailable_reason()
    sandbox = "bubblewrap (commands run isolated)" if no_sandbox is None else f"! {no_sandbox}"
    print(f"  sandbox        {sandbox}")
    keys = [p.key_env for p in KNOWN_PROVIDERS if os.environ.get(p.key_env)]
    print("\nproviders")
    print(f"  keys set       {', '.join(keys) or 'none'}")
    print(f"  OLLAMA_HOST    {os.environ.get('OLLAMA_HOST') or 'not set (http://127.0.0.1:11434 is tried)'}")
    try:
        config = load_config(cwd, RunOptions(pool=pool).overrides())
        workers, source = discover_pool(config, cwd)
    except FuguError as e:
        print(f"\n! {e}")
        return 2
    ok = _extensions(config, cwd) and ok
    print(f"\nworkers (from {source})")
    checked = check_pool(workers)
    for a in checked:
        print(f"  {'ok' if a.ok else '--'} {a.worker.name}  {a.worker.model}  {a.reason}")
    usable = [a.worker for a in checked if a.ok]
    if not usable:
        from fugu_cli.pool import unusable_hint

        print(f"  ! no usable worker: {unusable_hint(source)}")
        ok = False
    if usable:
        print("\nrouter")
        ok = _router(config, usable) and ok
    print(f"\n{'ready: fugu can run here' if ok else 'not ready: fix the lines marked !'}")
    return 0 if ok else 2


def _extensions(config: Config, cwd: Path) -> bool:
    """The MCP servers, hooks and custom commands a session here gets (read from files; nothing starts)."""
    from fugu_cli import custom_commands
    from fugu_cli.app import repo_root
    from fugu_cli.extension_config import load_extensions

    root = repo_root(cwd)
    print("\nextensions")
    try:
        found = load_extensions(config, root)
    except FuguError as e:
        print(f"  ! {e}")
        return False
    servers = ", ".join(f"{s.name} ({s.source})" for s in found.servers)
    print(f"  MCP servers    {servers + ' (fugu mcp list starts them)' if servers else 'none'}")
    hooks: dict[str, int] = {}
    for hook in found.hooks:
        hooks[hook.event] = hooks.get(hook.event, 0) + 1
    print(f"  hooks          {', '.join(f'{e} ×{n}' for e, n in hooks.items()) or 'none'}")
    commands = ", ".join(f"/{c.name} ({c.scope})" for c in custom_commands.load(root).values())
    print(f"  commands       {commands or 'none'}")
    for notice in found.notices:
        print(f"  -- {notice}")
    return True


def _router(config: Config, pool: list[Worker]) -> bool:
    from fugu_cli.app import router_choice

    try:
        source, why = router_choice(config, pool)
    except FuguError as e:
        print(f"  ! {e}")
        return False
    print(f"  {source.name}: {why}")
    if source.checkpoint is None and pool:
        print("  a learned router for your own pool: `fugu eval SUITE` then `fugu router train --store`,")
        print("  or describe your workers well: a checkpoint scores workers it never saw from `description`")
    return True


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _store_state(path: Path) -> tuple[bool, str]:
    from fugu_cli.store import Store

    if not path.exists():
        return True, f"{path} (made on the first session)"
    try:
        Store(path).close()
    except FuguError as e:
        return False, f"! {e}"
    return True, str(path)
