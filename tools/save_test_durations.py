"""Keep the last full run's test times in the repository (tests/durations.json), for a fresh clone's order.

tests/conftest.py hands the slowest test files (and the Ray group) out first, by the times pytest's cache
holds; a fresh clone (CI) has none, and takes them from tests/durations.json. After a full `tools/test`, run

    .venv/bin/python tools/save_test_durations.py

to write the tests that took 0.5 s or more (rounded to 0.1 s; the rest count as nothing). Commit it when the
order has changed much: new slow tests, or a slow one made fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".pytest_cache" / "v" / "fugu" / "durations"
OUT = ROOT / "tests" / "durations.json"
FLOOR_S = 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=CACHE, help="the cache entry (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.cache.exists():
        print(f"no test times in {args.cache}: run tools/test first", file=sys.stderr)
        return 2
    times: dict[str, float] = json.loads(args.cache.read_text("utf-8"))
    here = {node: round(t, 1) for node, t in sorted(times.items()) if t >= FLOOR_S and _exists(node)}
    args.out.write_text(json.dumps(here, indent=0) + "\n", "utf-8")
    print(f"{args.out}: {len(here)} of {len(times)} tests, {sum(here.values()):.0f} s")
    return 0


def _exists(node: str) -> bool:
    """Whether the test's file is still there (the cache keeps the times of deleted and renamed ones)."""
    return (ROOT / node.split("::", 1)[0]).exists()


if __name__ == "__main__":
    raise SystemExit(main())
