"""The learned router end to end on MiniLM: caching, masking, determinism, cost, roles, and a worker the head
never saw winning the prompts that match its description."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from fugu_cli.router.backbone import Backbone
from fugu_cli.router.checkpoint import CheckpointWorker, RouterCheckpoint, init_checkpoint, save_checkpoint
from fugu_cli.router.features import TranscriptEncoder, describe, description_text
from fugu_cli.router.head import HeadConfig, SelectionHead
from fugu_cli.router.learned import LearnedRouter, expected_costs
from fugu_cli.router.roles import ROLES, is_accept, role_instructions
from fugu_cli.types import Message, RouteDecision, RouteState, ToolCall, Worker
from tests.router.kit import minilm, prompts, user, worker


class CountingBackbone(Backbone):
    """The real MiniLM, counting the texts it is asked to encode."""

    def __init__(self, inner: Backbone) -> None:
        super().__init__(inner.id, inner.kind, inner.model, inner.tokenizer, inner.hidden_size)
        self.texts: list[str] = []
        self.limits: dict[str, int] = {}
        self.calls = 0

    def encode(
        self, texts: Sequence[str], *, max_length: int | Sequence[int] = 256, grad: bool = False
    ) -> torch.Tensor:
        self.calls += 1
        self.texts += texts
        sizes = [max_length] * len(texts) if isinstance(max_length, int) else list(max_length)
        self.limits.update(zip(texts, sizes, strict=True))
        return super().encode(texts, max_length=max_length, grad=grad)


def _transcript(n: int) -> list[Message]:
    msgs = [Message(role="system", content="You are fugu."), *user("make the test suite pass")]
    for i in range(n - 1):
        if i % 2 == 0:
            call = ToolCall(id=f"c{i}", name="shell", arguments=f'{{"cmd": "pytest -k case_{i}"}}')
            msgs.append(
                Message(role="assistant", content=f"running case {i}", tool_calls=(call,), worker="a")
            )
        else:
            msgs.append(Message(role="tool", content=f"case {i}: 1 failed", tool_call_id=f"c{i - 1}"))
    return msgs


def test_each_message_is_encoded_once_as_the_session_grows() -> None:
    bb = CountingBackbone(minilm())
    enc = TranscriptEncoder(bb)
    msgs = _transcript(50)
    for n in range(2, len(msgs) + 1):  # one decision after each new message
        before = len(bb.texts)
        enc.encode(msgs[:n])
        assert bb.texts[before:] == [msgs[n - 1].as_line()]
    assert len(bb.texts) == 50 and not any(t.startswith("system:") for t in bb.texts)
    assert {bb.limits[m.as_line()] for m in msgs if m.role == "user"} == {enc.max_tokens}
    assert {bb.limits[m.as_line()] for m in msgs if m.role in ("assistant", "tool")} == {enc.step_tokens}
    assert enc.step_tokens < enc.max_tokens
    last = enc.encode(msgs)
    assert len(bb.texts) == 50  # nothing new: no backbone call at all
    assert torch.allclose(last, TranscriptEncoder(minilm()).encode(msgs), atol=1e-6)


def test_a_decision_is_one_backbone_call_whatever_the_limits_of_its_new_messages(tmp_path: Path) -> None:
    pool = [worker("sql"), worker("web")]
    router = _router(tmp_path, pool)
    bb = CountingBackbone(router.backbone)
    router.backbone = router.encoder.backbone = bb
    call = ToolCall("c1", "shell", '{"cmd": "ls"}')
    first = [*user("make the test suite pass")]
    router.pick(RouteState(messages=tuple(first), step=1), pool)  # the task and both descriptions
    assert bb.calls == 1 and len(bb.texts) == 3
    step = [*first, Message("assistant", "looking", (call,)), Message("tool", "a.py b.py", tool_call_id="c1")]
    router.pick(RouteState(messages=tuple(step), step=2), pool)
    assert bb.calls == 2 and bb.texts[3:] == [m.as_line() for m in step[1:]]
    turn = [*step, Message("assistant", "two files"), *user("now add a README")]  # limits 64 and 128
    router.pick(RouteState(messages=tuple(turn), step=3), pool)
    assert bb.calls == 3 and bb.texts[5:] == [m.as_line() for m in turn[3:]]
    assert {bb.limits[turn[3].as_line()], bb.limits[turn[4].as_line()]} == {64, 128}
    router.pick(RouteState(messages=tuple(turn), step=3), pool)
    assert bb.calls == 3  # nothing new: no backbone call
    # the batched vectors are the ones each message gets on its own
    alone = TranscriptEncoder(minilm()).encode(turn)
    assert torch.allclose(router.encoder.encode(turn), alone, atol=1e-5)


def test_a_single_prompt_encodes_like_a_one_message_transcript() -> None:
    enc = TranscriptEncoder(minilm())
    text = "write a bash script that renames files"
    one = enc.encode_prompt(text)
    assert torch.equal(one, enc.encode([Message(role="system", content="sys"), *user(text)]))
    assert torch.allclose(one, minilm().encode([f"user: {text}"], max_length=enc.max_tokens)[0], atol=1e-6)


def _router(tmp_path: Path, pool: list[Worker], **kwargs: object) -> LearnedRouter:
    init_checkpoint(tmp_path / "ckpt", pool, **kwargs)  # type: ignore[arg-type]
    return LearnedRouter.load(tmp_path / "ckpt", backbone=minilm())


def test_excluded_workers_get_zero_and_are_never_chosen(tmp_path: Path) -> None:
    pool = [worker("sql"), worker("web"), worker("shell")]
    router = _router(tmp_path, pool, bias={"sql-pro": 20.0})
    state = RouteState(messages=user("optimise this SQL query"), step=0, excluded=frozenset({"sql-pro"}))
    d = router.pick(state, pool)
    assert d.source == "learned" and d.worker != "sql-pro"
    assert d.scores["sql-pro"] == 0.0 and set(d.scores) == {"sql-pro", "web-pro", "shell-pro"}
    assert sum(d.scores.values()) == pytest.approx(1.0)
    assert d.latency_ms > 0
    with pytest.raises(LookupError):
        router.pick(RouteState(user("hi"), 0, excluded=frozenset(w.name for w in pool)), pool)


def test_decisions_are_deterministic(tmp_path: Path) -> None:
    pool = [worker("sql"), worker("web")]
    a = _router(tmp_path, pool)
    b = LearnedRouter.load(tmp_path / "ckpt", threads=1)  # a fresh backbone
    state = RouteState(messages=_transcript(10), step=3, last_worker="sql-pro")
    first = a.pick(state, pool)
    for r in (a, b, a):
        d = r.pick(state, pool)
        assert (d.worker, dict(d.scores)) == (first.worker, dict(first.scores))


def test_cost_weight_is_reward_per_usd_of_the_expected_cost(tmp_path: Path) -> None:
    pricey = Worker("pricey", "openai/big", description="a strong generalist", price_in=15.0, price_out=75.0)
    cheap = Worker("cheap", "openai/small", description="a strong generalist", price_in=0.3, price_out=1.2)
    init_checkpoint(tmp_path / "ckpt", [pricey, cheap], bias={"pricey": 1.0})  # pricey: +1 utility
    state = RouteState(messages=user("refactor the parser"), step=0)
    plain = LearnedRouter.load(tmp_path / "ckpt", backbone=minilm())
    assert plain.cost_weight == 0.0  # the checkpoint's own λ
    assert plain.pick(state, [pricey, cheap]).worker == "pricey"
    dollars = expected_costs(state, [pricey, cheap])
    breakeven = 1.0 / (dollars[0] - dollars[1])  # λ at which one more expected dollar outweighs +1 reward
    below = LearnedRouter.load(tmp_path / "ckpt", backbone=minilm(), cost_weight=0.9 * breakeven)
    assert below.pick(state, [pricey, cheap]).worker == "pricey"
    above = LearnedRouter.load(tmp_path / "ckpt", backbone=minilm(), cost_weight=3 * breakeven)
    d = above.pick(state, [pricey, cheap])
    assert d.worker == "cheap" and d.scores["cheap"] > 0.8 and "λ=" in d.reason


def test_switching_pays_full_prefill_so_the_last_worker_is_cheaper() -> None:
    a = Worker("a", "x/a", price_in=3.0, price_out=15.0)
    b = Worker("b", "x/b", price_in=3.0, price_out=15.0)
    msgs = _transcript(20)
    stay_a = expected_costs(RouteState(msgs, 5, last_worker="a"), [a, b])
    assert stay_a[0] < stay_a[1]
    assert expected_costs(RouteState(msgs, 5), [a, b])[0] == stay_a[1]


def test_with_equal_scores_the_cost_term_keeps_the_last_worker(tmp_path: Path) -> None:
    a = Worker("a", "x/a", description="a generalist", price_in=3.0, price_out=15.0)
    b = Worker("b", "x/b", description="a generalist", price_in=3.0, price_out=15.0)
    init_checkpoint(tmp_path / "ckpt", [a, b])
    router = LearnedRouter.load(tmp_path / "ckpt", backbone=minilm(), cost_weight=1.0)
    msgs = [*_transcript(20)[:-1], Message(role="assistant", content="next", worker="b")]
    assert router.pick(RouteState(msgs, 5, last_worker="b"), [a, b]).worker == "b"
    msgs = [*msgs[:-1], Message(role="assistant", content="next", worker="a")]
    assert router.pick(RouteState(msgs, 5, last_worker="a"), [a, b]).worker == "a"


def test_a_role_checkpoint_names_a_role_with_instructions(tmp_path: Path) -> None:
    pool = [worker("sql"), worker("web")]
    router = _router(tmp_path, pool, roles=True)
    d = router.pick(RouteState(messages=user("add an index"), step=0), pool)
    assert d.role in ROLES
    for role in ROLES:
        assert len(role_instructions(role)) > 100
    assert "ACCEPT" in role_instructions("Verifier")
    assert is_accept("All tests pass.\nACCEPT\n") and not is_accept("I would not ACCEPT this yet")


def _train_on_two_topics(bb: Backbone) -> tuple[SelectionHead, RouterCheckpoint]:
    """Two hundred steps of plain torch: soft targets softmax(reward / τ), KL loss, two known workers.
    τ matters: near one-hot targets (τ = 0.1) push the learned terms until they drown the description match
    that carries over to unseen workers."""
    enc = TranscriptEncoder(bb)
    topics = ("sql", "web")
    x = enc.encode_prompts([p for t in topics for p in prompts(t)])  # [48, H]
    reward = torch.tensor([[1.0, 0.0] if t == "sql" else [0.0, 1.0] for t in topics for _ in prompts(t)])
    known = [worker(t) for t in topics]
    desc = describe(bb, [description_text(w.name, w.description) for w in known])  # [2, H]
    torch.manual_seed(0)
    head = SelectionHead(HeadConfig(hidden=bb.hidden_size, desc_dim=bb.hidden_size, n_known=2))
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    target = torch.softmax(reward / 0.5, dim=1)
    for _ in range(200):
        loss = torch.nn.functional.kl_div(torch.log_softmax(head(x, desc), 1), target, reduction="batchmean")
        opt.zero_grad()
        loss.backward()
        opt.step()
    meta = RouterCheckpoint(
        backbone="minilm",
        workers=tuple(CheckpointWorker(w.name, w.description, w.model) for w in known),
        head={},
        tau=0.5,
        metrics={"train_kl": float(loss.detach())},
    )
    head.eval()
    return head, meta


def test_a_new_worker_wins_the_prompts_matching_its_description(tmp_path: Path) -> None:
    head, meta = _train_on_two_topics(minilm())
    save_checkpoint(tmp_path / "ckpt", head, None, meta)
    router = LearnedRouter.load(tmp_path / "ckpt", backbone=minilm())
    router.encoder.encode_prompts([p for t in ("sql", "web", "shell") for p in prompts(t)])  # one batch
    old = [worker("sql"), worker("web")]
    grown = [*old, worker("shell")]  # the head never saw shell-pro

    def winners(topic: str, pool: list[Worker]) -> list[str]:
        return [router.pick(RouteState(user(p), 0), pool).worker for p in prompts(topic)]

    assert winners("sql", old).count("sql-pro") == 24 and winners("web", old).count("web-pro") == 24
    shell = winners("shell", grown)
    assert shell.count("shell-pro") >= 22, shell
    assert winners("sql", grown).count("sql-pro") >= 22 and winners("web", grown).count("web-pro") >= 22
    gone = router.pick(RouteState(user(prompts("shell")[0]), 0), [grown[0], grown[2]])
    assert set(gone.scores) == {"sql-pro", "shell-pro"} and gone.worker == "shell-pro"


def test_the_choice_follows_the_session_from_step_to_step(tmp_path: Path) -> None:
    pool = [worker("sql"), worker("web")]
    router = _router(tmp_path, pool)
    msgs = [*user("Look at this project and fix what is broken, please.")]
    sql = [
        Message(role="assistant", content="The Postgres query joining orders and customers has no index."),
        Message(
            role="tool", content="ERROR: SQL migration 0042 failed: relation users_email_idx does not exist"
        ),
    ]
    web = [
        Message(role="assistant", content="Now the web page: the React navbar's CSS flexbox layout breaks."),
        Message(role="tool", content="styles.css: .navbar { display: flex } and the HTML button overflows"),
        Message(role="assistant", content="Fixing the CSS media query for phones in the browser."),
    ]
    picks = []
    for m in [*sql, *web]:
        msgs.append(m)
        picks.append(router.pick(RouteState(msgs, len(msgs)), pool).worker)
    assert picks[:2] == ["sql-pro", "sql-pro"] and picks[-1] == "web-pro"


def test_a_batch_of_decisions_is_each_decision_alone_in_one_backbone_call(tmp_path: Path) -> None:
    pool = [worker("sql"), worker("web"), worker("shell")]
    two = pool[:2]
    asks = [
        (RouteState(messages=user("optimise this SQL query"), step=1), pool),
        (RouteState(messages=tuple(_transcript(10)), step=3, last_worker="sql-pro"), pool),
        (RouteState(user("center a div with flexbox"), step=1, excluded=frozenset({"web-pro"})), pool),
        (RouteState(user("hi"), step=1, excluded=frozenset(w.name for w in two)), two),  # nobody left
        (RouteState(messages=user("write a bash loop over files"), step=1), two),
        (RouteState(messages=(Message(role="system", content="only a system message"),), step=1), pool),
    ]
    alone = _router(tmp_path, pool, bias={"sql-pro": 0.3})
    singles: list[RouteDecision | Exception] = []
    for state, p in asks:
        try:
            singles.append(alone.pick(state, p))
        except LookupError as e:
            singles.append(e)
    batched = LearnedRouter.load(tmp_path / "ckpt", backbone=minilm())  # a fresh cache
    bb = CountingBackbone(batched.backbone)
    batched.backbone = batched.encoder.backbone = bb
    together = batched.pick_many(asks)
    assert bb.calls == 1  # every new line of every transcript, and the descriptions, in one forward pass
    assert len(together) == len(asks)
    for single, batch in zip(singles, together, strict=True):
        if isinstance(single, LookupError):
            assert isinstance(batch, LookupError)
            continue
        assert isinstance(batch, RouteDecision) and isinstance(single, RouteDecision)
        assert (batch.worker, batch.source, batch.role, batch.reason) == (
            single.worker,
            single.source,
            single.role,
            single.reason,
        )
        assert batch.scores.keys() == single.scores.keys()
        for name, prob in batch.scores.items():
            assert prob == pytest.approx(single.scores[name], abs=1e-6)
    assert len({d.worker for d in together if not isinstance(d, Exception)}) > 1  # not one answer for all
