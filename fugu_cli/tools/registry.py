"""The tool registry: JSON schemas from typed functions + docstrings, argument checks, and `run`.

Besides fugu's own tools a registry may hold sources of tools known only at run time (an MCP server's, with
the server's own JSON schema); they are asked for their tools each time the registry is read, so a server
that starts late or dies is seen at the next step. `ToolRegistry.run` never raises on a model's mistake or
a tool's failure: everything becomes a ToolResult the model can read and act on, redacted and bounded.
"""

from __future__ import annotations

import inspect
import json
import re
import time
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fugu_cli.errors import FuguError
from fugu_cli.redact import redact
from fugu_cli.tools import ToolContext, ToolKind
from fugu_cli.tools.base import Invocation, PermissionDenied, elapsed_ms
from fugu_cli.tools.output import bound, default_output_dir
from fugu_cli.tools.textio import shown
from fugu_cli.types import ToolCall, ToolResult

ToolFunction = Callable[..., str]
_JSON_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class Param:
    name: str
    py_type: type
    required: bool
    description: str


@dataclass(frozen=True)
class Tool:
    """One callable tool: `func(inv, **arguments) -> str`, its kind and what the model is told about it."""

    name: str
    kind: ToolKind
    func: ToolFunction
    description: str
    params: tuple[Param, ...]
    input_schema: Mapping[str, Any] | None = None  # given as is (an MCP tool's); else built from `params`

    @classmethod
    def from_function(cls, func: ToolFunction, kind: ToolKind, name: str | None = None) -> Tool:
        """Build a tool from `func(inv, ...)`: the parameters after the Invocation must be JSON-typed."""
        hints = typing.get_type_hints(func)
        description, arg_docs = _parse_docstring(inspect.getdoc(func) or "")
        params: list[Param] = []
        for p in list(inspect.signature(func).parameters.values())[1:]:
            py_type, optional = _unwrap_optional(hints[p.name])
            if py_type not in _JSON_TYPES:
                raise TypeError(f"{func.__name__}.{p.name}: unsupported type {py_type!r}")
            required = p.default is inspect.Parameter.empty and not optional
            params.append(Param(p.name, py_type, required, arg_docs.get(p.name, "")))
        return cls(name or func.__name__, kind, func, description, tuple(params))

    def schema(self) -> dict[str, Any]:
        if self.input_schema is not None:
            function = {"name": self.name, "description": self.description, "parameters": self.input_schema}
            return {"type": "function", "function": function}
        properties = {
            p.name: {
                "type": _JSON_TYPES[p.py_type],
                **({"description": p.description} if p.description else {}),
            }
            for p in self.params
        }
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": [p.name for p in self.params if p.required],
                    "additionalProperties": False,
                },
            },
        }


class ToolSource(Protocol):
    """Tools known only at run time (an MCP server's); asked each time the registry is read."""

    def tools(self) -> Sequence[Tool]: ...


DYNAMIC_PREFIX = "mcp__"  # names a source may add; a static name always wins


class ToolRegistry:
    """The tools one agent may call, in a fixed order: fugu's own, then those of its sources."""

    def __init__(
        self,
        tools: Iterable[Tool],
        sources: Sequence[ToolSource] = (),
        keep: Callable[[str], bool] | None = None,
    ) -> None:
        self._tools = {t.name: t for t in tools}
        self._sources = tuple(sources)
        self._keep = keep

    def with_source(self, source: ToolSource) -> ToolRegistry:
        return ToolRegistry(self._tools.values(), (*self._sources, source), self._keep)

    def adding(self, tool: Tool) -> ToolRegistry:
        """This registry with one more of fugu's own tools (web_search, when a provider is configured)."""
        return ToolRegistry((*self._tools.values(), tool), self._sources, self._keep)

    def _all(self) -> dict[str, Tool]:
        if not self._sources:
            return self._tools
        out = dict(self._tools)
        for source in self._sources:
            for tool in source.tools():
                if tool.name not in out and (self._keep is None or self._keep(tool.name)):
                    out[tool.name] = tool
        return out

    @classmethod
    def default(cls) -> ToolRegistry:
        from fugu_cli.tools import background, files, git, plan, search, shell, task, todo, web

        specs: list[tuple[ToolFunction, ToolKind]] = [
            (files.read_file, "read"),
            (search.glob, "read"),
            (search.grep, "read"),
            (files.edit_file, "edit"),
            (files.write_file, "edit"),
            (shell.shell, "exec"),
            (background.shell_output, "read"),
            (background.shell_kill, "read"),  # only commands this session's workers started
            (git.git_status, "read"),
            (git.git_diff, "read"),
            (git.git_log, "read"),
            (git.git_commit, "exec"),
            (task.task, "read"),  # the subagent's own calls are what permissions judge
            (plan.exit_plan_mode, "read"),
            (web.web_fetch, "web"),
        ]
        todos = Tool(todo.NAME, "read", todo.todo_write, todo.DESCRIPTION, (), todo.SCHEMA)
        return cls([*(Tool.from_function(func, kind) for func, kind in specs), todos])

    def replacing(self, tool: Tool) -> ToolRegistry:
        """This registry with `tool` in place of the one of the same name (e.g. `task` listing the agents)."""
        if tool.name not in self._tools:
            return self
        tools = [tool if t.name == tool.name else t for t in self._tools.values()]
        return ToolRegistry(tools, self._sources, self._keep)

    def subset(self, names: Sequence[str]) -> ToolRegistry:
        """A registry with only `names` (e.g. the read tools for a planning agent). A source's tool
        (`mcp__...`) is kept when named; it is not checked, as its server may not have started yet."""
        unknown = [n for n in names if n not in self._tools and not n.startswith(DYNAMIC_PREFIX)]
        if unknown:
            raise ValueError(f"unknown tools {unknown}; known: {', '.join(self._tools)}")
        wanted = set(names)
        before = self._keep
        keep = (lambda n: n in wanted) if before is None else (lambda n: n in wanted and before(n))
        return ToolRegistry((self._tools[n] for n in names if n in self._tools), self._sources, keep)

    def filtered(self, keep: Callable[[str], bool]) -> ToolRegistry:
        """The tools whose names `keep` accepts (sources' tools are filtered as they appear)."""
        before = self._keep
        both = keep if before is None else (lambda n: before(n) and keep(n))
        return ToolRegistry((t for n, t in self._tools.items() if keep(n)), self._sources, both)

    def names(self) -> list[str]:
        return list(self._all())

    def kind(self, name: str) -> ToolKind:
        return self._all()[name].kind

    def get(self, name: str) -> Tool:
        return self._all()[name]

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self._all().values()]

    def run(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        """Run one tool call. Never raises (except KeyboardInterrupt): failures become error results."""
        start = time.perf_counter()
        tools = self._all()
        tool = tools.get(call.name)
        if tool is None:
            known = ", ".join(tools)
            if call.name == "web_search":
                from fugu_cli.tools.web import NOT_ENABLED

                return _error(call, start, f"{NOT_ENABLED} Available tools: {known}.")
            return _error(call, start, f"Unknown tool {call.name!r}. Available tools: {known}.")
        inv = Invocation(ctx=ctx, tool=tool.name, kind=tool.kind)
        try:
            kwargs = _check_arguments(tool, call.arguments)
            content = tool.func(inv, **kwargs)
        except PermissionDenied as exc:
            return _error(call, start, str(exc), inv, denied=True)
        except FuguError as exc:
            return _error(call, start, f"Error: {exc}", inv)
        except Exception as exc:
            return _error(call, start, f"Error: {call.name} failed: {type(exc).__name__}: {exc}", inv)
        finally:
            inv.after_write()
        return ToolResult(
            call_id=call.id,
            name=call.name,
            content=_bounded(content, ctx, call.name),
            exit_code=inv.exit_code,
            duration_ms=elapsed_ms(start),
            files_touched=tuple(inv.files_touched),
            spent=inv.spent,
            images=tuple(inv.images),
        )


def _error(
    call: ToolCall, start: float, message: str, inv: Invocation | None = None, denied: bool = False
) -> ToolResult:
    return ToolResult(
        call_id=call.id,
        name=call.name,
        content=_bounded(message, inv.ctx if inv else None, call.name),
        is_error=True,
        exit_code=inv.exit_code if inv else None,
        duration_ms=elapsed_ms(start),
        files_touched=tuple(inv.files_touched) if inv else (),
        denied=denied,
        spent=inv.spent if inv else (),
    )


def _bounded(content: str, ctx: ToolContext | None, tool: str) -> str:
    """What the model sees: secrets redacted, then bounded to the budget (the full text kept in a file)."""
    content = shown(redact(content))  # undecodable bytes as \xNN: a result is always valid UTF-8
    if ctx is None:
        return bound(content, 32_000, None)
    return bound(content, ctx.output_cap, ctx.output_dir or default_output_dir(), tool)


class _BadArguments(FuguError):
    pass


def _check_arguments(tool: Tool, raw: str) -> dict[str, Any]:
    if tool.input_schema is not None:
        return _check_object(tool, raw, tool.input_schema)
    usage = f"{tool.name}({', '.join(p.name + ('' if p.required else '?') for p in tool.params)})"
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise _BadArguments(
            f"arguments for {tool.name} are not valid JSON ({exc}). Expected {usage}."
        ) from exc
    if not isinstance(args, dict):
        raise _BadArguments(f"arguments for {tool.name} must be a JSON object, e.g. {usage}.")
    params = {p.name: p for p in tool.params}
    extra = sorted(set(args) - set(params))
    if extra:
        raise _BadArguments(f"{tool.name} got unknown argument(s) {', '.join(extra)}. Expected {usage}.")
    missing = [p.name for p in tool.params if p.required and args.get(p.name) is None]
    if missing:
        raise _BadArguments(
            f"{tool.name} is missing required argument(s) {', '.join(missing)}. Expected {usage}."
        )
    return {name: _coerce(params[name], value) for name, value in args.items() if value is not None}


def _check_object(tool: Tool, raw: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for a tool with its own JSON schema: an object holding every required property (the tool
    itself checks the rest)."""
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise _BadArguments(f"arguments for {tool.name} are not valid JSON ({exc}).") from exc
    if not isinstance(args, dict):
        raise _BadArguments(f"arguments for {tool.name} must be a JSON object.")
    required = schema.get("required")
    missing = [n for n in required if n not in args] if isinstance(required, list) else []
    if missing:
        raise _BadArguments(f"{tool.name} is missing required argument(s) {', '.join(map(str, missing))}.")
    return args


def _coerce(param: Param, value: Any) -> Any:
    t = param.py_type
    if t is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if t is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, t) and not (t is int and isinstance(value, bool)):
        return value
    raise _BadArguments(
        f"argument {param.name} must be a JSON {_JSON_TYPES[t]}, got {type(value).__name__} {value!r:.80}."
    )


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into the description and the `Args:` entries."""
    head, _, args_block = doc.partition("\nArgs:\n")
    arg_docs: dict[str, str] = {}
    current: str | None = None
    indent: int | None = None
    for line in args_block.splitlines():
        match = re.match(r"(\s+)(\w+):\s*(.*)", line)
        if match and indent in (None, len(match.group(1))):
            indent = len(match.group(1))
            current = match.group(2)
            arg_docs[current] = match.group(3).strip()
        elif current and line.strip():
            arg_docs[current] += " " + line.strip()
    return head.strip(), arg_docs
