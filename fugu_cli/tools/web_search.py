"""web_search, through the provider `[web] search` names: Brave's search API (a key in BRAVE_API_KEY, or the
variable `search_key_env` names), or an MCP server's search tool (`mcp__server__tool`, called with
`{"query": ...}`). Without a provider the tool is absent, and a call to it says how to enable it
(NOT_ENABLED). Results are marked as untrusted web content, like web_fetch's pages. Never prints.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from fugu_cli import __version__
from fugu_cli.tools.base import Invocation, ToolFailed
from fugu_cli.tools.registry import Param, Tool
from fugu_cli.tools.web import NOT_ENABLED as NOT_ENABLED
from fugu_cli.tools.web import host_allowed
from fugu_cli.tools.webpage import UNTRUSTED

BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"
DESCRIPTION = (
    "Search the web; returns titles, URLs and snippets (untrusted web content). web_fetch reads a result."
)


def search_tool(provider: str, lookup: Callable[[str], Tool]) -> Tool:
    """The web_search tool for `provider`; `lookup` finds an MCP tool by name when it is one."""
    params = (
        Param("query", str, True, "What to search for."),
        Param("count", int, False, "How many results (default 8, at most 20)."),
    )
    if provider.startswith("mcp__"):

        def through_mcp(inv: Invocation, query: str, count: int | None = None) -> str:
            try:
                tool = lookup(provider)
            except KeyError:
                why = f"web_search's provider {provider} is not available (is its server running?)"
                raise ToolFailed(why) from None
            return _marked(query, tool.func(inv, query=query))

        return Tool("web_search", "web", through_mcp, DESCRIPTION, params)
    if provider != "brave":
        raise ValueError(f'[web] search = {provider!r}: give "brave" or an MCP tool, mcp__SERVER__TOOL')
    return Tool("web_search", "web", brave_search, DESCRIPTION, params)


def brave_search(inv: Invocation, query: str, count: int | None = None) -> str:
    """Search with Brave's web search API."""
    web = inv.ctx.web
    env = web.search_key_env or "BRAVE_API_KEY"
    key = os.environ.get(env)
    if not key:
        raise ToolFailed(f"web_search needs a Brave Search API key in {env}; it is not set.")
    url = web.search_url or BRAVE_URL
    host_allowed(inv, url)
    import httpx

    headers = {"X-Subscription-Token": key, "Accept": "application/json", "User-Agent": f"fugu/{__version__}"}
    params: dict[str, Any] = {"q": query, "count": max(1, min(count or 8, 20))}
    response = httpx.get(url, params=params, headers=headers, timeout=web.timeout_s)
    if response.status_code >= 400:
        raise ToolFailed(f"the search provider answered {response.status_code}: {response.text[:300]}")
    results = (response.json().get("web") or {}).get("results") or []
    lines = [
        f"{i}. {r.get('title', '')}\n   {r.get('url', '')}\n   {r.get('description', '')}"
        for i, r in enumerate(results, 1)
    ]
    return _marked(query, "\n".join(lines) or "(no results)")


def _marked(query: str, text: str) -> str:
    body = text.replace("</web-search", "<\\/web-search")
    return f'<web-search query="{query.replace(chr(34), chr(39))}">\n{UNTRUSTED}\n\n{body}\n</web-search>'
