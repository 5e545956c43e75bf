"""The repo map: definitions and references from tree-sitter, files ranked by who references whom and by
what the task and transcript mention, rendered into a token budget (each definition as its first line).

The only module that imports tree-sitter (lazily: the core and one grammar package per language, e.g.
`tree-sitter-python`; each ships its compiled grammar, so nothing is downloaded). Tags are cached per file
by mtime and size under FUGU_HOME, and the token counts of the map's lines beside them. Never prints; a file
that cannot be parsed is left out.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fugu_cli.llm.tokens import TokenCounter, at_most
from fugu_cli.types import Message

CACHE_VERSION = 1
MAX_FILES = 5_000
MAX_FILE_BYTES = 512 * 1024
MAX_COUNTED_LINES = 20_000  # map lines whose token counts are kept per repository
# parsing per map: a folder of thousands of files not read before is mapped over several turns, not in one
# launch (5,000 Python files took 30 s); what is read is kept, so each map reads on from there
PARSE_BUDGET_S = 2.0
MENTION_WINDOW = 30  # newest messages whose words count as mentions
HEADER = "Repository map (the most relevant definitions, ranked; read a file for the rest):"

LANGUAGES: dict[str, str] = {
    ".py": "python",
    ".js": "javascript",
    ".jsx": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".hxx": "cpp",
}

_JS = {
    "function_declaration",
    "generator_function_declaration",
    "class_declaration",
    "method_definition",
    "variable_declarator",
}
_TS = _JS | {
    "interface_declaration",
    "type_alias_declaration",
    "enum_declaration",
    "abstract_class_declaration",
    "function_signature",
}
_C = {"function_definition", "struct_specifier", "enum_specifier", "union_specifier", "type_definition"}
DEFINITIONS: dict[str, set[str]] = {
    "python": {"function_definition", "class_definition"},
    "javascript": _JS,
    "typescript": _TS,
    "tsx": _TS,
    "go": {"function_declaration", "method_declaration", "type_spec"},
    "rust": {
        "function_item",
        "function_signature_item",
        "struct_item",
        "enum_item",
        "union_item",
        "trait_item",
        "mod_item",
        "const_item",
        "static_item",
        "type_item",
        "macro_definition",
    },
    "java": {
        "class_declaration",
        "interface_declaration",
        "enum_declaration",
        "record_declaration",
        "method_declaration",
        "constructor_declaration",
    },
    "c": _C | {"declaration"},
    "cpp": _C | {"declaration", "class_specifier", "namespace_definition"},
}
REFERENCES = {
    "identifier",
    "type_identifier",
    "field_identifier",
    "property_identifier",
    "shorthand_property_identifier",
    "namespace_identifier",
    "constant",
}
_FUNCTION_VALUES = {"arrow_function", "function_expression", "function", "class", "generator_function"}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")


@dataclass(frozen=True)
class Definition:
    name: str
    line: int  # 1-based
    text: str  # the definition's first line, trimmed


@dataclass(frozen=True)
class FileTags:
    path: str
    definitions: tuple[Definition, ...]
    references: dict[str, int]


class RepoMap:
    """The map of one repository. `render` is what a turn gets; `tags` what it is built from."""

    def __init__(self, root: Path, cache_dir: Path, counter: TokenCounter) -> None:
        self.root = root
        self.counter = counter
        key = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:16]
        self.cache_path = cache_dir / f"{key}.json"
        self.counts = LineCounts(cache_dir / f"{key}.counts", counter)  # read once, kept for every turn
        self.unread = 0  # source files the last map left to read (past its parsing budget)

    def render(self, messages: Sequence[Message], budget: int) -> str:
        """The map for a transcript within `budget` tokens ('' when no file has a definition). Where files
        are left to read (`unread`), the header says how many are mapped so far."""
        mentioned = mentions(messages)
        tags = self.tags(mentioned)
        ranked = rank(tags, mentioned)
        if not ranked:
            return ""
        header = HEADER
        if self.unread:
            done = len(tags) + self.unread
            header = f"{HEADER[:-2]}; {len(tags):,} of {done:,} source files mapped so far, more next turn):"
        counts = self.counts
        lo, hi, best = 1, len(ranked), ""
        while lo <= hi:  # the most definitions that fit
            mid = (lo + hi) // 2
            lines = _lines(ranked[:mid], header)
            text = "\n".join(lines)
            if at_most(text) <= budget or counts.bound(lines) <= budget:  # no tokenizer if plain
                best, lo = text, mid + 1
            else:
                hi = mid - 1
        counts.save()
        return best

    def tags(self, first: Collection[str] = ()) -> dict[str, FileTags]:
        """Definitions and references of every source file git knows (tracked or not ignored). Files not
        read before (or changed since) are parsed for at most `PARSE_BUDGET_S` (at least one), those that
        `first` names (mentions) first; the rest are left for the next map (`unread` says how many)."""
        cache = self._load_cache()
        fresh: dict[str, Any] = {}
        pending: list[tuple[str, Path, list[int]]] = []
        names = source_files(self.root)
        for rel in names:
            path = self.root / rel
            try:
                st = path.stat()
            except OSError:
                continue
            if st.st_size > MAX_FILE_BYTES:
                continue
            stamp = [st.st_mtime_ns, st.st_size]
            entry = cache.get(rel)
            if entry is None or entry.get("stamp") != stamp:
                pending.append((rel, path, stamp))
            else:
                fresh[rel] = entry
        named = set(first)
        pending.sort(key=lambda p: not _mentioned_file(p[0], named))  # stable: the rest in git's order
        deadline = time.monotonic() + PARSE_BUDGET_S
        self.unread = 0
        for i, (rel, path, stamp) in enumerate(pending):
            if i and time.monotonic() > deadline:
                self.unread = len(pending) - i
                break
            found = parse_file(path, LANGUAGES[Path(rel).suffix.lower()])
            if found is not None:
                defs, refs = found
                fresh[rel] = {"stamp": stamp, "defs": [[d.name, d.line, d.text] for d in defs], "refs": refs}
        if fresh != cache:
            self._save_cache(fresh)
        return {
            rel: FileTags(rel, tuple(Definition(*d) for d in entry["defs"]), dict(entry["refs"]))
            for rel in names
            if (entry := fresh.get(rel)) is not None
        }

    def _load_cache(self) -> dict[str, Any]:
        try:
            data = json.loads(self.cache_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return {}
        files = data.get("files")
        return files if isinstance(files, dict) else {}

    def _save_cache(self, files: dict[str, Any]) -> None:
        try:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": CACHE_VERSION, "files": files}), encoding="utf-8")
            tmp.replace(self.cache_path)
        except OSError:
            pass  # no cache this time: the map is still right, only slower next turn


def source_files(root: Path) -> list[str]:
    """Source files in languages the map reads, among the files glob and grep see (git's tracked and
    untracked-but-not-ignored files through the hardened git, else a walk that honours .gitignore)."""
    from fugu_cli.tools.listing import visible_files

    names = visible_files(root)
    return [n for n in names if Path(n).suffix.lower() in LANGUAGES][:MAX_FILES]


def parse_file(path: Path, language: str) -> tuple[list[Definition], dict[str, int]] | None:
    """Definitions and reference counts of one file; None when it cannot be read or parsed."""
    try:
        source = path.read_bytes()
        tree = _parser(language).parse(source)
    except Exception:
        return None
    kinds = DEFINITIONS[language]
    lines = source.decode("utf-8", "replace").splitlines()
    defs: list[Definition] = []
    names: set[tuple[int, int]] = set()
    refs: Counter[str] = Counter()
    for node in _nodes(tree.root_node):
        if node.type in kinds:
            name = _definition_name(node, language)
            if name is not None and name.text:
                row = node.start_point[0]
                text = lines[row].strip()[:120] if row < len(lines) else ""
                defs.append(Definition(name.text.decode("utf-8", "replace"), row + 1, text))
                names.add((name.start_byte, name.end_byte))
        elif (
            node.type in REFERENCES
            and node.child_count == 0
            and node.text
            and (node.start_byte, node.end_byte) not in names
        ):
            refs[node.text.decode("utf-8", "replace")] += 1
    return defs, dict(refs)


# the grammar package and the function in it that gives each language (typescript's package holds tsx too)
GRAMMARS: dict[str, tuple[str, str]] = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "java": ("tree_sitter_java", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
}


@functools.cache
def _language(language: str) -> Any:
    import importlib

    from tree_sitter import Language

    module, function = GRAMMARS[language]
    return Language(getattr(importlib.import_module(module), function)())


def _parser(language: str) -> Any:
    """A parser for `language` (one per call: a tree-sitter parser is not shared between threads)."""
    from tree_sitter import Parser

    return Parser(_language(language))


def _nodes(root: Any) -> Iterator[Any]:
    """Every node, depth first, parents before children (a definition's name is seen before it is counted)."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


def _definition_name(node: Any, language: str) -> Any:
    if node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        return (
            node.child_by_field_name("name") if value is not None and value.type in _FUNCTION_VALUES else None
        )
    if language in ("c", "cpp") and node.type in ("function_definition", "declaration", "type_definition"):
        return _declarator_name(node, function_only=node.type == "declaration")
    if node.type in ("struct_specifier", "enum_specifier", "union_specifier", "class_specifier"):
        return node.child_by_field_name("name") if node.child_by_field_name("body") is not None else None
    return node.child_by_field_name("name")


def _declarator_name(node: Any, function_only: bool) -> Any:
    seen_function = False
    current = node.child_by_field_name("declarator")
    while current is not None and current.child_by_field_name("declarator") is not None:
        seen_function = seen_function or current.type == "function_declarator"
        current = current.child_by_field_name("declarator")
    if current is None or (function_only and not seen_function):
        return None
    while current.type == "qualified_identifier" and current.child_by_field_name("name") is not None:
        current = current.child_by_field_name("name")
    return current


def mentions(messages: Sequence[Message]) -> set[str]:
    """Words of the task and of the newest messages (paths and identifiers the conversation is about)."""
    chosen = [m for m in messages if m.role == "user"][:1] + list(messages[-MENTION_WINDOW:])
    words: set[str] = set()
    for m in chosen:
        if m.role == "system":
            continue
        text = (m.content or "")[:20_000] + " ".join(t.arguments[:2_000] for t in m.tool_calls)
        words.update(_WORD.findall(text))
        words.update(w for w in re.findall(r"[\w./-]+\.\w+", text))
    return words


def rank(tags: dict[str, FileTags], mentioned: set[str]) -> list[tuple[str, Definition]]:
    """(file, definition) pairs, most relevant first: a PageRank over "file A uses a name file B defines",
    personalised towards files the conversation names, then each definition by how much it is used."""
    scores, weights, used = file_scores(tags, mentioned)
    pairs = [
        (scores[p] * weights[d.name] * math.log(2 + used[d.name]), p, d)
        for p, t in tags.items()
        for d in t.definitions
    ]
    pairs.sort(key=lambda x: (-x[0], x[1], x[2].line))
    return [(p, d) for _, p, d in pairs]


def file_scores(
    tags: dict[str, FileTags], mentioned: set[str]
) -> tuple[dict[str, float], dict[str, float], Counter[str]]:
    """Each file's PageRank; each defined name's weight (mentioned, private) and how often it is used."""
    owners_of: dict[str, dict[str, None]] = defaultdict(dict)  # name -> the files defining it, in order
    for path, t in tags.items():
        for d in t.definitions:
            owners_of[d.name][path] = None
    weights = {name: _name_weight(name, mentioned) for name in owners_of}
    used: Counter[str] = Counter()
    graph = _Graph()
    for path, t in tags.items():
        for name, n in t.references.items():
            owners = owners_of.get(name)
            if not owners:
                continue
            used[name] += n
            graph.refer(path, owners, name, weights[name] * math.sqrt(n) / len(owners))
    scores = graph.pagerank(list(tags), {p for p in tags if _mentioned_file(p, mentioned)})
    return scores, weights, used


def _name_weight(name: str, mentioned: set[str]) -> float:
    weight = 10.0 if name in mentioned else 1.0
    return weight * (0.1 if name.startswith("_") else 1.0)


def _mentioned_file(path: str, mentioned: set[str]) -> bool:
    return path in mentioned or Path(path).name in mentioned or Path(path).stem in mentioned


# a name defined in more files than this is not expanded into an edge to each of them: what flows to it is
# summed once and shared among its owners (in a repository of thousands of files, `__init__` or `Get` are
# defined in hundreds, and the edges one file to each owner were millions: 10 s of PageRank, now 1)
_SPREAD = 4


class _Graph:
    """Who uses whom: an edge from a file to each file that defines a name it uses, weighted, with no edge
    from a file to itself. Names defined in many files are kept as hubs (their users, and the weight each
    sends to every owner), which gives the same PageRank with work in their users plus their owners, not
    in their product."""

    def __init__(self) -> None:
        self.edges: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.hubs: dict[str, tuple[Sequence[str], list[tuple[str, float]]]] = {}
        self.out: dict[str, float] = defaultdict(float)  # each file's weight out, over all its edges

    def refer(self, path: str, owners: dict[str, None], name: str, weight: float) -> None:
        """`path` uses `name`, defined in `owners`: `weight` to each owner but itself."""
        others = len(owners) - (path in owners)
        if not others:
            return
        self.out[path] += weight * others
        if len(owners) > _SPREAD:
            hub = self.hubs.get(name)
            if hub is None:  # its owners listed once, not again for each file that uses it
                hub = self.hubs[name] = (list(owners), [])
            hub[1].append((path, weight))
            return
        for owner in owners:
            if owner != path:
                self.edges[path][owner] += weight

    def pagerank(self, nodes: list[str], favoured: set[str], rounds: int = 25) -> dict[str, float]:
        if not nodes:
            return {}
        base = {n: (10.0 if n in favoured else 1.0) for n in nodes}
        total = sum(base.values())
        personal = {n: v / total for n, v in base.items()}
        rank_ = dict(personal)
        out = self.out
        dangling_nodes = [n for n in nodes if not out.get(n)]
        for _ in range(rounds):
            dangling = sum(rank_[n] for n in dangling_nodes)
            nxt = {n: (0.15 + 0.85 * dangling) * personal[n] for n in nodes}
            for src, targets in self.edges.items():
                share = 0.85 * rank_[src] / out[src]
                for dst, w in targets.items():
                    nxt[dst] += share * w
            for owners, users in self.hubs.values():
                sent = {src: 0.85 * rank_[src] / out[src] * w for src, w in users}
                flow = sum(sent.values())
                for owner in owners:
                    nxt[owner] += flow - sent.get(owner, 0.0)  # an owner that uses the name sends itself none
            rank_ = nxt
        return rank_


def _lines(pairs: Sequence[tuple[str, Definition]], header: str = HEADER) -> list[str]:
    by_file: dict[str, list[Definition]] = defaultdict(list)
    order: list[str] = []
    for path, d in pairs:
        if path not in by_file:
            order.append(path)
        by_file[path].append(d)
    lines = [header]
    for path in order:
        lines.append(f"{path}:")
        rows = sorted({d.line: d for d in by_file[path]}.values(), key=lambda d: d.line)
        lines += [f"  {d.line}: {d.text}" for d in rows]
    return lines


class LineCounts:
    """Token counts of the map's lines, kept on disk per repository and counter, so a map whose lines were
    counted before is fitted to its budget without loading a tokenizer (loading tiktoken's encoding is 100 ms
    or more of a launch). A map's count is bounded by the sum of its lines' counts, each line with its newline
    and one token of slack: byte-level BPE splits text into pieces before merging and a line with its newline
    never shares a piece with the next line, and a characters-per-token estimate rounds each line down by less
    than one token."""

    def __init__(self, path: Path, counter: TokenCounter) -> None:
        self.path = path
        self.counter = counter
        self.kind = type(counter).__name__
        self._known: dict[str, int] | None = None  # read from `path` on first use
        self._new = False

    def _load(self) -> dict[str, int]:
        known: dict[str, int] = {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("counter") == self.kind:
                known = {k: v for k, v in data.get("lines", {}).items() if isinstance(v, int)}
        except (OSError, ValueError, AttributeError):
            pass
        return known

    def bound(self, lines: Sequence[str]) -> int:
        if self._known is None:
            self._known = self._load()
        total = 0
        for line in lines:
            n = self._known.get(line)
            if n is None:
                n = self._known[line] = self.counter.text(None, line + "\n")
                self._new = True
            total += n + 1
        return total

    def save(self) -> None:
        if not self._new or self._known is None:
            return
        keep = dict(list(self._known.items())[-MAX_COUNTED_LINES:])  # the newest lines
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"counter": self.kind, "lines": keep}), encoding="utf-8")
            tmp.replace(self.path)
        except OSError:
            pass  # counted again next time
        self._new = False
