"""The store's schema: numbered migrations (append only; `PRAGMA user_version` counts those applied) and the
tables keyed by session, which a session's export carries. Never prints."""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY, created_at REAL NOT NULL, updated_at REAL NOT NULL,
        cwd TEXT NOT NULL, title TEXT NOT NULL DEFAULT '', mode TEXT NOT NULL DEFAULT 'fugu',
        status TEXT NOT NULL DEFAULT 'open', pool_json TEXT NOT NULL DEFAULT '[]',
        router TEXT NOT NULL DEFAULT '', cost_usd REAL NOT NULL DEFAULT 0
    );
    CREATE TABLE messages (
        session_id TEXT NOT NULL, seq INTEGER NOT NULL, turn INTEGER NOT NULL, scope TEXT NOT NULL,
        data_json TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (session_id, scope, seq)
    );
    CREATE TABLE steps (
        session_id TEXT NOT NULL, scope TEXT NOT NULL, turn INTEGER NOT NULL, step INTEGER NOT NULL,
        worker TEXT NOT NULL, source TEXT NOT NULL, role TEXT, status TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
        cost_usd REAL NOT NULL, text TEXT NOT NULL DEFAULT '', started_at REAL NOT NULL,
        finished_at REAL NOT NULL
    );
    CREATE TABLE route_decisions (
        session_id TEXT NOT NULL, scope TEXT NOT NULL, turn INTEGER NOT NULL, step INTEGER NOT NULL,
        worker TEXT NOT NULL, source TEXT NOT NULL, role TEXT, scores_json TEXT NOT NULL,
        latency_ms REAL NOT NULL, reason TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL
    );
    CREATE TABLE tool_calls (
        session_id TEXT NOT NULL, scope TEXT NOT NULL, turn INTEGER NOT NULL, step INTEGER NOT NULL,
        agent TEXT NOT NULL, call_id TEXT NOT NULL, tool TEXT NOT NULL, arguments TEXT NOT NULL,
        result TEXT NOT NULL, is_error INTEGER NOT NULL, denied INTEGER NOT NULL, exit_code INTEGER,
        duration_ms REAL NOT NULL, files_json TEXT NOT NULL, created_at REAL NOT NULL
    );
    CREATE TABLE turns (
        session_id TEXT NOT NULL, turn INTEGER NOT NULL, task TEXT NOT NULL, status TEXT NOT NULL,
        result TEXT NOT NULL, cost_usd REAL NOT NULL, checkpoint TEXT, created_at REAL NOT NULL,
        PRIMARY KEY (session_id, turn)
    );
    CREATE TABLE memory_facts (
        session_id TEXT NOT NULL, workflow INTEGER NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
        value TEXT NOT NULL, agent TEXT NOT NULL, created_at REAL NOT NULL
    );
    CREATE TABLE outcomes (
        task TEXT NOT NULL, worker TEXT NOT NULL, reward REAL NOT NULL, cost_usd REAL NOT NULL,
        source TEXT NOT NULL DEFAULT '', session_id TEXT, created_at REAL NOT NULL
    );
    CREATE INDEX tool_calls_session ON tool_calls (session_id, turn, step);
    CREATE INDEX steps_session ON steps (session_id, turn, step);
    """,
    # compaction: the transcript a worker sees is `head` followed by the stored messages from `upto` on;
    # the stored messages themselves are never changed
    """
    CREATE TABLE compactions (
        session_id TEXT NOT NULL, scope TEXT NOT NULL, turn INTEGER NOT NULL, upto INTEGER NOT NULL,
        head_json TEXT NOT NULL, tokens_before INTEGER NOT NULL, tokens_after INTEGER NOT NULL,
        trigger TEXT NOT NULL, worker TEXT NOT NULL, summarizer TEXT NOT NULL DEFAULT '',
        focus TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL
    );
    CREATE INDEX compactions_session ON compactions (session_id, scope);
    """,
    # hooks (issue 14): every run of a user's hook command, with what it decided
    """
    CREATE TABLE hook_runs (
        session_id TEXT NOT NULL, scope TEXT NOT NULL, turn INTEGER NOT NULL, step INTEGER NOT NULL,
        agent TEXT NOT NULL, event TEXT NOT NULL, matcher TEXT NOT NULL, command TEXT NOT NULL,
        tool TEXT NOT NULL DEFAULT '', call_id TEXT NOT NULL DEFAULT '', exit_code INTEGER,
        timed_out INTEGER NOT NULL, outcome TEXT NOT NULL, stdout TEXT NOT NULL, stderr TEXT NOT NULL,
        duration_ms REAL NOT NULL, created_at REAL NOT NULL
    );
    CREATE INDEX hook_runs_session ON hook_runs (session_id, turn);
    """,
    # fugu serve (issue 26): stored Responses (`store`, `previous_response_id`), kept until they expire and
    # readable only with the key that made them; and notes on what a call could not honour
    """
    CREATE TABLE responses (
        id TEXT PRIMARY KEY, owner TEXT NOT NULL, session_id TEXT NOT NULL, previous_id TEXT,
        model TEXT NOT NULL, input_json TEXT NOT NULL, output_json TEXT NOT NULL,
        response_json TEXT NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL
    );
    CREATE INDEX responses_expiry ON responses (expires_at);
    CREATE TABLE notes (
        session_id TEXT NOT NULL, turn INTEGER NOT NULL, step INTEGER NOT NULL, text TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX notes_session ON notes (session_id, turn);
    """,
    # verification in sessions (issue 24): each attempt at a turn, and what its check or tests said
    """
    CREATE TABLE attempts (
        session_id TEXT NOT NULL, turn INTEGER NOT NULL, attempt INTEGER NOT NULL, worker TEXT NOT NULL,
        cost_usd REAL NOT NULL, steps INTEGER NOT NULL, status TEXT NOT NULL, outcome TEXT NOT NULL,
        evidence TEXT NOT NULL DEFAULT '', command TEXT NOT NULL DEFAULT '', exit_code INTEGER,
        set_aside TEXT, output TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL
    );
    CREATE INDEX attempts_session ON attempts (session_id, turn);
    """,
)


# Every table keyed by session, with the column holding the id, and the texts its typed writers redact: what
# `export_session` ships and `import_session` writes (redacting the same columns again, with this process's
# secrets). A table added by a migration and keyed by session belongs here too.
SESSION_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "sessions": ("id", ("title", "pool_json")),
    "messages": ("session_id", ("data_json",)),
    "steps": ("session_id", ("text",)),
    "route_decisions": ("session_id", ("reason",)),
    "tool_calls": ("session_id", ("arguments", "result")),
    "turns": ("session_id", ("task", "result")),
    "memory_facts": ("session_id", ("key", "value")),
    "compactions": ("session_id", ("head_json", "focus")),
    "hook_runs": ("session_id", ("command", "stdout", "stderr")),
    "attempts": ("session_id", ("command", "output")),
    "outcomes": ("session_id", ("task",)),
    "responses": ("session_id", ("input_json", "output_json", "response_json")),
    "notes": ("session_id", ("text",)),
}
