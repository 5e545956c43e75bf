"""What litellm's model table says about a model's window (max input and output tokens), remembered on disk
per version of that table, so a run whose requests need no exact token count never imports litellm (seconds).

The answers are litellm's own (`get_model_info`), asked once per model and table; the table is identified by
its file's size and modification time, found without importing litellm. Never prints; a cache that cannot be
read or written only costs the litellm import.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

TABLE_FILE = "model_prices_and_context_window_backup.json"


def table_version() -> str | None:
    """An id of the model table litellm would read (it reads its bundled copy: fugu sets
    LITELLM_LOCAL_MODEL_COST_MAP), or None when litellm cannot be found."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        st = (Path(next(iter(spec.submodule_search_locations))) / TABLE_FILE).stat()
    except OSError:
        return None
    return f"{st.st_size}-{st.st_mtime_ns}"


class ModelInfo:
    """`get(model)`: litellm's max_input_tokens and max_output_tokens for `model` (each None when unknown),
    from the file at `path` when it was asked before with the same table, else from litellm."""

    def __init__(self, litellm: Callable[[], Any], path: Path | None) -> None:
        self._litellm = litellm
        self._path = path
        self._lock = threading.Lock()
        self._version: str | None = None
        self._known: dict[str, dict[str, int | None]] | None = None

    def get(self, model: str) -> Mapping[str, int | None]:
        with self._lock:
            known = self._load()
            found = known.get(model)
        if found is not None:
            return found
        found = self._ask(model)
        with self._lock:
            known[model] = found
            self._save(known)
        return found

    def _ask(self, model: str) -> dict[str, int | None]:
        try:
            info = self._litellm().get_model_info(model) or {}
        except Exception:
            info = {}
        return {k: _int(info.get(k)) for k in ("max_input_tokens", "max_output_tokens")}

    def _load(self) -> dict[str, dict[str, int | None]]:
        if self._known is not None:
            return self._known
        self._version = table_version()
        self._known = {}
        if self._path is None or self._version is None:
            return self._known
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return self._known
        models = data.get("models") if isinstance(data, dict) else None
        if isinstance(models, dict) and data.get("table") == self._version:
            self._known = {str(k): dict(v) for k, v in models.items() if isinstance(v, dict)}
        return self._known

    def _save(self, known: dict[str, dict[str, int | None]]) -> None:
        if self._path is None or self._version is None:
            return
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"table": self._version, "models": known}), encoding="utf-8")
            tmp.replace(self._path)
        except OSError:
            pass


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
