"""The fan-out seam: the same embeddings and the same ES search whether chunks run here or in processes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fugu_cli.router.backbone import tiny_qwen3_backbone
from fugu_cli.router.embed_cache import encode_prompts
from fugu_cli.router.executor import LocalExecutor, ProcessExecutor, chunked


def test_chunks_cover_the_items_in_order() -> None:
    assert chunked(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert chunked([1], 4) == [[1]] and chunked([], 2) == []


def test_embedding_in_processes_equals_embedding_here(tmp_path: Path) -> None:
    texts = [f"prompt number {i} about {'sql' if i % 2 else 'css'}" for i in range(1100)]
    here = encode_prompts(tiny_qwen3_backbone(), texts, cache_dir=tmp_path / "a", executor=LocalExecutor())
    pool = ProcessExecutor(2)
    try:
        there = encode_prompts(tiny_qwen3_backbone(), texts, cache_dir=tmp_path / "b", executor=pool)
    finally:
        pool.close()
    assert there.shape == (1100, 64) and np.allclose(here, there, atol=1e-5)
