"""The selection head: one logit per worker from the session's feature vector, plus optional role logits.

A worker's logit is conditioned on its description embedding, so a worker the head never saw still gets a
sensible score; workers seen in training add a small learned identity term. Imports torch: import lazily.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class HeadConfig:
    hidden: int  # H: size of the session feature vector (the backbone's hidden size)
    desc_dim: int  # D: size of a worker's description embedding (same backbone, so usually == H)
    rank: int = 12  # r: rank of the bilinear map between session and description
    n_roles: int = 0  # 0, or 3 for the Thinker / Worker / Verifier variant
    n_known: int = 0  # K: workers seen in training; they get an identity bias and embedding
    sim_init: float = 5.0  # starting weight of the plain cosine(session, description) term

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HeadConfig:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


class SelectionHead(nn.Module):  # type: ignore[misc]
    """score[b, j] = s·⟨h_b, e_j⟩ + (h_b A)·(e_j B) + v·e_j + [j known] (b_k + (h_b A)·z_k)

    The first three terms read only the description e_j, so they transfer to unseen workers; the cosine term
    gives an untrained head a description-similarity prior. Unknown workers (k = -1) get no identity term.
    """

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.config = config
        h, d, r = config.hidden, config.desc_dim, config.rank
        self.sim = nn.Parameter(torch.tensor(float(config.sim_init) if h == d else 0.0))
        self.A = nn.Parameter(torch.randn(h, r) / h**0.5)  # [H, r]
        self.B = nn.Parameter(torch.randn(d, r) / d**0.5)  # [D, r]
        self.v = nn.Parameter(torch.zeros(d))  # [D] description-only strength
        self.known_bias = nn.Parameter(torch.zeros(config.n_known))  # [K]
        self.known_emb = nn.Parameter(torch.zeros(config.n_known, r))  # [K, r]
        self.roles = nn.Linear(h, config.n_roles) if config.n_roles else None  # [H] -> [3]

    def forward(
        self,
        h: torch.Tensor,  # [B, H] session features
        desc: torch.Tensor,  # [W, D] description embeddings of the pool's workers
        worker_bias: torch.Tensor | None = None,  # [W] added as is (e.g. -inf masks, -λ·cost)
        *,
        known: torch.Tensor | None = None,  # [W] long: index into the known workers, -1 if unseen
    ) -> torch.Tensor:  # [B, W] logits
        hA = h @ self.A  # [B, r]
        logits = (hA @ (desc @ self.B).T) + desc @ self.v  # [B, W]
        if h.shape[1] == desc.shape[1]:
            logits = logits + self.sim * (h @ desc.T)  # [B, W] cosine: both sides are unit vectors
        if self.config.n_known:
            if known is None:  # columns are exactly the known workers, in order
                known = torch.arange(self.config.n_known)
            seen = known >= 0  # [W]
            k = known.clamp(min=0)  # [W]
            ident = self.known_bias[k] + hA @ self.known_emb[k].T  # [B, W]
            logits = logits + ident * seen.to(logits.dtype)
        if worker_bias is not None:
            logits = logits + worker_bias
        return logits

    def role_logits(self, h: torch.Tensor) -> torch.Tensor:  # [B, H] -> [B, 3]
        if self.roles is None:
            raise ValueError("this head has no role logits (n_roles=0)")
        out: torch.Tensor = self.roles(h)
        return out

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
