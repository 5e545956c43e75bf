"""A session's checkpoints: the tree as it was right before a turn first changed it (what `/undo` restores)
and right after every tool call that may have changed it (what `/rewind` can go back to), each exactly,
untracked files included, without touching the user's branch or index; and the conversation as it stood at
each of them.

The snapshots live in fugu's own git store under FUGU_HOME (`tools/checkpoints.py`), out of every command's
reach; their shas are kept in the session store (they survive `--continue`); older sessions' are pruned.
Never prints: a failure to checkpoint is said as a Notice, and the edit goes on.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from fugu_cli.errors import UsageError
from fugu_cli.events import Emit, Notice
from fugu_cli.store import EditCheckpointRow, Store
from fugu_cli.types import Message

__all__ = ["Checkpoints", "EditCheckpointRow", "conversation_at"]


class Checkpoints:
    """{turn: checkpoint commit ("" where none could be made)} of one session, for /undo, and every
    checkpoint in the order taken, for /rewind."""

    def __init__(self, store: Store, session_id: str, root: Path, keep_sessions: int) -> None:
        self.store, self.sid, self.root, self.keep_sessions = store, session_id, root, keep_sessions
        self.taken: dict[int, str] = store.checkpoints(session_id)
        self._points = store.edit_checkpoints(session_id)
        self._pruned = False
        self._lock = threading.Lock()

    def __contains__(self, turn: object) -> bool:
        return turn in self.taken

    def __len__(self) -> int:
        return len(self.taken)

    def before_edit(self, turn: int, emit: Emit) -> Callable[[], None]:
        """What a tool calls right before the turn's first change: checkpoint the tree (once a turn)."""

        def checkpoint() -> None:
            with self._lock:
                if turn in self.taken:
                    return
                self.taken[turn] = sha = self._save(f"{self.sid}-t{turn}", emit)
                self.store.set_checkpoint(self.sid, turn, sha)
                if sha:
                    self._points.append(self.store.add_edit_checkpoint(self.sid, turn, "turn", sha))

        return checkpoint

    def after_edit(self, turn: int, emit: Emit) -> Callable[[str, str], None]:
        """What a tool calls once a call that may have changed the tree is over: checkpoint the result."""

        def checkpoint(call_id: str, tool: str) -> None:
            with self._lock:
                if not self.taken.get(turn):  # no checkpoint could be made before: none can now
                    return
                seq = (self._points[-1].seq if self._points else 0) + 1
                sha = self._save(f"{self.sid}-t{turn}-e{seq}", emit)
                if sha:
                    row = self.store.add_edit_checkpoint(self.sid, turn, "edit", sha, call_id, tool)
                    self._points.append(row)

        return checkpoint

    def _save(self, label: str, emit: Emit) -> str:
        from fugu_cli.tools import checkpoints, git

        try:
            sha = checkpoints.save(self.root, label)
            if not self._pruned:  # once per session is enough
                self._pruned = True
                keep, mine = self.keep_sessions, frozenset({self.sid})
                checkpoints.prune(self.root, keep, keep=mine)
                git.prune_checkpoints(self.root, keep, keep=mine)  # ultra's worktree bases, in the repo
            return sha
        except Exception as e:  # not a git repo, or git missing: edits go on, /undo can't help
            emit(Notice(session_id=self.sid, level="warning", text=f"no checkpoint for /undo: {e}"))
            return ""

    def points(self) -> list[EditCheckpointRow]:
        """Every checkpoint of the session, oldest first."""
        with self._lock:
            return list(self._points)

    def point(self, seq: int) -> EditCheckpointRow:
        found = next((p for p in self.points() if p.seq == seq), None)
        if found is None:
            raise UsageError(f"no checkpoint {seq} in this session (/rewind lists them)")
        return found

    def restore(self, point: EditCheckpointRow) -> list[str]:
        """Make the tree exactly what it was at `point`; returns the paths that changed."""
        from fugu_cli.tools import checkpoints

        return checkpoints.restore(self.root, point.sha)

    def undo(self) -> list[str]:
        """Restore the tree to its state before the last turn that changed it. Returns the restored paths.

        A turn whose checkpoint matches the tree (it only ran commands that changed nothing) is skipped.
        """
        for turn in sorted(self.taken, reverse=True):
            sha = self.taken.pop(turn)
            self.store.set_checkpoint(self.sid, turn, None)
            if sha:
                from fugu_cli.tools import checkpoints

                restored = checkpoints.restore(self.root, sha)
                if restored:
                    return restored
        raise UsageError("nothing to undo: no turn of this session has changed files")

    def conversation_at(self, point: EditCheckpointRow) -> list[Message]:
        """The main transcript as a worker saw it at `point` (see `conversation_at`)."""
        stored = [m for _, m in self.store.load_messages(self.sid, "main")]
        compactions = self.store.compactions(self.sid, "main")
        earlier = [c for c in compactions if c.created_at <= point.created_at and c.upto <= point.messages]
        head = (earlier[-1].head, earlier[-1].upto) if earlier else ((), 0)
        return conversation_at(stored, head, point)


def conversation_at(
    stored: Sequence[Message], head: tuple[Sequence[Message], int], point: EditCheckpointRow
) -> list[Message]:
    """The transcript at `point`: what was stored then (after the compaction `head`, which replaced the
    stored messages before its index), plus the result of the call that made the checkpoint, with every
    tool call that had no result yet taken out of its reply (a request must answer each call it carries)."""
    summary, upto = head
    kept = [*summary, *stored[upto : point.messages]]
    following = stored[point.messages] if point.messages < len(stored) else None
    if point.kind == "edit" and following is not None and following.tool_call_id == point.call_id:
        kept.append(following)
    answered = {m.tool_call_id for m in kept if m.role == "tool"}
    out: list[Message] = []
    for m in kept:
        if m.role == "assistant" and m.tool_calls:
            calls = tuple(c for c in m.tool_calls if c.id in answered)
            if not calls and not (m.content or "").strip():
                continue
            m = dataclasses.replace(m, tool_calls=calls)
        out.append(m)
    return out
