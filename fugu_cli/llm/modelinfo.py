"""What litellm says about a model: its window (max input and output tokens, from litellm's table), the
tokenizer litellm counts its tokens with and whether its table prices the model, remembered on disk per
version of that table, so fugu imports litellm (seconds) only the first time it meets a model. A tiktoken
tokenizer is then loaded without litellm, from the encodings litellm ships (`tiktoken_counter`): the only
module that imports tiktoken.

The answers are litellm's own (`get_model_info`, `select_tokenizer`), asked once per model and table; the
table is identified by its file's size and modification time, found without importing litellm. Never prints;
a cache that cannot be read or written only costs the litellm import.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

TABLE_FILE = "model_prices_and_context_window_backup.json"
FIELDS = (
    "max_input_tokens",
    "max_output_tokens",
    "tokenizer",
    "supports_vision",
    "price",
    "cached_price",
    "unit_price",
)
Counter = Callable[[str], int]


def _litellm_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("litellm")  # finds the package without running it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def table_version() -> str | None:
    """An id of the model table litellm would read (it reads its bundled copy: fugu sets
    LITELLM_LOCAL_MODEL_COST_MAP), or None when litellm cannot be found."""
    folder = _litellm_dir()
    try:
        st = (folder / TABLE_FILE).stat() if folder else None
    except OSError:
        return None
    return f"{st.st_size}-{st.st_mtime_ns}" if st else None


def litellm_tokenizer(litellm: Any, model: str) -> tuple[str, Counter]:
    """The tokenizer litellm counts `model`'s tokens with: its family name and a counter (litellm's public
    `select_tokenizer`; where a litellm lacks it, its generic counter)."""
    try:
        chosen = litellm.utils.select_tokenizer(model=model)
        tokenizer = chosen["tokenizer"]
        if chosen["type"] == "openai_tokenizer":
            name = f"tiktoken:{tokenizer.name}"
            return name, lambda text: len(tokenizer.encode(text, disallowed_special=()))
        name = f"hf:{getattr(tokenizer, 'name_or_path', model)}"
        return name, lambda text: len(tokenizer.encode(text).ids)
    except Exception:  # a tokenizer that cannot load offline: litellm's generic counter
        return f"litellm:{model}", lambda text: int(litellm.token_counter(model=model, text=text))


@functools.cache
def tiktoken_counter(name: str, cache_dir: Path | None = None) -> Counter | None:
    """A counter for tiktoken's encoding `name`, read from the copies litellm ships (where litellm itself
    points tiktoken: CUSTOM_TIKTOKEN_CACHE_DIR, else its bundled folder), so nothing is downloaded; None
    when it cannot be loaded. Decoding the encoding's file is half its load time, so its decoded form is
    kept in `cache_dir` (marshal: plain data, no code)."""
    folder = _litellm_dir()
    bundled = str(folder / "litellm_core_utils" / "tokenizers") if folder else None
    where = os.environ.get("CUSTOM_TIKTOKEN_CACHE_DIR") or bundled
    if where is None:
        return None
    os.environ["TIKTOKEN_CACHE_DIR"] = where  # what litellm sets when it loads
    try:
        import tiktoken

        encoding = tiktoken.Encoding(**_encoding_args(tiktoken, name, cache_dir))
    except Exception:
        return None
    return lambda text: len(encoding.encode(text, disallowed_special=()))


def _encoding_args(tiktoken: Any, name: str, cache_dir: Path | None) -> dict[str, Any]:
    import marshal

    version = getattr(tiktoken, "__version__", "")
    path = cache_dir / f"tiktoken-{name}-{version}.marshal" if cache_dir else None
    if path is not None:
        try:
            args: dict[str, Any] = marshal.loads(path.read_bytes())
            if isinstance(args, dict) and args.get("name") == name:
                return args
        except (OSError, ValueError, EOFError, TypeError):
            pass
    from tiktoken_ext.openai_public import ENCODING_CONSTRUCTORS  # tiktoken's own plugin: every encoding

    args = dict(ENCODING_CONSTRUCTORS[name]())  # reads the file (checking its hash) and decodes it
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(marshal.dumps(args))
            tmp.replace(path)
        except (OSError, ValueError):
            pass
    return args


class ModelInfo:
    """`get(model)`: litellm's max_input_tokens and max_output_tokens for `model` (each None when unknown),
    whether it `supports_vision`, its `tokenizer` family and its prices (`price`: USD per million input and
    output tokens, None when litellm cannot price it; `cached_price`: per million cached input tokens, or
    None), from the file at `path` when it was asked before with the same table, else from litellm."""

    def __init__(self, litellm: Callable[[], Any], path: Path | None) -> None:
        self._litellm = litellm
        self._path = path
        self._lock = threading.Lock()
        self._version: str | None = None
        self._known: dict[str, dict[str, Any]] | None = None

    def get(self, model: str) -> Mapping[str, Any]:
        with self._lock:
            known = self._load()
            found = known.get(model)
        if found is not None and all(k in found for k in FIELDS):
            return found
        found = self._ask(model)
        with self._lock:
            known[model] = found
            self._save(known)
        return found

    def cached(self, model: str) -> Mapping[str, Any] | None:
        """What is kept about `model`, without asking litellm (None when nothing complete is kept)."""
        with self._lock:
            found = self._load().get(model)
        return found if found is not None and all(k in found for k in FIELDS) else None

    def _ask(self, model: str) -> dict[str, Any]:
        litellm = self._litellm()
        try:
            info = litellm.get_model_info(model) or {}
        except Exception:
            info = {}
        out: dict[str, Any] = {k: _int(info.get(k)) for k in ("max_input_tokens", "max_output_tokens")}
        out["supports_vision"] = bool(info.get("supports_vision"))
        out["price"] = price_per_million(litellm, model)
        out["cached_price"] = cached_price_per_million(info)
        out["unit_price"] = unit_price(litellm, model, info)
        return out | {"tokenizer": litellm_tokenizer(litellm, model)[0]}

    def _load(self) -> dict[str, dict[str, Any]]:
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

    def _save(self, known: dict[str, dict[str, Any]]) -> None:
        """Writes `known` over the file, keeping the models others (another instance, another run) added."""
        if self._path is None or self._version is None:
            return
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
            theirs = (
                data.get("models") if isinstance(data, dict) and data.get("table") == self._version else None
            )
            if isinstance(theirs, dict):
                known.update(
                    {str(k): dict(v) for k, v in theirs.items() if isinstance(v, dict) and k not in known}
                )
        except (OSError, ValueError):
            pass
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"table": self._version, "models": known}), encoding="utf-8")
            tmp.replace(self._path)
        except OSError:
            pass


def price_per_million(litellm: Any, model: str) -> list[float] | None:
    """litellm's price per million input and output tokens for `model`, at its first price tier: its
    `cost_per_token` for a thousand of each, times a thousand (asked for a million, litellm answers with the
    price of prompts past its tiers, e.g. gemini-2.5-pro's above 200k tokens: twice the input price most
    calls pay). None when it cannot price `model` (then PriceBook's per-reply `cost_per_token` cannot
    either)."""
    try:
        cost_in, cost_out = litellm.cost_per_token(model=model, prompt_tokens=1_000, completion_tokens=1_000)
    except Exception:
        return None
    return [round(float(cost_in) * 1_000, 9), round(float(cost_out) * 1_000, 9)]


# prompt sizes (tokens) at which `unit_price` checks its formula against litellm: around the thresholds of
# litellm's price tiers (above 100k, 128k, 200k, 256k, 272k tokens; `tiered_pricing` ranges)
_PROBES = (1_000, 8_000, 16_000, 32_000, 64_000, 100_000, 128_000, 200_000, 256_000, 272_000, 1_000_000)


def unit_price(litellm: Any, model: str, info: Mapping[str, Any]) -> list[float | None] | None:
    """How litellm's `cost_per_token` prices a reply of `model`: [input, output, cached input USD per
    token, the largest prompt (tokens) that holds for, None: any], so that a reply is priced without
    importing litellm (`local_cost`). Found by asking litellm at growing prompt sizes (half as many
    completion tokens, a quarter of the prompt cached): the formula holds up to the last size where
    litellm's answer is the formula's (a price tier starts past it). None where it does not hold even for
    the smallest, or where the price depends on the time of the call (off-peak prices)."""
    if info.get("off_peak_pricing"):
        return None
    try:
        price_in, price_out = float(info["input_cost_per_token"]), float(info["output_cost_per_token"])
    except (KeyError, TypeError, ValueError):
        return None
    cached = info.get("cache_read_input_token_cost")
    price_cached = float(cached) if cached is not None else price_in
    unit: list[float | None] = [price_in, price_out, price_cached, None]
    held: int | None = None
    for size in _PROBES:
        try:
            cost_in, cost_out = litellm.cost_per_token(
                model=model,
                prompt_tokens=size,
                completion_tokens=size // 2,
                cache_read_input_tokens=size // 4,
            )
            theirs = float(cost_in) + float(cost_out)
        except Exception:
            break
        ours = local_cost(unit, size, size // 2, size // 4)
        if ours is None or not math.isclose(theirs, ours, rel_tol=1e-9, abs_tol=1e-12):
            break
        held = size
    else:
        return unit  # the formula held at every size asked
    return None if held is None else [price_in, price_out, price_cached, held]


def local_cost(unit: Any, prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> float | None:
    """USD for a reply by `unit_price`'s answer, None where it does not hold (no answer, or a prompt larger
    than it was checked for)."""
    if not isinstance(unit, list) or len(unit) != 4:
        return None
    price_in, price_out, price_cached, upto = unit
    if upto is not None and prompt_tokens > upto:
        return None
    return linear_cost(prompt_tokens, completion_tokens, cached_tokens, price_in, price_out, price_cached)


def linear_cost(
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int,
    price_in: float,
    price_out: float,
    cached: float,
) -> float:
    """Cost at flat rates (any unit: per token, per million): cached input tokens (at most the prompt) at
    `cached`, the rest of the prompt at `price_in`, the completion at `price_out`."""
    hits = min(cached_tokens, prompt_tokens)
    return float((prompt_tokens - hits) * price_in + hits * cached + completion_tokens * price_out)


def cached_price_per_million(info: Mapping[str, Any]) -> float | None:
    """The cached-input price per million tokens in litellm's `get_model_info` answer, or None."""
    cost = info.get("cache_read_input_token_cost")
    return float(cost) * 1_000_000 if cost is not None else None


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
