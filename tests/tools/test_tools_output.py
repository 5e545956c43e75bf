"""Bounded tool output: a 5 MB result reaches the model as head, tail and a note; the rest kept, redacted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from fugu_cli.tools import ToolContext
from fugu_cli.tools.base import Invocation
from fugu_cli.tools.registry import Tool, ToolRegistry
from fugu_cli.types import ToolCall, ToolResult

Call = Callable[..., ToolResult]
KEY = "sk-proj-" + "Q" * 40


def kept_file(content: str) -> Path:
    return Path(content.split("The full output is in ")[1].split(": read the rest")[0])


def test_a_5mb_command_output_reaches_the_model_bounded(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext], tmp_path: Path
) -> None:
    ctx = make_ctx(output_dir=tmp_path / "out")  # the default budget: 8k tokens, 32k characters
    (repo / "line.txt").write_text("x" * 99 + "\n")
    result = call("shell", ctx=ctx, command='yes "$(cat line.txt)" | head -n 50000; echo last')
    assert len(result.content) <= ctx.output_cap
    assert result.content.startswith("x" * 99) and result.content.endswith("last\n[exit code: 0]")
    assert "characters cut (lines " in result.content
    kept = kept_file(result.content)
    assert kept.stat().st_size == 50000 * 100 + 5


def test_a_big_result_of_any_tool_is_cut_and_kept(
    repo: Path, make_ctx: Callable[..., ToolContext], tmp_path: Path
) -> None:
    def dump(inv: Invocation) -> str:
        """Return a lot of text."""
        return "".join(f"row {i} {KEY if i == 7 else ''}\n" for i in range(200_000))

    registry = ToolRegistry([Tool.from_function(dump, "read")])
    ctx = make_ctx(output_dir=tmp_path / "out", output_cap=4000)
    result = registry.run(ToolCall("c", "dump", "{}"), ctx)
    assert len(result.content) <= 4000 and not result.is_error
    assert result.content.startswith("row 0 \nrow 1")
    assert "row 199999" in result.content
    kept = kept_file(result.content)
    assert KEY not in kept.read_text() and "row 7 [REDACTED]" in kept.read_text()
    assert KEY not in result.content


def test_the_kept_output_of_a_command_is_redacted(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext], tmp_path: Path
) -> None:
    (repo / "leak.txt").write_text(f"token={KEY}\n")
    ctx = make_ctx(output_dir=tmp_path / "out", output_cap=2000)
    result = call("shell", ctx=ctx, command='yes "$(cat leak.txt)" | head -n 3000')
    assert KEY not in result.content and "token=[REDACTED]" in result.content
    text = kept_file(result.content).read_text()
    assert KEY not in text and text.count("token=[REDACTED]") == 3000


def test_read_file_pages_through_a_kept_output(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext], tmp_path: Path
) -> None:
    ctx = make_ctx(output_dir=tmp_path / "out", output_cap=3000)
    result = call("shell", ctx=ctx, command="seq 1 20000")
    note = result.content.split("[... ")[1]
    offset = int(note.split("offset=")[1].split(",")[0])
    page = call("read_file", ctx=ctx, path=str(kept_file(result.content)), offset=offset, limit=2)
    assert page.content == f"{offset:6}\t{offset}\n{offset + 1:6}\t{offset + 1}"
    assert json.loads(json.dumps(page.content)) == page.content
    elsewhere = tmp_path / "out" / ".." / "secret.log"
    elsewhere.write_text("nope\n")
    refused = call("read_file", ctx=ctx, path=str(elsewhere))
    assert refused.is_error and "outside the repository" in refused.content
