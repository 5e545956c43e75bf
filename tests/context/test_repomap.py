"""The repo map of a small multi-language repository: tree-sitter definitions, ranking by references and
mentions, the token budget, the mtime cache, and the map's way into a turn (or not, with --no-repo-map)."""

from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from pathlib import Path

import pytest

from fugu_cli.app import build_session
from fugu_cli.context import repomap
from fugu_cli.context.repomap import HEADER, Definition, FileTags, RepoMap, file_scores
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.llm.tokens import CharTokens
from fugu_cli.options import RunOptions
from fugu_cli.types import Message
from tests.helpers import git, make_repo, write_pool

FILES = {
    "py/shapes.py": "class Shape:\n    def area(self) -> float:\n        raise NotImplementedError\n\n"
    "def total_area(shapes):\n    return sum(s.area() for s in shapes)\n",
    "py/main.py": "from shapes import Shape, total_area\nprint(total_area([Shape()]))\n",
    "web/app.ts": "export interface Greeter { greet(name: string): string }\n"
    "export class PoliteGreeter implements Greeter {\n  greet(name: string): string { return name; }\n}\n",
    "web/util.js": "function formatDate(d) { return d.toISOString(); }\n"
    "const shout = (s) => s.toUpperCase();\nmodule.exports = { formatDate, shout };\n",
    "go/server.go": "package server\ntype Server struct { Port int }\n"
    "func NewServer(port int) *Server { return &Server{Port: port} }\n"
    "func (s *Server) Start() error { return nil }\n",
    "rs/lib.rs": "pub struct Parser { pos: usize }\npub trait Tokenize { fn tokens(&self) -> Vec<String>; }\n"
    "impl Parser { pub fn parse_expr(&mut self) -> i64 { 0 } }\n",
    "java/Account.java": "public class Account {\n    private long balance;\n"
    "    public void deposit(long amount) { balance += amount; }\n}\n",
    "c/queue.c": "struct queue { int head; };\n"
    "int queue_push(struct queue *q, int v) { q->head = v; return 0; }\n",
    "c/matrix.cpp": "namespace linalg {\nclass Matrix { public: double det() const; };\n"
    "double Matrix::det() const { return 1.0; }\n}\n",
    "build/generated.py": "def ignored_helper():\n    pass\n",
}


def _repo(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "repo")
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / ".gitignore").write_text("build/\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "code")
    return root


def test_the_map_names_the_key_definitions_of_each_language(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    text = RepoMap(root, tmp_path / "cache", CharTokens()).render([Message("user", "look around")], 4000)
    for name in (
        "class Shape:",
        "def total_area(shapes):",
        "def add(a, b):",
        "export interface Greeter",
        "export class PoliteGreeter",
        "function formatDate(d)",
        "const shout = (s)",
        "func NewServer(port int) *Server",
        "func (s *Server) Start() error",
        "pub struct Parser",
        "pub trait Tokenize",
        "public class Account",
        "public void deposit(long amount)",
        "int queue_push(struct queue *q, int v)",
        "class Matrix",
        "double Matrix::det() const",
    ):
        assert name in text, name
    assert "ignored_helper" not in text and "build/" not in text


def test_mentions_and_references_rank_files_and_the_budget_holds(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    repo = RepoMap(root, tmp_path / "cache", CharTokens())
    about_matrix = repo.render([Message("user", "why is Matrix det wrong in matrix.cpp?")], 60)
    assert about_matrix.splitlines()[1] == "c/matrix.cpp:"
    assert len(about_matrix) // 4 <= 60 and "go/server.go" not in about_matrix
    # shapes.py is referenced by main.py: with nothing mentioned it outranks files nobody uses
    plain = repo.render([Message("user", "look around")], 4000)
    assert plain.index("py/shapes.py:") < plain.index("java/Account.java:")


def test_a_folder_too_large_to_parse_at_once_is_mapped_over_several_maps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parsing stops at its budget (at least one file a map; none here, so one): the files the task names
    first, the rest kept for the next map, and the header says how far it got; what was read is kept."""
    monkeypatch.setattr(repomap, "PARSE_BUDGET_S", 0.0)
    root = _repo(tmp_path)
    repo = RepoMap(root, tmp_path / "cache", CharTokens())
    sources = len(repomap.source_files(root))  # FILES and make_repo's two, not build/ (ignored)
    assert sources == len(FILES) + 1
    first = repo.render([Message("user", "why does server.go not start?")], 4000)
    assert first.splitlines()[:2] == [
        f"{HEADER[:-2]}; 1 of {sources} source files mapped so far, more next turn):",
        "go/server.go:",
    ]
    assert repo.unread == sources - 1 and "shapes.py" not in first
    for done in range(2, sources):
        assert f"; {done} of {sources} source files mapped" in repo.render([Message("user", "go on")], 4000)
    last = repo.render([Message("user", "go on")], 4000)
    assert repo.unread == 0 and last.splitlines()[0] == HEADER
    again = RepoMap(root, tmp_path / "cache", CharTokens())  # a new launch: everything read is kept
    assert again.render([Message("user", "go on")], 4000) == last and again.unread == 0


def test_tags_are_cached_by_mtime(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    cache = tmp_path / "cache"
    RepoMap(root, cache, CharTokens()).tags()
    [stored] = list(cache.glob("*.json"))
    assert "total_area" in stored.read_text()
    (root / "py" / "shapes.py").write_text("def perimeter(shape):\n    return 0\n")
    tags = RepoMap(root, cache, CharTokens()).tags()
    assert [d.name for d in tags["py/shapes.py"].definitions] == ["perimeter"]
    entry = json.loads(stored.read_text())["files"]["py/shapes.py"]
    assert [d[0] for d in entry["defs"]] == ["perimeter"]


def test_the_map_goes_with_the_turn_and_no_repo_map_turns_it_off(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    pool = write_pool(tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo"}])
    for flag, expect in ((None, True), (False, False)):
        llm = ScriptedLLM(["done"])
        opts = RunOptions(cwd=root, pool=str(pool), repo_map=flag)
        build_session(opts, llm=llm).run_turn("fix total_area")
        sent = llm.calls[0].messages
        assert sent[-1].content == "fix total_area"  # the user's words, as typed
        maps = [m for m in sent if m.role == "system" and "Repository map" in (m.content or "")]
        assert bool(maps) is expect
        if expect:
            assert sent[-2] == maps[0] and "def total_area(shapes):" in (maps[0].content or "")


class _Tiktoken(CharTokens):
    """The gpt-4 encoding fugu counts maps with, counting its calls."""

    def __init__(self) -> None:
        from fugu_cli.llm.modelinfo import tiktoken_counter

        found = tiktoken_counter("cl100k_base")
        assert found is not None
        self.exact = found
        self.calls = 0

    def text(self, worker: object, text: str) -> int:
        self.calls += 1
        return int(self.exact(text))


def test_line_counts_fit_the_budget_and_a_second_run_loads_no_tokenizer(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    lines = [f"def f{i}(x, y={i}):\n    return x * {i} + y  # {i}\n" for i in range(300)]
    (root / "py" / "big.py").write_text("".join(lines))
    ask = [Message("user", "look around")]
    for budget in (60, 250, 1000):
        counter = _Tiktoken()
        text = RepoMap(root, tmp_path / f"cache{budget}", counter).render(ask, budget)
        exact = counter.exact(text)
        # within the budget, and not far under it: one token of slack a line is all the bound costs
        assert budget * 0.8 <= exact <= budget, (budget, exact)
        again = _Tiktoken()
        assert RepoMap(root, tmp_path / f"cache{budget}", again).render(ask, budget) == text
        assert again.calls == 0  # every line was counted by the first run
    (root / "py" / "big.py").write_text("def g(x):\n    return x\n")
    changed = _Tiktoken()
    text = RepoMap(root, tmp_path / "cache1000", changed).render(ask, 1000)
    assert "def g(x):" in text and 0 < changed.calls < 10  # only the new lines are counted


def test_a_characters_estimate_is_bounded_too(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "py" / "many.py").write_text("".join(f"def h{i}(): pass\n" for i in range(200)))
    for budget in (40, 150, 600):
        text = RepoMap(root, tmp_path / "cache", CharTokens()).render([Message("user", "hi")], budget)
        assert len(text) // 4 <= budget


def _edge_by_edge_scores(tags: dict[str, FileTags], mentioned: set[str]) -> dict[str, float]:
    """The PageRank as it was computed before names defined in many files became hubs: an edge from a file
    to each other file defining a name it uses (the reference the faster one must agree with)."""
    defined: dict[str, set[str]] = defaultdict(set)
    for path, t in tags.items():
        for d in t.definitions:
            defined[d.name].add(path)
    edges: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for path, t in tags.items():
        for name, count in t.references.items():
            owners = defined.get(name)
            if not owners:
                continue
            weight = (10.0 if name in mentioned else 1.0) * (0.1 if name.startswith("_") else 1.0)
            for owner in owners:
                if owner != path:
                    edges[path][owner] += weight * math.sqrt(count) / len(owners)
    nodes = list(tags)
    named = {n for n in nodes if n in mentioned or Path(n).name in mentioned or Path(n).stem in mentioned}
    base = {n: (10.0 if n in named else 1.0) for n in nodes}
    personal = {n: v / sum(base.values()) for n, v in base.items()}
    rank = dict(personal)
    out = {n: sum(edges[n].values()) for n in nodes if n in edges}
    for _ in range(25):
        nxt = {n: 0.15 * personal[n] for n in nodes}
        dangling = sum(rank[n] for n in nodes if not out.get(n))
        for n in nodes:
            nxt[n] += 0.85 * dangling * personal[n]
        for src, targets in edges.items():
            for dst, w in targets.items():
                nxt[dst] += 0.85 * rank[src] / out[src] * w
        rank = nxt
    return rank


def test_pagerank_through_hubs_is_the_edge_by_edge_one() -> None:
    """Names defined in many files (`__init__`, `Get`) are summed once and shared among their owners rather
    than expanded into an edge to each: the scores must be the edge-by-edge PageRank's, on random
    repositories with such names, files that use what they define, files that use nothing, mentions."""
    rng = random.Random(7)
    for trial in range(20):
        files = [f"pkg{rng.randrange(4)}/mod{i}.py" for i in range(rng.randrange(5, 60))]
        names = [f"name{i}" for i in range(40)] + ["__init__", "_private", "Get"]
        tags = {}
        for path in files:
            defs = tuple(Definition(rng.choice(names), k, "") for k in range(rng.randrange(0, 6)))
            refs = {rng.choice(names): rng.randrange(1, 9) for _ in range(rng.randrange(0, 12))}
            tags[path] = FileTags(path, defs, refs)
        for path in rng.sample(files, len(files) // 2):  # many owners: more than the spread
            tags[path] = FileTags(path, (*tags[path].definitions, Definition("__init__", 1, "")), {"Get": 2})
        mentioned = {"name3", rng.choice(files), Path(rng.choice(files)).name} if trial % 2 else set()
        expected = _edge_by_edge_scores(tags, mentioned)
        scores, _, _ = file_scores(tags, mentioned)
        assert scores.keys() == expected.keys()
        for path, value in expected.items():
            assert math.isclose(scores[path], value, rel_tol=1e-9), (trial, path)
