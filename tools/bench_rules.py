"""Measure the command-rule parser: speed on everyday commands, how many it cannot read, bypasses caught.

Compares fugu's bashlex analysis (`fugu_cli.tools.rules.analyze`) with the shlex splitter it replaced, on a
corpus of commands models run every day and on the deny-rule bypasses of issue 10. Not a test.

    .venv/bin/python tools/bench_rules.py
"""

from __future__ import annotations

import os
import re
import shlex
import statistics
import time

from fugu_cli.tools import PermissionPolicy
from fugu_cli.tools.rules import analyze

EVERYDAY = [
    "pytest -q tests/test_cli.py",
    "python -m pytest -x -k 'not slow'",
    "git status --short",
    "git diff HEAD~1 -- src/",
    "git log --oneline -n 20",
    "git add -A && git commit -m 'fix: handle empty input'",
    "ls -la src",
    "cat README.md | head -50",
    "grep -rn 'TODO' src | wc -l",
    "find . -name '*.py' -not -path './.venv/*' | head",
    "npm test",
    "npm run build 2>&1 | tail -20",
    "cargo test --all",
    "go test ./...",
    "make -j4 build",
    "cd src && python -c 'import app; print(app.__version__)'",
    "sed -n '10,40p' src/app.py",
    "cat > notes.md <<'EOF'\n# Notes\n$HOME is not expanded here\nEOF",
    "python - <<'EOF'\nimport json\nprint(json.dumps({'a': 1}))\nEOF",
    'for f in src/*.py; do python -m py_compile "$f"; done',
    "if [ -f setup.py ]; then pip install -e .; fi",
    "export PYTHONPATH=src; pytest -q",
    "uv run pytest -q",
    "ruff check . && ruff format --check .",
    "mypy --strict src",
    "echo $PATH",
    "wc -l $(git ls-files '*.py') | tail -1",
    "time pytest -q",
    "diff <(sort a.txt) <(sort b.txt)",
    "[[ -d build ]] && rm -rf build",
    "case $1 in start) echo go;; esac",
    "echo $((1 + 2))",
]
BYPASSES = [
    "command rm x",
    "env rm x",
    "sh -c 'rm x'",
    "find . -delete",
    "$(echo rm) x",
    "`echo rm` x",
    "R=rm; $R x",
    "echo x | xargs rm",
    "eval 'rm x'",
    "nice -n 1 rm x",
    "timeout 5 rm x",
    "echo 'rm x' | sh",
    "bash -lc 'rm x'",
    "f() { rm x; }; f",
    "/bin/r? x",
    "find . -exec rm {} +",
]


def old_prefixes(command: str) -> list[str]:
    """The shlex splitter fugu used before: text prefixes of each `;&|`-separated piece."""
    if "$(" in command or "`" in command:
        return ["shell:" + " ".join(command.split())]
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|\n")
        lexer.whitespace = " \t\r"
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return ["shell:" + " ".join(command.split())]
    out: list[str] = []
    words: list[str] = []
    for token in [*tokens, ";"]:
        if token and set(token) <= set(";&|\n"):
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                words = words[1:]
            if words:
                out.append("shell:" + os.path.basename(words[0]))
            words = []
        else:
            words.append(token)
    return out or ["shell"]


def main() -> None:
    times: list[float] = []
    for _ in range(20):
        for command in EVERYDAY:
            t = time.perf_counter()
            analyze(command)
            times.append((time.perf_counter() - t) * 1e6)
    opaque = [c for c in EVERYDAY if any(p.opaque for p in analyze(c))]
    p95 = sorted(times)[int(len(times) * 0.95)]
    print(f"bashlex analyze: median {statistics.median(times):.0f} µs, p95 {p95:.0f} µs")
    print(f"everyday commands it cannot fully read (no prefix rule allows): {len(opaque)} of {len(EVERYDAY)}")
    for c in opaque:
        print("   ", c.replace("\n", "\\n"))
    policy = PermissionPolicy(mode="full-auto", deny=["shell:rm"])
    old = [c for c in BYPASSES if all(policy.check("exec", p) == "allow" for p in old_prefixes(c))]
    new = [
        c for c in BYPASSES if all(policy.check("exec", p.prefix, p.opaque) == "allow" for p in analyze(c))
    ]
    print(
        f"deny shell:rm, full-auto: bypasses that run with the shlex splitter: {len(old)} of {len(BYPASSES)}"
    )
    print(
        f"                          bypasses that run with bashlex analysis:  {len(new)} of {len(BYPASSES)}"
    )


if __name__ == "__main__":
    main()
