"""Stage 1 (and 1 → 2) training on data where the right answer is known, and train/serve agreement."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from fugu_cli.router.backbone import load_backbone
from fugu_cli.router.checkpoint import router_scores
from fugu_cli.router.commands import TrainOptions, train_command
from fugu_cli.router.data import load_dataset
from fugu_cli.router.describe import describe_workers
from fugu_cli.router.embed_cache import block_features, blocks_needed, capture_block_inputs, prompt_line
from fugu_cli.router.es import ESConfig
from fugu_cli.router.escalation import EscalationPolicy, ReplayPolicy
from fugu_cli.router.eval_command import EvalOptions, eval_command
from fugu_cli.router.replay import ReplayConfig, ReplayEnv
from fugu_cli.router.svf import apply_svf
from fugu_cli.router.train import TrainConfig, soft_targets
from fugu_cli.router.trainer import Stage2
from tests.ray_kit import RayInstance

COOKING = [
    "bake a sourdough loaf",
    "season a cast iron pan",
    "make a tomato soup",
    "roast a chicken",
    "whisk a vinaigrette",
    "knead pizza dough",
    "caramelise onions",
    "poach an egg",
]
CODE = [
    "fix a python import error",
    "write a unit test for a parser",
    "refactor a rust module",
    "speed up a SQL query",
    "debug a segfault in C",
    "add a CLI flag with argparse",
    "type-annotate a function",
    "resolve a git merge conflict",
]
ASKS = ["How do I {}?", "Explain how to {}.", "Help me {} quickly.", "What is the best way to {}?"]


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def write_two_topics(root: Path) -> Path:
    """Worker "chef" solves every cooking prompt and no coding one; "coder" the reverse. 1 in 4 is test."""
    root.mkdir(parents=True, exist_ok=True)
    rows, prompts = ["pid,part,topic,model,score,cost"], []
    items = [
        (t, a.format(x))
        for t, xs in (("cook", COOKING), ("code", CODE))
        for x, a in itertools.product(xs, ASKS)
    ]
    for i, (topic, text) in enumerate(items):
        part = "test" if i % 4 == 3 else "train"
        rows.append(f"q{i},{part},{topic},chef,{int(topic == 'cook')},0.01")
        rows.append(f"q{i},{part},{topic},coder,{int(topic == 'code')},0.02")
        prompts.append(json.dumps({"pid": f"q{i}", "text": text}))
    (root / "outcomes.csv").write_text("\n".join(rows) + "\n")
    (root / "prompts.jsonl").write_text("\n".join(prompts) + "\n")
    (root / "dataset.toml").write_text(
        'name = "two_topics"\noutcomes = "outcomes.csv"\nprompts = "prompts.jsonl"\nprompt_id = "pid"\n'
        'model = "model"\nscore = "score"\ncost = "cost"\ntask = "topic"\nsplit = "part"\n'
        'prompt_text = "text"\n'
    )
    return root


def small(cache: Path, **kw: object) -> TrainConfig:
    base: dict[str, object] = {
        "epochs": 150,
        "patience": 30,
        "batch_size": 16,
        "lr": 1e-2,
        "svf_prompts": 16,
        "svf_epochs": 1,
        "cache_dir": cache,
        "dev_fraction": 0.15,
        "taus": (0.1,),
    }
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_soft_targets_are_a_tempered_softmax_over_the_measured_workers() -> None:
    p = soft_targets(np.array([[1.0, 0.0], [0.5, 0.5], [np.nan, 0.2]]), tau=0.1)
    assert p.sum(1) == pytest.approx([1.0, 1.0, 1.0])
    assert p[0, 0] == pytest.approx(1 / (1 + np.exp(-10)))
    assert p[1].tolist() == pytest.approx([0.5, 0.5])
    assert p[2].tolist() == [0.0, 1.0]  # an unmeasured worker gets no mass


def test_router_learns_which_worker_wins_which_topic(tmp_path: Path) -> None:
    data = write_two_topics(tmp_path / "two")
    out = tmp_path / "ckpt"
    res = train_command(
        TrainOptions(data, out, stage="sft", config=small(tmp_path / "cache", svf_targets=()))
    )
    assert (out / "router.safetensors").is_file()
    assert res.meta.training["sources"][0]["split"] == "given:test"
    assert [w.name for w in res.meta.workers] == ["chef", "coder"]
    test = load_dataset(data)
    test = test.subset([i for i, s in enumerate(test.splits) if s == "test"])
    scores = router_scores(out, test, cache_dir=tmp_path / "cache")
    accuracy = (scores.choices(0.0) == test.reward.argmax(1)).mean()
    assert accuracy >= 0.9
    report = eval_command(EvalOptions(data, out, cache_dir=tmp_path / "cache", k=3))
    assert report["split"] == "given:test" and report["n_test"] == test.n  # its own held-out part
    assert report["router"]["reward"] >= 0.9 > report["best_single"]["reward"]
    assert json.loads(json.dumps(report))["knn_k"] == 3  # what `--json` prints
    assert report["random"]["reward"] == pytest.approx(0.5) and report["oracle"]["reward"] == 1.0
    assert report["groups"]["all"]["apgr"]["router"] is None  # both workers average 0.5: no gap to recover


def test_svf_block_cache_reproduces_the_full_backbone(tmp_path: Path) -> None:
    backbone = load_backbone("minilm")
    texts = ["How do I bake bread?", "Fix the failing test in parser.py, it raises KeyError", "hi"]
    svf = apply_svf(backbone.model, ["last:1"])
    n = blocks_needed(backbone.model, svf.targets)
    assert n == 1
    batches = capture_block_inputs(backbone, texts, [0, 1, 2], n, batch_size=2)
    lines = [prompt_line(t) for t in texts]
    for offsets in ("zero", "random"):
        if offsets == "random":
            with torch.no_grad():
                for p in svf.parameters():
                    p.normal_(0.0, 0.2)
        full = backbone.encode(lines, max_length=128)
        for b in batches:
            with torch.no_grad():
                assert torch.allclose(block_features(backbone, b, n), full[b.rows], atol=1e-5)


def test_svf_checkpoint_scores_as_the_learned_router_does(tmp_path: Path) -> None:
    from fugu_cli.router.learned import LearnedRouter
    from fugu_cli.types import Message, RouteState, Worker

    data = write_two_topics(tmp_path / "two")
    out = tmp_path / "ckpt"
    cfg = small(tmp_path / "cache", svf_prompts=24, svf_epochs=2, svf_lr=5e-2, epochs=3)
    res = train_command(TrainOptions(data, out, stage="sft", config=cfg))
    assert "dev_kl_svf" in res.meta.metrics and res.meta.svf_targets  # SVF was kept: the check below uses it
    m = load_dataset(data).subset([0, 5])
    assert m.texts is not None
    util = router_scores(out, m, cache_dir=tmp_path / "cache").base
    router = LearnedRouter.load(out, threads=1)
    pool = [Worker(name="chef", model="x/chef"), Worker(name="coder", model="x/coder")]
    for i, text in enumerate(m.texts):
        served = router.utilities(RouteState(messages=[Message(role="user", content=text)], step=0), pool)
        assert served == pytest.approx(util[i], abs=1e-4)


def test_stage_two_searches_the_escalation_policy_and_keeps_it_only_if_dev_improves(tmp_path: Path) -> None:
    data = write_two_topics(tmp_path / "two")
    seen: list[float] = []
    res = train_command(
        TrainOptions(
            data,
            tmp_path / "ckpt",
            stage="both",
            config=small(tmp_path / "cache", svf_targets=()),
            stage2=Stage2(ESConfig(generations=4, processes=1), batch=16),
        ),
        on_generation=lambda s: seen.append(s.incumbent),
    )
    assert len(seen) == 4 and len(res.history) == 4
    metrics = res.meta.metrics
    assert metrics["es_kept"] == (
        metrics["es_dev_after"] > metrics["es_dev_before"]
    )  # a dev tie keeps stage 1's supervised policy
    # each worker solves one topic: one attempt is right half the time, escalating after a failed check
    # (right 9 times in 10) nearly always
    policy = EscalationPolicy.from_json(res.meta.escalation)
    train = load_dataset(data)
    train = train.subset([i for i, s in enumerate(train.splits) if s == "train"])
    env = ReplayEnv(train, ReplayConfig(check_accuracy=0.9, max_attempts=policy.attempts))
    play = ReplayPolicy(policy, np.zeros((train.n, 2)), np.zeros(2), np.array([0.01, 0.02]), 0.0, 3)
    episodes = env.run_batch(play)
    assert episodes.reward.mean() > 0.75 > 0.5 == max(train.reward.mean(axis=0))


def test_descriptions_name_the_tasks_a_worker_is_strong_on(tmp_path: Path) -> None:
    root = write_two_topics(tmp_path / "two")
    (root / "models.csv").write_text("model,name,tags\nchef,Chef Bot 2,Model: chef-2|Org: Kitchen Labs\n")
    m = load_dataset(root)
    chef, coder = describe_workers(m)
    assert chef.description.startswith("Chef Bot 2 by Kitchen Labs")
    assert coder.description.startswith("coder")
    assert "cook" in chef.description and "code" not in chef.description.split("strong on")[-1]
    assert "code" in coder.description.split("strong on")[-1]
    plain = describe_workers(m, tasks=False)  # for routers that must transfer to repositories never seen
    assert all("strong on" not in w.description and "cook" not in w.description for w in plain)


def test_the_shipped_default_checkpoint_knows_the_built_in_pool() -> None:
    from fugu_cli.pool import KNOWN_PROVIDERS
    from fugu_cli.router.checkpoint import load_train_rows, read_meta
    from fugu_cli.router.learned import LearnedRouter
    from fugu_cli.types import Message, RouteState

    ckpt = Path(__file__).resolve().parents[2] / "fugu_cli" / "data" / "router_default"
    assert sum(p.stat().st_size for p in ckpt.iterdir()) < 2_000_000  # package data: head and fingerprints
    meta = read_meta(ckpt)
    sets = {Path(s["path"]).name for s in meta.training["sources"]}
    assert sets >= {
        "swebench_verified_dev",
        "routerbench_subset",
        "routerdc_7b_models",
        "routellm_gpt4_vs_mixtral",
    }
    assert all(s["split"] != "all" for s in meta.training["sources"])  # every set keeps a held-out part
    assert meta.decision.lam == meta.training["lambda"] > 0 and meta.decision.prior
    assert not any(repo in w.description for w in meta.workers for repo in ("django", "sympy", "sphinx"))
    rows = load_train_rows(ckpt)
    assert rows is not None and len(rows[1]) > 10_000
    models = {w.name: w.model for w in meta.workers}
    pool = [w for p in KNOWN_PROVIDERS for w in p.workers if w.name in models]
    assert {w.name for w in pool} >= {"claude-sonnet", "gpt-5", "gpt-5-mini", "gemini-pro"}
    assert all(models[w.name] == w.model for w in pool)
    router = LearnedRouter.load(ckpt, threads=1)
    task = (
        "QuerySet.only() after select_related() crashes on proxy models with a KeyError in django/db/models"
    )
    decision = router.pick(RouteState(messages=[Message(role="user", content=task)], step=0), pool)
    assert decision.worker in {w.name for w in pool} and sum(decision.scores.values()) == pytest.approx(1.0)


def test_stage_es_alone_starts_from_a_fresh_head(tmp_path: Path) -> None:
    data = write_two_topics(tmp_path / "two")
    res = train_command(
        TrainOptions(
            data,
            tmp_path / "ckpt",
            stage="es",
            config=small(tmp_path / "cache"),
            stage2=Stage2(ESConfig(generations=2, processes=1), batch=16),
        )
    )
    assert res.meta.training["stage"] == "es" and not res.meta.svf_targets and len(res.history) == 2


def test_training_on_ray_gives_the_checkpoint_training_here_gives(
    tmp_path: Path, ray_instance: RayInstance
) -> None:
    """The embedding pass and every ES generation's fitness calls run as Ray tasks (`--executor ray`)."""
    data = write_two_topics(tmp_path / "two")
    runs = {}
    for where in ("local", "ray"):
        runs[where] = train_command(
            TrainOptions(
                data,
                tmp_path / where,
                stage="both",
                config=small(tmp_path / f"cache-{where}", svf_targets=(), epochs=40),
                stage2=Stage2(ESConfig(generations=3, processes=1), batch=16),
                executor=where,
            )
        )
    here, there = runs["local"], runs["ray"]
    assert [h.incumbent for h in there.history] == pytest.approx([h.incumbent for h in here.history])
    timeless = [
        {k: v for k, v in r.meta.metrics.items() if not k.endswith("_seconds")} for r in (here, there)
    ]
    assert json.dumps(timeless[1]) == json.dumps(timeless[0])
    assert (tmp_path / "ray" / "router.safetensors").read_bytes() == (
        tmp_path / "local" / "router.safetensors"
    ).read_bytes()


def test_model_selection_holds_out_whole_repositories() -> None:
    from fugu_cli.router.train import selection_folds

    repos = ["django"] * 6 + ["sympy"] * 3 + ["sphinx"] * 2 + [""] * 9  # 9 rows of a set without repos
    folds = selection_folds(len(repos), TrainConfig(select_folds=5), repos)
    assert len(folds) == 3  # one per repository while there are at most k of them
    held_repos = [sorted({repos[i] for i in held} - {""}) for _, held in folds]
    assert sorted(r for rs in held_repos for r in rs) == ["django", "sphinx", "sympy"]
    assert all(len(rs) == 1 for rs in held_repos)  # a repository is never split between folds
    for fit, held in folds:
        assert not set(fit) & set(held) and len(fit) + len(held) == len(repos)
    others = sorted(i for _, held in folds for i in held if repos[i] == "")
    assert others == list(range(11, 20))  # the rows of no repository are spread over the same folds
    plain = selection_folds(20, TrainConfig(select_folds=5))
    assert len(plain) == 5
