"""fugu as an MCP client: servers from `.mcp.json` and `[mcp_servers]`, started lazily, their tools in the
registry as `mcp__<server>__<tool>`, their prompts as slash commands and their resources as `@server:uri`.

`client.py` is the only module that imports the `mcp` SDK, and only once a server is started.
"""

from fugu_cli.mcp.catalog import Catalog, PromptInfo, ToolInfo, prompt_arguments, qualified
from fugu_cli.mcp.manager import McpManager, McpUnavailable, ServerStatus
from fugu_cli.mcp.tools import McpTools

__all__ = [
    "Catalog",
    "McpManager",
    "McpTools",
    "McpUnavailable",
    "PromptInfo",
    "ServerStatus",
    "ToolInfo",
    "prompt_arguments",
    "qualified",
]
