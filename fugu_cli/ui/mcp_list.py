"""`fugu mcp list`: every MCP server a session here would get, where it comes from, whether it starts, and
its tools and prompts. Starts each server once (then stops it), so the listing is live, not remembered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fugu_cli.errors import FuguError
from fugu_cli.ui.phrases import err


def main(cwd: Path, json_out: bool, trust_project: bool = False) -> int:
    from fugu_cli.app import repo_root
    from fugu_cli.config import fugu_home, load_config
    from fugu_cli.extension_config import load_extensions, untrusted_extensions
    from fugu_cli.tools.sandbox import policy_from_config

    try:
        config = load_config(cwd, trust_project=trust_project)
        root = repo_root(cwd)
        extensions = load_extensions(config, root)
    except FuguError as e:
        err(str(e))
        return e.exit_code
    for notice in extensions.notices:
        err(notice)
    if not extensions.servers:
        if json_out:
            print(json.dumps({"servers": []}))
        elif not trust_project and any(w.startswith(".mcp.json") for w in untrusted_extensions(root)):
            print("no MCP server will start here: this folder is not trusted (see --trust-project)")
        else:
            print("no MCP server is configured here (.mcp.json, or [mcp_servers.NAME] in config)")
        return 0
    from fugu_cli.mcp import McpManager

    manager = McpManager(extensions.servers, root, policy_from_config(config.sandbox), fugu_home())
    try:
        statuses = manager.probe()
    finally:
        manager.close()
    rows = [_row(s) for s in statuses]
    if json_out:
        print(json.dumps({"servers": rows}, indent=2))
    else:
        _print(rows)
    return 1 if any(r["status"] == "failed" for r in rows) else 0


def _row(s: Any) -> dict[str, Any]:
    catalog = s.catalog
    return {
        "name": s.name,
        "transport": s.spec.transport,
        "source": s.spec.source,
        "where": s.spec.where,
        "status": "failed" if s.state == "failed" else "ok",
        "error": s.error,
        "tools": [t.name for t in catalog.tools] if catalog else [],
        "read_only_tools": [t.name for t in catalog.tools if t.read_only] if catalog else [],
        "prompts": [p.name for p in catalog.prompts] if catalog else [],
        "resources": len(catalog.resources) if catalog else 0,
    }


def _print(rows: list[dict[str, Any]]) -> None:
    table = [("", "server", "transport", "source", "tools")]
    for r in rows:
        mark = "ok" if r["status"] == "ok" else "--"
        table.append((mark, r["name"], r["transport"], r["source"], str(len(r["tools"]))))
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    for n, row in enumerate(table):
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            continue
        r = rows[n - 1]
        detail = [f"    {r['where']}"]
        if r["error"]:
            detail.append(f"    failed: {r['error']}")
        if r["tools"]:
            marked = [t + (" (read-only)" if t in r["read_only_tools"] else "") for t in r["tools"]]
            detail.append("    tools: " + ", ".join(marked))
        if r["prompts"]:
            detail.append("    prompts: " + ", ".join(f"/mcp__{r['name']}__{p}" for p in r["prompts"]))
        if r["resources"]:
            detail.append(f"    resources: {r['resources']} (attach one with @{r['name']}:URI)")
        print("\n".join(detail))
