"""The server's one router: decisions asked for while one is being made wait and are then made together in
one batch, each the decision it would be alone; a failing decision fails only its own caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from fugu_cli.router.checkpoint import init_checkpoint
from fugu_cli.router.learned import LearnedRouter
from fugu_cli.router.prior import PriorRouter
from fugu_cli.serve.routers import _Batched
from fugu_cli.types import RouteDecision, RouteState, Worker
from tests.router.kit import minilm, user, worker


class HeldFirst(LearnedRouter):
    """The real learned router whose first single decision waits until `others` more are waiting."""

    def __init__(self, inner: LearnedRouter, others: int) -> None:
        super().__init__(inner.backbone, inner.head, inner.meta)
        self.others = others
        self.batched: _Batched | None = None
        self.asked_many: list[int] = []
        self._first = True

    def pick(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision:
        if self._first:
            self._first = False
            assert self.batched is not None
            deadline = time.monotonic() + 30
            while len(self.batched._waiting) < self.others and time.monotonic() < deadline:
                time.sleep(0.005)
        return super().pick(state, pool)

    def pick_many(
        self, asks: Sequence[tuple[RouteState, Sequence[Worker]]]
    ) -> list[RouteDecision | Exception]:
        self.asked_many.append(len(asks))
        return super().pick_many(asks)


def _ask(i: int, pool: list[Worker]) -> RouteState:
    texts = ["optimise this SQL query", "center a div with flexbox", "write a bash loop", "fix the index"]
    excluded = frozenset(w.name for w in pool) if i == 3 else frozenset()  # this one cannot be decided
    return RouteState(messages=user(f"{texts[i % len(texts)]} #{i}"), step=1, excluded=excluded)


def test_waiting_decisions_are_made_in_one_batch_each_as_alone(tmp_path: Path) -> None:
    pool = [worker("sql"), worker("web"), worker("shell")]
    init_checkpoint(tmp_path / "ckpt", pool)
    alone = LearnedRouter.load(tmp_path / "ckpt", backbone=minilm())
    router = HeldFirst(LearnedRouter.load(tmp_path / "ckpt", backbone=minilm()), others=7)
    batched = router.batched = _Batched(router)
    results: dict[int, RouteDecision | Exception] = {}

    def call(i: int) -> None:
        try:
            results[i] = batched.pick(_ask(i, pool), pool)
        except Exception as e:
            results[i] = e

    first = threading.Thread(target=call, args=(0,))
    first.start()
    while not batched._busy:  # the first decision is under way (and held)
        time.sleep(0.001)
    rest = [threading.Thread(target=call, args=(i,)) for i in range(1, 8)]
    for t in rest:
        t.start()
    for t in (first, *rest):
        t.join(60)
    assert batched.batches == [1, 7] and router.asked_many == [1, 7]  # pick is a batch of one
    for i in range(8):
        got = results[i]
        if i == 3:
            assert isinstance(got, LookupError)  # only its own caller sees it
            continue
        want = alone.pick(_ask(i, pool), pool)
        assert not isinstance(got, Exception)
        assert got.worker == want.worker and got.reason == want.reason
        assert got.scores == pytest.approx(want.scores, abs=1e-6)


def test_a_router_without_pick_many_decides_a_batch_one_by_one() -> None:
    pool = [worker("sql"), worker("web")]
    batched = _Batched(PriorRouter())
    seen: list[str] = []
    threads = [
        threading.Thread(target=lambda: seen.append(batched.pick(RouteState(user("hi"), 1), pool).worker))
        for _ in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == [PriorRouter().pick(RouteState(user("hi"), 1), pool).worker] * 16
    assert sum(batched.batches) == 16 and not batched._busy and not batched._waiting


def test_the_servers_learned_router_decides_on_one_thread(tmp_path: Path) -> None:
    import torch

    from fugu_cli.app import RouterSource
    from fugu_cli.serve.routers import SharedRouter

    pool = [worker("sql"), worker("web")]
    init_checkpoint(tmp_path / "ckpt", pool)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        shared = SharedRouter(RouterSource(tmp_path / "ckpt", None))
        router = shared.make()
        assert torch.get_num_threads() == 1 and shared.make() is router
        assert isinstance(router, _Batched) and isinstance(router.router, LearnedRouter)
        assert router.pick(_ask(0, pool), pool).source == "learned"
    finally:
        torch.set_num_threads(before)
