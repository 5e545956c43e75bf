"""Responses items and tools as chat completions carries them, both ways: a request's input items become chat
messages, its tools chat functions (a namespace's tools flattened to `namespace__name`, a custom freeform tool
to a function of one string, `local_shell` to a function), and the worker's tool calls go back as the item
the client's tool expects (`function_call` with its `namespace`, `custom_tool_call`, `local_shell_call`).

What cannot travel (hosted tools, items no chat model can read) is left out and named in `dropped`.
Pure data mapping.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fugu_cli.serve.wire import bad_param

NS_SEP = "__"
SHELL = "local_shell"
_SHELL_PARAMS = {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}, "description": "argv of the command"},
        "working_directory": {"type": "string"},
        "timeout_ms": {"type": "integer"},
    },
    "required": ["command"],
}
# Hosted tools run by OpenAI's servers; no worker behind fugu runs them.
_HOSTED = (
    "file_search",
    "computer",
    "computer_use_preview",
    "code_interpreter",
    "image_generation",
    "mcp",
    "programmatic_tool_calling",
    "shell",
    "apply_patch",
    "tool_search",
)


@dataclass(frozen=True)
class Tools:
    """The client's tools as chat functions, and what it takes to turn a chat tool call back into the item
    the client expects."""

    functions: tuple[dict[str, Any], ...] = ()
    namespaced: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # chat name -> (namespace, name)
    custom: frozenset[str] = frozenset()
    shell: bool = False
    web_search: dict[str, Any] | None = None  # web_search_options, for workers with a native search
    dropped: tuple[str, ...] = ()

    def item(self, item_id: str, call_id: str, name: str, arguments: str) -> dict[str, Any]:
        """The output item of one of the worker's tool calls."""
        if self.shell and name == SHELL:
            return shell_item(item_id, call_id, arguments)
        space, own = self.namespaced.get(name, (None, name))
        if name in self.custom:
            item = custom_item(item_id, call_id, own, _input_of(arguments))
        else:
            item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": own}
            item |= {"arguments": arguments, "status": "completed"}
        return item | ({"namespace": space} if space else {})

    def streams_arguments(self, name: str) -> bool:
        """Whether a call's arguments can be streamed as they come (a plain function's can)."""
        return name not in self.custom and not (self.shell and name == SHELL)


def custom_item(item_id: str, call_id: str, name: str, text: str) -> dict[str, Any]:
    item = {"type": "custom_tool_call", "id": item_id, "call_id": call_id, "name": name, "input": text}
    return item | {"status": "completed"}


def shell_item(item_id: str, call_id: str, arguments: str) -> dict[str, Any]:
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        args = {}
    args = args if isinstance(args, dict) else {}
    action = {"type": "exec", "command": list(args.get("command") or []), "env": {}}
    for key in ("working_directory", "timeout_ms"):
        if args.get(key) is not None:
            action[key] = args[key]
    return {
        "type": "local_shell_call",
        "id": item_id,
        "call_id": call_id,
        "action": action,
        "status": "completed",
    }


def _input_of(arguments: str) -> str:
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    return str(args.get("input", "")) if isinstance(args, dict) else arguments


def tools(raw: Any) -> Tools:
    """The request's `tools` mapped onto chat functions."""
    if raw is None:
        return Tools()
    if not isinstance(raw, list):
        raise bad_param("tools", "'tools' must be a list of tool objects")
    functions: list[dict[str, Any]] = []
    namespaced: dict[str, tuple[str, str]] = {}
    custom: set[str] = set()
    shell, search, dropped = False, None, []
    for i, tool in enumerate(raw):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            functions.append(_function(tool, f"tools[{i}]"))
        elif kind == "custom":
            functions.append(_custom(tool, f"tools[{i}]"))
            custom.add(tool["name"])
        elif kind == "namespace":
            for inner in tool.get("tools") or ():
                mapped = _namespaced(tool, inner, f"tools[{i}]")
                functions.append(mapped)
                name = mapped["function"]["name"]
                namespaced[name] = (str(tool.get("name")), str(inner.get("name")))
                if isinstance(inner, dict) and inner.get("type") == "custom":
                    custom.add(name)
        elif kind == SHELL:
            shell = True
            spec = {
                "name": SHELL,
                "description": "Run a command on the user's machine.",
                "parameters": _SHELL_PARAMS,
            }
            functions.append({"type": "function", "function": spec})
        elif (
            isinstance(kind, str)
            and kind.startswith("web_search")
            and tool.get("external_web_access") is False
        ):
            dropped.append(f"tools[{kind}]: a search of cached pages only, which no worker has")
        elif isinstance(kind, str) and kind.startswith("web_search"):
            search = {"search_context_size": tool.get("search_context_size") or "medium"}
            if tool.get("user_location"):
                search["user_location"] = {"type": "approximate", "approximate": tool["user_location"]}
        elif isinstance(kind, str):
            why = "a hosted tool no worker runs" if kind in _HOSTED else "a tool type fugu does not know"
            dropped.append(f"tools[{kind}]: {why}")
        else:
            raise bad_param(f"tools[{i}]", f"tools[{i}] must be an object with a 'type'")
    return Tools(tuple(functions), namespaced, frozenset(custom), shell, search, tuple(dropped))


def _function(tool: Mapping[str, Any], where: str, name: str | None = None) -> dict[str, Any]:
    if not tool.get("name"):
        raise bad_param(where, f"{where}: a function tool needs a 'name'")
    fn = {k: tool[k] for k in ("description", "parameters", "strict") if tool.get(k) is not None}
    return {"type": "function", "function": {"name": name or tool["name"], **fn}}


def _custom(tool: Mapping[str, Any], where: str, name: str | None = None) -> dict[str, Any]:
    if not tool.get("name"):
        raise bad_param(where, f"{where}: a custom tool needs a 'name'")
    about = str(tool.get("description") or "")
    fmt = tool.get("format") or {}
    if isinstance(fmt, dict) and fmt.get("type") == "grammar" and fmt.get("definition"):
        about += f"\n\nThe input must follow this {fmt.get('syntax', '')} grammar:\n{fmt['definition']}"
    params = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
    spec = {"name": name or tool["name"], "description": about.strip(), "parameters": params}
    return {"type": "function", "function": spec}


def _namespaced(space: Mapping[str, Any], inner: Any, where: str) -> dict[str, Any]:
    if not isinstance(inner, dict) or not space.get("name") or not inner.get("name"):
        raise bad_param(where, f"{where}: a namespace needs a 'name' and named tools")
    name = f"{space['name']}{NS_SEP}{inner['name']}"
    if inner.get("type") == "custom":
        return _custom(inner, where, name)
    return _function(inner, where, name)


def tool_choice(raw: Any, mapped: Tools) -> tuple[Any, list[str]]:
    """The chat `tool_choice` for the request's, and what could not be kept."""
    if raw is None or isinstance(raw, str):
        return raw, []
    if not isinstance(raw, dict):
        raise bad_param("tool_choice", "'tool_choice' must be a string or an object")
    kind = raw.get("type")
    if kind in ("function", "custom") and raw.get("name"):
        name = f"{raw['namespace']}{NS_SEP}{raw['name']}" if raw.get("namespace") else str(raw["name"])
        return {"type": "function", "function": {"name": name}}, []
    if kind == "allowed_tools":
        return raw.get("mode") or "auto", []  # the list itself is applied to the tools (`allowed`)
    return "auto", [f"tool_choice[{kind}]: that tool is not offered to the worker"]


def allowed(raw: Any, functions: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The functions an `allowed_tools` tool choice keeps."""
    if not isinstance(raw, dict) or raw.get("type") != "allowed_tools":
        return tuple(functions)
    names = set()
    for t in raw.get("tools") or ():
        if isinstance(t, dict) and t.get("name"):
            names.add(f"{t['namespace']}{NS_SEP}{t['name']}" if t.get("namespace") else str(t["name"]))
    return tuple(f for f in functions if f["function"]["name"] in names)


# --- input items -------------------------------------------------------------------------------------------


@dataclass
class Messages:
    """Chat messages built from input items, with the items that had to be left out."""

    out: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def call(self, call_id: Any, name: str, arguments: str) -> None:
        call = {
            "id": str(call_id or ""),
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        if self.out and self.out[-1]["role"] == "assistant":  # text and calls of one reply: one message
            self.out[-1].setdefault("tool_calls", []).append(call)
        else:
            self.out.append({"role": "assistant", "content": None, "tool_calls": [call]})

    def result(self, call_id: Any, output: Any) -> None:
        self.out.append({"role": "tool", "tool_call_id": str(call_id or ""), "content": _output_text(output)})


def messages(raw: Any) -> Messages:
    """Input items (or the input string) as chat messages."""
    if isinstance(raw, str):
        return Messages([{"role": "user", "content": raw}])
    if not isinstance(raw, list):
        raise bad_param("input", "'input' must be a string or a list of input items")
    built = Messages()
    for item in raw:
        if not isinstance(item, dict):
            raise bad_param("input", "each input item must be an object")
        _item(item, built)
    return built


def _item(item: Mapping[str, Any], built: Messages) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role", "user")
        if role not in ("user", "assistant", "system", "developer"):
            raise bad_param(
                "input", f"a message's role must be user, assistant, system or developer, not {role!r}"
            )
        built.out.append({"role": role, "content": _content(item.get("content"), built)})
    elif kind == "function_call":
        name = str(item.get("name") or "")
        name = f"{item['namespace']}{NS_SEP}{name}" if item.get("namespace") else name
        built.call(item.get("call_id"), name, _arguments(item.get("arguments")))
    elif kind == "custom_tool_call":
        built.call(
            item.get("call_id"), str(item.get("name") or ""), json.dumps({"input": item.get("input", "")})
        )
    elif kind == "local_shell_call":
        action = item.get("action") or {}
        args = {
            k: action[k] for k in ("command", "working_directory", "timeout_ms") if action.get(k) is not None
        }
        built.call(item.get("call_id") or item.get("id"), SHELL, json.dumps(args))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        built.result(item.get("call_id"), item.get("output"))
    elif kind == "local_shell_call_output":
        built.result(item.get("call_id") or item.get("id"), item.get("output"))
    elif kind == "item_reference":
        raise bad_param(
            "input",
            "fugu does not resolve item references: send the item itself, or continue with "
            "previous_response_id",
            "unsupported_value",
        )
    else:
        built.dropped.append(f"input items of type {kind}: no chat model reads them")


def _content(raw: Any, built: Messages) -> Any:
    if isinstance(raw, str) or raw is None:
        return raw or ""
    if not isinstance(raw, list):
        raise bad_param("input", "a message's content must be a string or a list of content parts")
    parts: list[dict[str, Any]] = []
    for part in raw:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal") or "")})
        elif kind == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            built.dropped.append(f"content parts of type {kind}: no chat model reads them")
    return parts


def _arguments(raw: Any) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {})


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        texts = [str(p.get("text", "")) for p in output if isinstance(p, dict) and "text" in p]
        if len(texts) == len(output):
            return "\n".join(texts)
    return json.dumps(output)


def as_items(raw: Any) -> list[dict[str, Any]]:
    """The request's input as a list of items (a string: one user message), as a stored response keeps it."""
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": raw}]}]
    return [dict(i) for i in raw or () if isinstance(i, dict)]
