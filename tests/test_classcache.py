"""The kept dataclass methods (fugu_cli/classcache.py): classes built from the cache behave exactly as
classes built by compiling, a second run compiles nothing, and a broken or stale cache only costs
compiling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import make_repo

SHAPES = """
import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class Point:
    x: int
    y: int = 0


@dataclass
class Bag:
    name: str
    items: list[int] = field(default_factory=list)
    note: str | None = None


@dataclass(kw_only=True, slots=True)
class Opts:
    depth: int = 3
"""

PROGRAM = """
import dataclasses, inspect, json, sys
from pathlib import Path
from fugu_cli import classcache
classcache.install(Path(sys.argv[1]))
sys.path.insert(0, sys.argv[2])
import shapes
p, q = shapes.Point(1, 2), shapes.Point(1, 3)
a, b = shapes.Bag("a"), shapes.Bag("a")
a.items.append(1)
try:
    p.x = 5
    frozen = "assigned"
except dataclasses.FrozenInstanceError as e:
    frozen = type(e).__name__
codes = getattr(dataclasses, "exec", None)
print(json.dumps({
    "repr": [repr(p), repr(a), repr(b), repr(shapes.Opts())],
    "eq": [p == shapes.Point(1, 2), p == q, a == b, hash(p) == hash(shapes.Point(1, 2))],
    "order": [repr(x) for x in sorted([q, p])],
    "frozen": frozen,
    "signatures": [str(inspect.signature(c)) for c in (shapes.Point, shapes.Bag, shapes.Opts)],
    "annotations": [repr(shapes.Bag.__init__.__annotations__)],
    "compiled": codes.__self__.compiled if codes is not None else None,
}))
"""


def _run(home: Path, shapes: Path, **env: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(home), str(shapes)],
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _kept(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "cache").glob("classes-*/*.marshal"))


def test_classes_from_the_cache_are_the_classes_compiling_builds(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "shapes.py").write_text(SHAPES)
    home = tmp_path / "home"
    stale = home / "cache" / "classes-0.0.1-cpython-311-0000"
    stale.mkdir(parents=True)
    (stale / "shapes.marshal").write_bytes(b"old")

    plain = _run(home, tmp_path / "src", FUGU_CLASS_CACHE="0")
    assert plain["compiled"] is None and _kept(home) == [
        "shapes.marshal"
    ]  # off: nothing kept, nothing removed

    first = _run(home, tmp_path / "src")
    assert first["compiled"] > 0
    assert _kept(home) == ["shapes.marshal"] and not stale.exists()  # kept; the other version's folder gone
    second = _run(home, tmp_path / "src")
    assert second["compiled"] == 0  # every method came from the cache

    for result in (first, second):
        assert {k: v for k, v in result.items() if k != "compiled"} == {
            k: v for k, v in plain.items() if k != "compiled"
        }
    assert plain["frozen"] == "FrozenInstanceError" and plain["eq"] == [True, False, False, True]
    assert plain["annotations"] == [
        "{'name': <class 'str'>, 'items': list[int], 'note': str | None, 'return': None}"
    ]


def test_a_corrupt_cache_is_compiled_again_and_rewritten(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "shapes.py").write_text(SHAPES)
    home = tmp_path / "home"
    first = _run(home, tmp_path / "src")
    (kept,) = (home / "cache").glob("classes-*/shapes.marshal")
    kept.write_bytes(b"\x00not marshal")
    again = _run(home, tmp_path / "src")
    assert again == first  # compiled again, with the same classes
    assert _run(home, tmp_path / "src")["compiled"] == 0  # and kept again


def test_fugu_keeps_its_classes_in_its_home(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    home = Path(os.environ["FUGU_HOME"])
    for _ in range(2):  # started, not forked: the process builds every class it imports itself
        run = subprocess.run(
            [sys.executable, "-m", "fugu_cli", "sessions"], cwd=repo, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
    assert "fugu_cli.marshal" in _kept(home)
