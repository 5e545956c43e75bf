"""stream-json on both sides, as Claude Code speaks it to its SDKs: one JSON object a line on stdout (from any
thread, never interleaved), and with `--input-format stream-json` user messages and control requests as
JSON lines on stdin. Control requests are answered at once, from the reader thread, even while a turn runs.

Answered as Claude Code does: initialize, interrupt, set_permission_mode, set_model, mcp_status. Every other
request gets an error response naming it (fugu runs no SDK hook callbacks and no background tasks). The
run reads a leading `initialize` before it builds the session (ui/initialize.py); one that comes later may
only ask for what needs no session rebuilt. With `--permission-prompt-tool stdio`, fugu asks the client
(the SDK's can_use_tool) before an edit or a command.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fugu_cli import __version__
from fugu_cli.errors import UsageError
from fugu_cli.events import Event, ToolStarted, unwrap
from fugu_cli.tools import Answer, ApprovalRequest
from fugu_cli.types import Image, dumps
from fugu_cli.ui.initialize import InitializeAsks, read_initialize
from fugu_cli.ui.phrases import err


class LineWriter:
    """JSON lines on one stream, a whole line at a time."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.Lock()

    def write(self, data: Mapping[str, Any]) -> None:
        line = dumps(data) + "\n"
        with self._lock:
            self._out.write(line)
            self._out.flush()


@dataclass(frozen=True)
class UserTurn:
    """A user message from stdin: its text, and the uuid the client gave it (if any)."""

    text: str
    uuid: str | None = None
    images: tuple[Image, ...] = ()  # its image blocks (base64 sources)


class Controls:
    """What the control requests may do to the session (the run command supplies these)."""

    def __init__(
        self,
        *,
        models: Callable[[], list[dict[str, str]]],
        interrupt: Callable[[], None],
        set_permission_mode: Callable[[str], None],
        set_model: Callable[[str | None], None],
        mcp_status: Callable[[], list[dict[str, str]]] = list,
        commands: Callable[[], list[dict[str, str]]] = list,
        asks: InitializeAsks | None = None,
        folders: tuple[Path, ...] = (),
    ) -> None:
        self.models = models
        self.interrupt = interrupt
        self.set_permission_mode = set_permission_mode
        self.set_model = set_model
        self.mcp_status = mcp_status
        self.commands = commands
        self.asks = asks  # the initialize the run read before building the session, if any
        self.folders = folders
        self._initialized = False

    def answer(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The response to one control request; raises UsageError with the reason to refuse it."""
        subtype = request.get("subtype")
        if subtype == "initialize":
            return self._initialize(request)
        if subtype == "interrupt":
            self.interrupt()
            return {}
        if subtype == "set_permission_mode":
            self.set_permission_mode(str(request.get("mode")))
            return {}
        if subtype == "set_model":
            model = request.get("model")
            self.set_model(str(model) if model else None)
            return {}
        if subtype == "mcp_status":
            return {"mcpServers": self.mcp_status()}
        raise UsageError(f"fugu does not support the {subtype!r} control request")

    def _initialize(self, request: Mapping[str, Any]) -> dict[str, Any]:
        if self._initialized:
            raise UsageError("fugu takes one initialize request, first on stdin; this is a second one")
        self._initialized = True
        asks = self.asks
        if asks is None:  # it came after a user message: the session is built already
            asks = read_initialize(request, self.folders)
            if asks != InitializeAsks():
                raise UsageError(
                    "initialize came after the first user message: fugu sets a session's instructions, "
                    "MCP servers and tool rules before its first turn; send initialize first"
                )
        return asks.applied() | {
            "commands": self.commands(),
            "output_style": "default",
            "available_output_styles": ["default"],
            "models": self.models(),
            "fugu_version": __version__,
        }


class Asker:
    """The approver of `--permission-prompt-tool stdio`: a `can_use_tool` control request to the client for
    each edit or command the policy would ask about, answered through the inbox. Allowed as asked or refused;
    an answer that changes the tool's input is a refusal (fugu cannot run a call other than the model's)."""

    def __init__(self, out: LineWriter, interrupt: Callable[[], None]) -> None:
        self._out = out
        self._interrupt = interrupt
        self._here = threading.local()  # the call a turn thread is running (ToolStarted comes just before)
        self._lock = threading.Lock()
        self._waiting: dict[str, tuple[threading.Event, list[Mapping[str, Any]]]] = {}
        self._count = 0
        self._closed = False

    def see(self, event: Event) -> None:
        event = unwrap(event)
        if isinstance(event, ToolStarted):
            self._here.call = event.call

    def __call__(self, request: ApprovalRequest) -> Answer:
        call = getattr(self._here, "call", None)
        try:
            tool_input = json.loads(call.arguments) if call is not None else {}
        except ValueError:
            tool_input = {"_raw": call.arguments if call is not None else ""}
        done, box = threading.Event(), list[Mapping[str, Any]]()
        with self._lock:
            if self._closed:
                return "no"
            self._count += 1
            request_id = f"fugu_perm_{self._count}"
            self._waiting[request_id] = (done, box)
        ask = {
            "subtype": "can_use_tool",
            "tool_name": call.name if call is not None else request.tool,
            "input": tool_input,
            "tool_use_id": call.id if call is not None else "",
            "permission_suggestions": None,
            "blocked_path": None,
            "description": request.summary,
        }
        self._out.write({"type": "control_request", "request_id": request_id, "request": ask})
        done.wait()
        return self._verdict(box[0] if box else None, tool_input)

    def answered(self, response: Mapping[str, Any]) -> None:
        """A control_response from the client."""
        with self._lock:
            waiting = self._waiting.pop(str(response.get("request_id")), None)
        if waiting is not None:
            waiting[1].append(response)
            waiting[0].set()

    def close(self) -> None:
        """Nobody will answer any more (the input ended, or the turn was interrupted): refuse what waits."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = list(self._waiting.values()), {}
        for done, _ in waiting:
            done.set()

    def reopen(self) -> None:
        with self._lock:
            self._closed = False

    def _verdict(self, reply: Mapping[str, Any] | None, tool_input: Any) -> Answer:
        if reply is None or reply.get("subtype") != "success":
            return "no"
        decision = reply.get("response") or {}
        if decision.get("behavior") == "allow":
            changed = decision.get("updatedInput")
            if changed is not None and changed != tool_input:
                err(
                    "can_use_tool changed a tool call's input; fugu runs the model's own calls only, "
                    "so the call was refused"
                )
                return "no"
            return "yes"
        if decision.get("interrupt"):
            self._interrupt()
        return "no"


class Inbox:
    """Reads stdin on a daemon thread: user messages queue up as turns, control requests are answered,
    control responses go to the asker, and the end of input queues None."""

    def __init__(
        self, lines: Iterable[str], out: LineWriter, controls: Controls, asker: Asker | None = None
    ) -> None:
        self._lines = lines
        self._out = out
        self._controls = controls
        self._asker = asker
        self.turns: queue.Queue[UserTurn | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, name="fugu-stdin", daemon=True)

    def start(self) -> Inbox:
        self._thread.start()
        return self

    def next(self, timeout: float) -> UserTurn | bool | None:
        """The next turn, None at the end of input, or False when nothing came within `timeout`."""
        try:
            return self.turns.get(timeout=timeout)
        except queue.Empty:
            return False

    def _read(self) -> None:
        try:
            for number, line in enumerate(self._lines, 1):
                if line.strip():
                    self._take(number, line)
        finally:
            if self._asker is not None:
                self._asker.close()
            self.turns.put(None)

    def _take(self, number: int, line: str) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            err(f"stdin line {number} is not JSON (--input-format stream-json); ignored")
            return
        if not isinstance(message, dict):
            err(f"stdin line {number} is not a JSON object; ignored")
            return
        kind = message.get("type")
        if kind == "user":
            turn = user_turn(message)
            if turn is not None:
                self.turns.put(turn)
        elif kind == "control_request":
            self._control(message)
        elif kind == "control_response" and self._asker is not None:
            self._asker.answered(message.get("response") or {})
        elif kind not in ("keep_alive", "control_response", "control_cancel_request"):
            err(f"stdin line {number}: fugu ignores messages of type {kind!r}")

    def _control(self, message: Mapping[str, Any]) -> None:
        request_id = message.get("request_id")
        request = message.get("request") or {}
        try:
            answer = self._controls.answer(request)
        except UsageError as e:
            reply: dict[str, Any] = {"subtype": "error", "request_id": request_id, "error": str(e)}
        else:
            reply = {"subtype": "success", "request_id": request_id, "response": answer}
        self._out.write({"type": "control_response", "response": reply})


def user_turn(message: Mapping[str, Any]) -> UserTurn | None:
    """The text and pictures of a stream-json user message (a string, or text and base64 image blocks; other
    blocks are ignored, said on stderr)."""
    body = message.get("message") or {}
    content = body.get("content") if isinstance(body, dict) else None
    images: list[Image] = []
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        blocks = [b for b in content if isinstance(b, dict)]
        texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
        images = [i for b in blocks if b.get("type") == "image" and (i := _image(b)) is not None]
        if len(texts) + len(images) < len(content):
            err(
                "fugu reads the text and base64 image blocks of a user message only; other blocks are ignored"
            )
        text = "\n".join(t for t in texts if t)
    else:
        text = ""
    if not text.strip() and not images:
        err("a user message without text was ignored")
        return None
    uuid = message.get("uuid")
    return UserTurn(text, uuid if isinstance(uuid, str) else None, tuple(images))


def _image(block: Mapping[str, Any]) -> Image | None:
    """A base64 image block as an Image (None, said on stderr, when it is not a picture fugu can send)."""
    import base64
    import binascii

    from fugu_cli.tools.images import NotAnImage, image_of

    source = block.get("source") or {}
    if not isinstance(source, dict) or source.get("type") != "base64":
        return None
    try:
        return image_of(base64.b64decode(str(source.get("data", "")), validate=True), "image block")
    except (binascii.Error, NotAnImage) as e:
        err(f"an image block was ignored: {e}")
        return None


def stdin_lines() -> Iterable[str]:
    """stdin, line by line as it arrives (a client waits for answers between its lines); bytes that are not
    UTF-8 become U+FFFD rather than ending the conversation."""
    return (line.decode("utf-8", "replace") for line in iter(sys.stdin.buffer.readline, b""))
