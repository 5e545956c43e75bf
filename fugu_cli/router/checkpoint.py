"""Router checkpoints: a directory with `router.safetensors` (head, SVF), `router.json` (everything else) and
`train_rows.npz` (fingerprints of the rows it trained on); and `router_scores`, a checkpoint's `Scores` on a
data set, computed exactly as `LearnedRouter` scores a one-message transcript.

Reading the JSON (`read_meta`, `info_text`) needs no torch; tensors and scoring import it lazily.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fugu_cli.errors import ConfigError, UsageError
from fugu_cli.router.calibrate import shrink_at
from fugu_cli.router.data import RewardMatrix, id_key, mean_costs, text_key
from fugu_cli.router.objective import Scores
from fugu_cli.types import Worker

if TYPE_CHECKING:
    import torch

    from fugu_cli.router.backbone import Backbone
    from fugu_cli.router.head import SelectionHead
    from fugu_cli.router.svf import SVFState

TENSORS, META, ROWS = "router.safetensors", "router.json", "train_rows.npz"
FORMAT = 2


@dataclass(frozen=True)
class CheckpointWorker:
    name: str
    description: str = ""
    model: str | None = None  # litellm id, when known


@dataclass(frozen=True)
class Decision:
    """How the head's scores become a choice, the same in `fugu router eval` and in a session:

        utility_j(λ) = prior_j + s_j(λ) · (τ · log q_j − centre_j) − (λ − lam) · cost_j

    log q is the head's log-softmax over the candidates, centred per prompt; τ·log q estimates normalised
    reward − lam·USD up to a constant per prompt. `prior` is each known worker's mean utility at `lam` on the
    training data, `centre` the head's mean centred estimate there, and s_j(λ) (calibrate.py) how far
    per-prompt evidence may move a choice from the best single worker for the budget: from the shrinks of
    the worker's group (`worker_group`, `group_shrinks`: the workers of one data set), else `shrinks`.
    Unseen workers get the mean prior, no centre and `shrinks`. `lam` is the λ it was trained at (reward per
    USD); `mean_cost` each known worker's mean USD per prompt in training. No prior at all: the raw head."""

    lam: float = 0.0
    tau: float = 1.0
    prior: tuple[float, ...] = ()
    centre: tuple[float, ...] = ()
    shrinks: tuple[tuple[float, float], ...] = ((0.0, 1.0),)
    mean_cost: tuple[float, ...] = ()
    group_shrinks: tuple[tuple[tuple[float, float], ...], ...] = ()
    worker_group: tuple[int, ...] = ()

    def tables(self, known: np.ndarray) -> tuple[tuple[tuple[float, float], ...], ...]:
        """[W] the shrink table of each column's worker."""
        out = []
        for k in known:
            g = self.worker_group[k] if 0 <= k < len(self.worker_group) else -1
            out.append(self.group_shrinks[g] if 0 <= g < len(self.group_shrinks) else self.shrinks)
        return tuple(out)

    def shrink(self, known: np.ndarray, lam: float | None = None) -> np.ndarray:
        """[W] s_j(λ) (default λ: the checkpoint's own)."""
        at = self.lam if lam is None else lam
        return np.array([shrink_at(t, at) for t in self.tables(known)])

    def deviation(self, logp: np.ndarray, known: np.ndarray) -> np.ndarray:
        """[N, W] τ·log q centred per prompt, minus the known workers' training mean."""
        est = self.tau * (logp - logp.mean(axis=1, keepdims=True))
        return np.asarray(est - _take(self.centre, known, 0.0)[None, :])

    def base(self, logp: np.ndarray, known: np.ndarray, lam: float | None = None) -> np.ndarray:
        """[N, W] utility at `lam` before the cost shift, with the shrink of λ (default: the checkpoint's).
        `known` [W]: index of each column's worker in the checkpoint, -1 for a worker it never saw."""
        prior = _take(self.prior, known, float(np.mean(self.prior)) if self.prior else 0.0)
        return np.asarray(prior[None, :] + self.shrink(known, lam)[None, :] * self.deviation(logp, known))

    def costs(self, known: np.ndarray, fallback: np.ndarray) -> np.ndarray:
        """[W] USD each column's worker is expected to spend: its training mean if known, else `fallback`."""
        return (
            np.where(known >= 0, _take(self.mean_cost, known, 0.0), fallback) if self.mean_cost else fallback
        )

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(prior=list(self.prior), centre=list(self.centre), mean_cost=list(self.mean_cost))
        out["shrinks"] = [list(x) for x in self.shrinks]
        out["group_shrinks"] = [[list(x) for x in t] for t in self.group_shrinks]
        out["worker_group"] = list(self.worker_group)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        return cls(
            lam=float(data.get("lam", 0.0)),
            tau=float(data.get("tau", 1.0)),
            prior=tuple(float(b) for b in data.get("prior", ())),
            centre=tuple(float(b) for b in data.get("centre", ())),
            shrinks=tuple((float(a), float(b)) for a, b in data.get("shrinks", ((0.0, 1.0),))),
            mean_cost=tuple(float(c) for c in data.get("mean_cost", ())),
            group_shrinks=tuple(
                tuple((float(a), float(b)) for a, b in t) for t in data.get("group_shrinks", ())
            ),
            worker_group=tuple(int(g) for g in data.get("worker_group", ())),
        )


def _take(values: Sequence[float], known: np.ndarray, missing: float) -> np.ndarray:
    """values[k] for each column's known index k, `missing` for unseen workers (or no values at all)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return np.full(len(known), missing)
    return np.asarray(np.where(known >= 0, v[np.clip(known, 0, None)], missing))


@dataclass(frozen=True)
class RouterCheckpoint:
    """Everything but the tensors. `workers` are the head's known workers, in the order of its rows."""

    backbone: str
    workers: tuple[CheckpointWorker, ...]
    head: Mapping[str, Any]  # HeadConfig.to_json()
    roles: bool = False
    svf_targets: tuple[str, ...] = ()
    tau: float | None = None
    features: str = "task-recent-last/v1"
    max_tokens: int = 128  # user messages and descriptions
    step_tokens: int = 64  # assistant and tool messages
    training: Mapping[str, Any] = field(default_factory=dict)  # data it was trained on, settings
    metrics: Mapping[str, Any] = field(default_factory=dict)
    decision: Decision = field(default_factory=Decision)
    escalation: Mapping[str, Any] = field(default_factory=dict)  # EscalationPolicy.to_json(); {}: none
    created: str = ""
    format: int = FORMAT

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["workers"] = [asdict(w) for w in self.workers]
        data["svf_targets"] = list(self.svf_targets)
        data["decision"] = self.decision.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RouterCheckpoint:
        known = set(cls.__dataclass_fields__)
        fields = {k: v for k, v in data.items() if k in known}
        fields["workers"] = tuple(CheckpointWorker(**w) for w in data.get("workers", ()))
        fields["svf_targets"] = tuple(data.get("svf_targets", ()))
        # format 1 had no decision: the raw head at λ = 0, its τ·log q in units of its reward scale
        scale = float(data.get("training", {}).get("reward_scale", 1.0))
        old = Decision(tau=float(data.get("tau") or 1.0) * scale)
        fields["decision"] = Decision.from_json(data["decision"]) if "decision" in data else old
        return cls(**fields)


def save_checkpoint(
    directory: Path,
    head: SelectionHead,
    svf: SVFState | Mapping[str, torch.Tensor] | None,
    meta: RouterCheckpoint,
) -> RouterCheckpoint:
    """Write the checkpoint; the JSON's head config, roles and SVF targets come from the tensors given."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    if svf is None:
        svf_tensors: dict[str, torch.Tensor] = {}
    elif isinstance(svf, Mapping):
        svf_tensors = dict(svf)
    else:
        svf_tensors = svf.state_dict()
    tensors = {f"head.{k}": v.detach().contiguous() for k, v in head.state_dict().items()}
    tensors.update({f"svf.{k}": v.detach().contiguous() for k, v in svf_tensors.items()})
    meta = replace(
        meta,
        head=head.config.to_json(),
        roles=head.config.n_roles > 0,
        svf_targets=tuple(svf_tensors),
        created=meta.created or datetime.now(UTC).isoformat(timespec="seconds"),
    )
    save_file(tensors, str(directory / TENSORS))
    (directory / META).write_text(json.dumps(meta.to_json(), indent=2) + "\n")
    return meta


def read_meta(directory: Path) -> RouterCheckpoint:
    path = Path(directory) / META
    try:
        return RouterCheckpoint.from_json(json.loads(path.read_text()))
    except FileNotFoundError as exc:
        raise ConfigError(
            f"{directory} is not a router checkpoint: {META} is missing. "
            "Train one with `fugu router train --data DIR`, or drop --router to use the prior."
        ) from exc
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{path} is not a valid router checkpoint: {exc}") from exc


def load_checkpoint(
    directory: Path,
) -> tuple[RouterCheckpoint, dict[str, torch.Tensor], dict[str, torch.Tensor] | None]:
    """(meta, head state dict, SVF offsets by module name or None)."""
    from safetensors.torch import load_file

    meta = read_meta(directory)
    path = Path(directory) / TENSORS
    if not path.exists():
        raise ConfigError(f"{directory} is not a router checkpoint: {TENSORS} is missing.")
    tensors = load_file(str(path))
    head = {k[5:]: v for k, v in tensors.items() if k.startswith("head.")}
    svf = {k[4:]: v for k, v in tensors.items() if k.startswith("svf.")}
    return meta, head, svf or None


def build_head(meta: RouterCheckpoint, state: Mapping[str, torch.Tensor]) -> SelectionHead:
    """The head described by `meta`, with `state` loaded, in eval mode."""
    from fugu_cli.router.head import HeadConfig, SelectionHead

    head = SelectionHead(HeadConfig.from_json(dict(meta.head)))
    head.load_state_dict(dict(state))
    head.eval()
    return head


def init_checkpoint(
    directory: Path,
    workers: Sequence[Worker | CheckpointWorker],
    *,
    backbone: str = "minilm",
    roles: bool = False,
    bias: Mapping[str, float] | None = None,
    rank: int = 12,
    seed: int = 0,
) -> RouterCheckpoint:
    """An untrained checkpoint: description similarity plus an optional fixed logit `bias` per worker name.
    For tests and for trying `fugu --router` before any training."""
    import torch

    from fugu_cli.router.backbone import hidden_size_of
    from fugu_cli.router.head import HeadConfig, SelectionHead

    hidden = hidden_size_of(backbone)
    torch.manual_seed(seed)
    n_roles = 3 if roles else 0
    head = SelectionHead(HeadConfig(hidden, hidden, rank=rank, n_roles=n_roles, n_known=len(workers)))
    with torch.no_grad():
        head.A.zero_()  # no learned interaction yet: scores are similarity + bias only
        for i, w in enumerate(workers):
            head.known_bias[i] = float((bias or {}).get(w.name, 0.0))
    meta = RouterCheckpoint(
        backbone=backbone,
        workers=tuple(CheckpointWorker(w.name, w.description, getattr(w, "model", None)) for w in workers),
        head={},
        training={"kind": "untrained", "seed": seed},
    )
    return save_checkpoint(directory, head, None, meta)


def info_text(directory: Path) -> str:
    """What `fugu router info CKPT` prints."""
    meta = read_meta(directory)
    head = dict(meta.head)
    lines = [
        f"router checkpoint {directory}",
        f"  backbone     {meta.backbone}  (features {meta.features}; tokens a message: "
        f"{meta.max_tokens} user, {meta.step_tokens} assistant/tool)",
        f"  head         hidden {head.get('hidden')}, rank {head.get('rank')}, "
        f"{head.get('n_known', 0)} known workers, roles {'yes' if meta.roles else 'no'}",
        f"  svf targets  {', '.join(meta.svf_targets) or 'none'}",
        f"  tau          {meta.tau if meta.tau is not None else '-'}",
        f"  lambda       {meta.decision.lam:g} (reward per USD; a session's --cost-weight is the same unit)",
        f"  decision     {'raw head' if not meta.decision.prior else 'prior + shrunk head'}; shrink by λ "
        + "; ".join(
            ", ".join(f"{lam:g}: {s:g}" for lam, s in t)
            for t in (*meta.decision.group_shrinks, meta.decision.shrinks)
        ),
        f"  escalation   {_escalation_text(meta)}",
        f"  created      {meta.created or '-'}",
        "  workers",
    ]
    for w in meta.workers:
        model = f" ({w.model})" if w.model else ""
        lines.append(f"    {w.name}{model}: {w.description or '(no description)'}")
    for title, block in (("training", meta.training), ("metrics", meta.metrics)):
        lines.append(f"  {title}")
        lines += [f"    {k}: {json.dumps(v, default=str)}" for k, v in block.items()] or ["    -"]
    return "\n".join(lines)


def _escalation_text(meta: RouterCheckpoint) -> str:
    e = meta.escalation
    if not e:
        return "none (escalate takes the best utility that has not tried)"
    kept = meta.metrics.get("es_kept")
    how = "searched by sep-CMA-ES" if kept else "supervised"
    how += " (stage 2 not kept)" if kept is False else ""
    return (
        f"{len(e['value'])} attempts, assumes a check right {float(e['check_accuracy']):.0%} of the time; "
        f"{how}; stop margins {', '.join(f'{s:.3g}' for s in e['stop'])}, lookahead {float(e['look']):.3g}"
    )


def save_train_rows(directory: Path, data: RewardMatrix) -> None:
    """Fingerprints (problem id, text) of every row the checkpoint trained on, so eval can refuse them."""
    ids = np.array(sorted({int(id_key(p), 16) for p in data.prompt_ids}), dtype=np.uint64)
    texts = np.array(sorted({int(text_key(t), 16) for t in data.texts or ()}), dtype=np.uint64)
    np.savez_compressed(Path(directory) / ROWS, ids=ids, texts=texts)


def load_train_rows(directory: Path) -> tuple[set[str], set[str]] | None:
    """(id keys, text keys) of the rows a checkpoint trained on; None when it recorded none."""
    path = Path(directory) / ROWS
    if not path.is_file():
        return None
    with np.load(path) as z:
        return ({f"{int(v):016x}" for v in z["ids"]}, {f"{int(v):016x}" for v in z["texts"]})


def known_index(meta: RouterCheckpoint, workers: Sequence[str]) -> np.ndarray:
    """[W] each worker's index among the checkpoint's known workers (by name), −1 for one it never saw."""
    index = {w.name: i for i, w in enumerate(meta.workers)}
    return np.array([index.get(w, -1) for w in workers], dtype=np.int64)


def router_scores(
    checkpoint: Path,
    data: RewardMatrix,
    *,
    backbone: Backbone | None = None,
    cache_dir: Path | None = None,
    threads: int | None = None,
) -> Scores:
    """The checkpoint's `Scores` on `data`: each prompt as a one-message transcript, scored with the full
    backbone (SVF offsets applied: a `backbone` passed in is changed in place) and the checkpoint's
    `Decision`, exactly as LearnedRouter scores it. Workers the checkpoint never saw are scored from their
    names and expected to cost what they cost in `data`."""
    import hashlib

    import torch

    from fugu_cli.router.backbone import load_backbone
    from fugu_cli.router.embed_cache import encode_prompts
    from fugu_cli.router.features import description_embeddings
    from fugu_cli.router.svf import apply_svf

    if data.texts is None:
        raise UsageError(f"{data.name} has no prompt text: a text router cannot be judged on it.")
    meta, head_state, svf_state = load_checkpoint(checkpoint)
    backbone = backbone or load_backbone(meta.backbone, threads=threads)
    variant = ""
    if svf_state:
        apply_svf(backbone.model, list(svf_state)).load_state_dict(svf_state)
        digest = hashlib.sha256()
        for name in sorted(svf_state):
            digest.update(name.encode() + svf_state[name].numpy().tobytes())
        variant = "svf-" + digest.hexdigest()[:16]
    head = build_head(meta, head_state)
    feats = encode_prompts(
        backbone, data.texts, max_tokens=meta.max_tokens, cache_dir=cache_dir, variant=variant
    )
    known = known_index(meta, data.workers)
    cols = [
        meta.workers[k] if k >= 0 else CheckpointWorker(w) for w, k in zip(data.workers, known, strict=True)
    ]
    with torch.no_grad():
        desc = description_embeddings(backbone, cols, meta.max_tokens)
        logits = head(torch.from_numpy(feats), desc, known=torch.from_numpy(known).long())
        logp = torch.log_softmax(logits, dim=-1).double().numpy()
    d = meta.decision
    cost = d.costs(known, mean_costs(data))
    # a worker the checkpoint never saw was not charged λ_ckpt by its head: charge it here, as sessions do
    base = d.base(logp, known) - np.where(known >= 0, 0.0, d.lam * cost)[None, :]
    tie = _take(d.prior, known, float(np.mean(d.prior)) if d.prior else 0.0)
    return Scores(base, cost, d.lam, tie, head=d.deviation(logp, known), shrinks=d.tables(known))
