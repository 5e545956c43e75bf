"""The fan-out seam: the same embeddings and the same ES search whether chunks run here, in processes, or as
tasks on a real local Ray instance."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from fugu_cli.cluster import ClusterSpec
from fugu_cli.router.backbone import tiny_bert_backbone
from fugu_cli.router.embed_cache import encode_prompts
from fugu_cli.router.executor import LocalExecutor, ProcessExecutor, RayExecutor, chunked
from tests.ray_kit import RayInstance

T = TypeVar("T")
R = TypeVar("R")


def test_chunks_cover_the_items_in_order() -> None:
    assert chunked(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert chunked([1], 4) == [[1]] and chunked([], 2) == []


def test_embedding_in_processes_equals_embedding_here(tmp_path: Path) -> None:
    texts = [f"prompt number {i} about {'sql' if i % 2 else 'css'}" for i in range(1100)]
    here = encode_prompts(tiny_bert_backbone(), texts, cache_dir=tmp_path / "a", executor=LocalExecutor())
    pool = ProcessExecutor(2)
    try:
        there = encode_prompts(tiny_bert_backbone(), texts, cache_dir=tmp_path / "b", executor=pool)
    finally:
        pool.close()
    assert there.shape == (1100, 64) and np.allclose(here, there, atol=1e-5)


def test_embedding_on_ray_equals_embedding_here(tmp_path: Path, ray_instance: RayInstance) -> None:
    texts = [f"prompt number {i} about {'sql' if i % 3 else 'css'}" for i in range(300)]
    here = encode_prompts(tiny_bert_backbone(), texts, cache_dir=tmp_path / "a", executor=LocalExecutor())
    cluster = RayExecutor(ClusterSpec())
    try:
        assert cluster.width == 2  # the instance's 2 CPUs: the pass is split in (at least) two shards
        there = encode_prompts(tiny_bert_backbone(), texts, cache_dir=tmp_path / "b", executor=cluster)
    finally:
        cluster.close()
    assert there.shape == (300, 64) and np.allclose(here, there, atol=1e-5)
    # the shards' vectors were merged into this machine's cache: a second pass computes nothing
    again = encode_prompts(tiny_bert_backbone(), texts, cache_dir=tmp_path / "b", executor=_Refuses())
    assert np.array_equal(again, there)


class _Refuses:
    width = 2

    def map(self, fn: Callable[[T], R], chunks: Sequence[T]) -> list[R]:
        raise AssertionError("everything should have come from the cache")

    def close(self) -> None:
        return None
