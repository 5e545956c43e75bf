"""Router checkpoints: a directory with `router.safetensors` (head, SVF) and `router.json` (everything else).

Reading the JSON (`read_meta`, `info_text`) needs no torch; saving and loading tensors import it lazily.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fugu_cli.errors import ConfigError
from fugu_cli.types import Worker

if TYPE_CHECKING:
    import torch

    from fugu_cli.router.head import SelectionHead
    from fugu_cli.router.svf import SVFState

TENSORS, META = "router.safetensors", "router.json"
FORMAT = 1


@dataclass(frozen=True)
class CheckpointWorker:
    name: str
    description: str = ""
    model: str | None = None  # litellm id, when known


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
    created: str = ""
    format: int = FORMAT

    @property
    def worker_names(self) -> list[str]:
        return [w.name for w in self.workers]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["workers"] = [asdict(w) for w in self.workers]
        data["svf_targets"] = list(self.svf_targets)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RouterCheckpoint:
        known = set(cls.__dataclass_fields__)
        fields = {k: v for k, v in data.items() if k in known}
        fields["workers"] = tuple(CheckpointWorker(**w) for w in data.get("workers", ()))
        fields["svf_targets"] = tuple(data.get("svf_targets", ()))
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
