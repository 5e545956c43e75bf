"""A session's per-turn git checkpoints: the tree as it was right before a turn first changed it, so `/undo`
can put it back exactly (untracked files included) without touching the user's branch or index.

The snapshots live in fugu's own git store under FUGU_HOME (`tools/checkpoints.py`), out of every command's
reach; their shas are kept in the session store (they survive `--continue`); older sessions' are pruned.
Never prints: a failure to checkpoint is said as a Notice, and the edit goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fugu_cli.errors import UsageError
from fugu_cli.events import Emit, Notice
from fugu_cli.store import Store


class Checkpoints:
    """{turn: checkpoint commit ("" where none could be made)} of one session."""

    def __init__(self, store: Store, session_id: str, root: Path, keep_sessions: int) -> None:
        self.store, self.sid, self.root, self.keep_sessions = store, session_id, root, keep_sessions
        self.taken: dict[int, str] = store.checkpoints(session_id)
        self._pruned = False

    def __contains__(self, turn: object) -> bool:
        return turn in self.taken

    def __len__(self) -> int:
        return len(self.taken)

    def before_edit(self, turn: int, emit: Emit) -> Callable[[], None]:
        """What a tool calls right before the turn's first change: checkpoint the tree (once a turn)."""

        def checkpoint() -> None:
            if turn in self.taken:
                return
            from fugu_cli.tools import checkpoints, git

            try:
                self.taken[turn] = checkpoints.save(self.root, f"{self.sid}-t{turn}")
                if not self._pruned:  # once per session is enough
                    self._pruned = True
                    keep, mine = self.keep_sessions, frozenset({self.sid})
                    checkpoints.prune(self.root, keep, keep=mine)
                    git.prune_checkpoints(self.root, keep, keep=mine)  # ultra's worktree bases, in the repo
            except Exception as e:  # not a git repo, or git missing: edits go on, /undo can't help
                emit(Notice(session_id=self.sid, level="warning", text=f"no checkpoint for /undo: {e}"))
                self.taken[turn] = ""
            self.store.set_checkpoint(self.sid, turn, self.taken[turn])

        return checkpoint

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
