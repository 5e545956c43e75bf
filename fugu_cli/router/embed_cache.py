"""On-disk cache of prompt features: one unit vector per prompt, keyed by backbone, token limit and text hash.

A prompt's feature is exactly what `TranscriptEncoder.encode_prompt` computes at serving time (its `user: ...`
line through the backbone), so training and serving agree. Batches are length-sorted to cut padding work; the
pass over uncached prompts can go through an `Executor` (chunks of lines, each worker loading the backbone by
id). Imports torch only through the backbone passed in; never prints (progress goes to a callback).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fugu_cli.router.executor import Executor, LocalExecutor, chunked
from fugu_cli.types import Message

if TYPE_CHECKING:
    from fugu_cli.router.backbone import Backbone

Progress = Callable[[int, int], None]  # (done, total)
_CACHE_KWARGS = ("past_key_values", "past_key_value", "cache")


def prompt_line(text: str) -> str:
    """The transcript line of a single user message: what the live router encodes."""
    return Message(role="user", content=text).as_line()


def line_key(line: str) -> bytes:
    return hashlib.blake2b(line.encode(), digest_size=16).digest()


def default_cache_dir() -> Path:
    from fugu_cli.config import fugu_home

    return fugu_home() / "cache" / "router-features"


def cache_path(cache_dir: Path, backbone_id: str, max_tokens: int, variant: str = "") -> Path:
    tag = hashlib.sha256(f"{backbone_id}|{max_tokens}|{variant}".encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in backbone_id)[-40:]
    return cache_dir / f"{safe}-{max_tokens}-{tag}.npz"


def encode_prompts(
    backbone: Backbone,
    texts: Sequence[str],
    *,
    max_tokens: int = 128,
    cache_dir: Path | None = None,
    variant: str = "",
    batch_size: int = 64,
    on_progress: Progress | None = None,
    executor: Executor | None = None,
) -> np.ndarray:
    """[N, H] float32 features of single-prompt transcripts; computes only what the cache lacks.
    `variant` names a changed backbone (e.g. a digest of SVF offsets) so its vectors are cached apart; such
    a backbone cannot be loaded elsewhere by id, so it always encodes here."""
    lines = [prompt_line(t) for t in texts]
    keys = [line_key(line) for line in lines]
    path = cache_path(cache_dir or default_cache_dir(), backbone.id, max_tokens, variant)
    known = _load(path)
    todo = list(dict.fromkeys(k for k in keys if k not in known))
    if todo:
        by_key = dict(zip(keys, lines, strict=True))
        new_lines = [by_key[k] for k in todo]
        if executor is None or isinstance(executor, LocalExecutor) or variant:
            fresh = encode_lines(
                backbone, new_lines, max_tokens=max_tokens, batch_size=batch_size, on_progress=on_progress
            )
        else:
            job = EncodeJob(backbone.id, max_tokens, batch_size)
            # at least one chunk per process (or cluster CPU), at most 512 lines each
            chunks = chunked(new_lines, max(executor.width, -(-len(new_lines) // 512)))
            fresh = [v for part in executor.map(job, chunks) for v in part]
        known.update(zip(todo, fresh, strict=True))
        _save(path, known)
    if not keys:
        return np.zeros((0, backbone.hidden_size), dtype=np.float32)
    return np.stack([known[k] for k in keys]).astype(np.float32)


def encode_lines(
    backbone: Backbone,
    lines: Sequence[str],
    *,
    max_tokens: int = 128,
    batch_size: int = 64,
    on_progress: Progress | None = None,
) -> list[np.ndarray]:
    """Vectors of `lines` through `backbone.encode`, batched by length (same numbers, less padding)."""
    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
    out: list[np.ndarray] = [np.zeros(0, dtype=np.float32)] * len(lines)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        vecs = backbone.encode([lines[i] for i in idx], max_length=max_tokens).numpy()
        for i, v in zip(idx, vecs, strict=True):
            out[i] = v.astype(np.float32)
        if on_progress is not None:
            on_progress(min(start + batch_size, len(order)), len(order))
    return out


@dataclass(frozen=True)
class EncodeJob:
    """`encode_lines` for one chunk, in whatever process an executor runs it (a spawned process, a Ray
    worker): the backbone is loaded by id once per process (one thread each: the processes are the
    parallelism)."""

    backbone: str
    max_tokens: int
    batch_size: int = 64

    def __call__(self, lines: list[str]) -> list[np.ndarray]:
        loaded = _BACKBONES.get(self.backbone)
        if loaded is None:
            from fugu_cli.router.backbone import load_backbone

            loaded = _BACKBONES[self.backbone] = load_backbone(self.backbone, threads=1)
        return encode_lines(loaded, lines, max_tokens=self.max_tokens, batch_size=self.batch_size)


_BACKBONES: dict[str, Backbone] = {}


def _load(path: Path) -> dict[bytes, np.ndarray]:
    if not path.is_file():
        return {}
    try:
        with np.load(path) as z:
            return {k.tobytes(): v for k, v in zip(z["keys"], z["vecs"], strict=True)}
    except (OSError, ValueError, KeyError):
        return {}  # a torn or foreign file is only a cache: recompute


def _save(path: Path, known: dict[bytes, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = np.frombuffer(b"".join(known), dtype=np.uint8).reshape(len(known), 16)
    vecs = np.stack(list(known.values())).astype(np.float32)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(tmp, keys=keys, vecs=vecs)
    os.replace(tmp, path)


@dataclass
class BlockBatch:
    """The inputs of a backbone's trailing blocks for one batch of prompts, captured once so SVF training on
    those blocks runs only them, not the frozen layers below."""

    rows: np.ndarray  # [B] row indices into the reward matrix
    hidden: Any  # torch.Tensor [B, T, H]: what entered the first trailing block
    args: tuple[Any, ...]  # everything else the model passed that block (masks, positions)
    kwargs: dict[str, Any]
    mask: Any  # torch.Tensor [B, T]: the tokenizer's attention mask, for pooling


def trailing_blocks(model: Any, n: int) -> list[Any]:
    """The model's last `n` transformer blocks (children of its longest ModuleList)."""
    from torch import nn

    lists = [m for _, m in model.named_modules() if isinstance(m, nn.ModuleList)]
    if not lists:
        raise ValueError("backbone has no ModuleList of blocks")
    blocks = max(lists, key=len)
    return list(blocks)[-n:]


def blocks_needed(model: Any, targets: Sequence[str]) -> int:
    """How many trailing blocks hold every module named in `targets` (resolved SVF module names)."""
    from torch import nn

    lists = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.ModuleList)]
    name, blocks = max(lists, key=lambda nm: len(nm[1]))
    prefix = f"{name}." if name else ""
    first = len(blocks)
    for t in targets:
        if not t.startswith(prefix):
            raise ValueError(f"SVF target {t!r} is outside the transformer blocks")
        first = min(first, int(t[len(prefix) :].split(".")[0]))
    return len(blocks) - first


def capture_block_inputs(
    backbone: Backbone,
    texts: Sequence[str],
    rows: Sequence[int] | np.ndarray,
    n_blocks: int,
    *,
    max_tokens: int = 128,
    batch_size: int = 16,
) -> list[BlockBatch]:
    """Run the backbone once over `texts` (length-sorted batches) and keep what enters its last `n_blocks`."""
    first = trailing_blocks(backbone.model, n_blocks)[0]
    seen: dict[str, Any] = {}

    def on_model(_mod: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        seen["mask"] = kwargs["attention_mask"]

    def on_block(_mod: Any, args: Any, kwargs: dict[str, Any]) -> None:
        seen["hidden"] = args[0] if args else kwargs["hidden_states"]
        # a decoder's KV cache object grows with every call: replaying a block must not read it
        seen["kwargs"] = {
            k: (None if k in _CACHE_KWARGS else v) for k, v in kwargs.items() if k != "hidden_states"
        }
        seen["args"] = tuple(args[1:])

    lines = [prompt_line(t) for t in texts]
    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
    out: list[BlockBatch] = []
    h1 = backbone.model.register_forward_pre_hook(on_model, with_kwargs=True)
    h2 = first.register_forward_pre_hook(on_block, with_kwargs=True)
    try:
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            backbone.encode([lines[i] for i in idx], max_length=max_tokens)
            # tensors made under inference_mode cannot enter autograd: copy them out
            out.append(
                BlockBatch(
                    np.asarray([rows[i] for i in idx]),
                    _plain(seen["hidden"]),
                    _plain(seen["args"]),
                    _plain(seen["kwargs"]),
                    _plain(seen["mask"]),
                )
            )
    finally:
        h1.remove()
        h2.remove()
    return out


def block_features(backbone: Backbone, batch: BlockBatch, n_blocks: int) -> Any:
    """[B, H] unit vectors for a captured batch, recomputing only the trailing blocks (gradients flow into any
    SVF offsets on them). Equals `backbone.encode` of the same texts."""
    import torch
    import torch.nn.functional as F

    h = batch.hidden
    for block in trailing_blocks(backbone.model, n_blocks):
        out = block(h, *batch.args, **batch.kwargs)
        h = out[0] if isinstance(out, tuple) else out
    norm = getattr(backbone.model, "norm", None)
    if backbone.kind == "decoder" and norm is not None:
        h = norm(h)
    mask = batch.mask
    if backbone.kind == "encoder":
        m = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
    else:
        idx = (mask.sum(1) - 2).clamp(min=0)
        pooled = h[torch.arange(h.shape[0]), idx]
    return F.normalize(pooled.float(), dim=-1)


def _plain(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
