"""The data sets a checkpoint trained on, as it records them: where each was, which split it trained on, its
name and a fingerprint of its prompts (so a copy elsewhere is still recognised), and the price table its costs
were estimated from (carried inline: a checkpoint judged elsewhere needs no price file). Never prints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fugu_cli.router.data import RewardMatrix, load_dataset, load_store_outcomes, read_prices

Prices = Mapping[str, tuple[float, float]]


def fingerprint(data: RewardMatrix) -> str:
    """16 hex digits naming a data set's prompts (their ids, in any order)."""
    h = hashlib.blake2b(digest_size=8)
    for pid in sorted(data.prompt_ids):
        h.update(pid.encode() + b"\n")
    return h.hexdigest()


@dataclass(frozen=True)
class Source:
    """One data set a checkpoint trains on, and which part of it (recorded so eval can refit baselines)."""

    path: Path
    split: str | None = None  # None: the data set's own test split if it has one, else kfold:5:0:0
    store: bool = False  # a fugu store (SQLite) rather than a dataset.toml folder
    prices: Path | None = None  # price list for a data set without cost
    price_table: Prices | None = None  # the same, carried by a checkpoint (used when `prices` is None)

    def raw(self) -> RewardMatrix:
        """The data set as read (rows with unmeasured cells kept), costed from prices if it has no cost."""
        if self.store:
            return load_store_outcomes(self.path)
        return load_dataset(self.path, self.prices, price_table=self.price_table)

    def load(self, names: dict[str, str] | None = None) -> RewardMatrix:
        return self.raw().complete().renamed(names or {})

    def table(self) -> Prices | None:
        """The price table: the list's rows, or the one carried."""
        return read_prices(self.prices) if self.prices is not None else self.price_table

    def to_json(self, split: str, data: RewardMatrix | None = None) -> dict[str, Any]:
        """What a checkpoint records; `data` (the data set as read: `raw`) adds its name, fingerprint and
        workers (as the data set names them: a judge skips a set that shares none with what it judges)."""
        table = self.table()
        out: dict[str, Any] = {
            "path": str(self.path.resolve()),
            "split": split,
            "store": self.store,
            "prices": str(self.prices.resolve()) if self.prices else None,
            "price_table": None if table is None else {m: list(p) for m, p in table.items()},
        }
        if data is not None:
            out.update(name=data.name, fingerprint=fingerprint(data), workers=list(data.workers))
        return out

    @classmethod
    def from_json(cls, ref: Mapping[str, Any], split: str | None = None) -> Source:
        """A recorded source; its price table stands in for a price list that is not here."""
        prices = Path(ref["prices"]) if ref.get("prices") else None
        table = ref.get("price_table")
        carried = {m: (float(p[0]), float(p[1])) for m, p in table.items()} if table else None
        if prices is not None and (not prices.is_file() or carried):
            prices = None  # the carried table is what it trained with
        return cls(Path(ref["path"]), split, bool(ref.get("store")), prices, carried)


def recorded(ref: Mapping[str, Any], path: Path, data: RewardMatrix | None) -> bool:
    """Whether the recorded source `ref` is the data set at `path` (loaded as `data`): the same folder, or the
    same name and the same prompts."""
    if Path(ref["path"]) == path.resolve():
        return True
    if data is None or not ref.get("fingerprint"):
        return False
    return bool(ref.get("name") == data.name and ref["fingerprint"] == fingerprint(data))
