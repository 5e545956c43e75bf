"""What an MCP server offers (tools, prompts, resources) as plain values, and the copy of it kept in
FUGU_HOME so a later session can show a server's tools without starting it.

Imports nothing from the `mcp` SDK (client.py turns the SDK's types into these).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64  # providers refuse longer function names


@dataclass(frozen=True)
class ToolInfo:
    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    read_only: bool = False  # the server annotates it readOnlyHint


@dataclass(frozen=True)
class PromptArg:
    name: str
    description: str = ""
    required: bool = False


@dataclass(frozen=True)
class PromptInfo:
    name: str
    description: str = ""
    arguments: tuple[PromptArg, ...] = ()


@dataclass(frozen=True)
class ResourceInfo:
    uri: str
    name: str = ""
    mime_type: str = ""


@dataclass(frozen=True)
class Catalog:
    tools: tuple[ToolInfo, ...] = ()
    prompts: tuple[PromptInfo, ...] = ()
    resources: tuple[ResourceInfo, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Catalog:
        return cls(
            tools=tuple(ToolInfo(**t) for t in data.get("tools", ())),
            prompts=tuple(
                PromptInfo(p["name"], p.get("description", ""), tuple(PromptArg(**a) for a in p["arguments"]))
                for p in data.get("prompts", ())
            ),
            resources=tuple(ResourceInfo(**r) for r in data.get("resources", ())),
        )


def qualified(server: str, tool: str) -> str:
    """`mcp__<server>__<tool>`, as Claude Code names MCP tools; characters providers refuse become `_`, and
    a name past 64 characters is cut and given a digest so it stays unique."""
    name = _TOOL_NAME.sub("_", f"mcp__{server}__{tool}")
    if len(name) <= MAX_NAME:
        return name
    import hashlib

    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def object_schema(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """A tool's input schema as function calling wants it: an object with properties."""
    out = dict(schema or {})
    out["type"] = "object"
    out.setdefault("properties", {})
    return out


def cache_path(home: Path, server: str, fingerprint: str) -> Path:
    return home / "mcp" / f"{server}-{fingerprint}.json"


def load_cached(path: Path) -> Catalog | None:
    try:
        return Catalog.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def save_cached(path: Path, catalog: Catalog) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(catalog.to_json()), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a cache: the next session lists the server's tools again


def prompt_arguments(prompt: PromptInfo, words: Sequence[str]) -> dict[str, str]:
    """Positional words of `/mcp__server__prompt a b c` for the prompt's arguments, in order; the last
    argument takes the rest."""
    names = [a.name for a in prompt.arguments]
    if not names:
        return {}
    out = {n: w for n, w in zip(names, words, strict=False)}
    if len(words) > len(names):
        out[names[-1]] = " ".join(words[len(names) - 1 :])
    return out
