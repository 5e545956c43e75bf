"""Make a `fugu eval` suite from SWE-bench-style instances: a repository at a commit, an issue to fix, and
tests that fail before the fix (the recipe in docs/SUITES.md).

Input: JSON lines with SWE-bench's fields `instance_id`, `repo` (owner/name), `base_commit`,
`problem_statement`, `test_patch`, `FAIL_TO_PASS` and `PASS_TO_PASS` (lists, or JSON text of lists), e.g. a
split of princeton-nlp/SWE-bench saved with `datasets`' `to_json`. Each repository is read from a clone under
`--clones` (`owner__name`), cloned there from GitHub when missing. For each instance the suite gets the
repository's files at `base_commit` (`repos/ID`, no history), the issue as the prompt, the test patch as a
hidden file, and a check that applies it and runs the instance's tests with `--python`:

    python tools/swebench_suite.py instances.jsonl --out suites/swe --clones ~/clones \\
        --python /envs/{repo}/bin/python [--limit 20]
    fugu eval suites/swe --worker claude --executor ray
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

HIDDEN_PATCH = ".fugu-check/test.patch"
PROMPT = (
    "{statement}\n\n"
    "Resolve the issue above by changing the repository's source. Tests that check the fix exist but are not "
    "in the repository; do not rely on adding tests of your own."
)


def tests_of(instance: dict[str, Any], key: str) -> list[str]:
    value = instance.get(key) or []
    return list(json.loads(value) if isinstance(value, str) else value)


def check_command(instance: dict[str, Any], python: str) -> str:
    """Apply the hidden test patch, then run the tests that must pass (those that failed before the fix
    first)."""
    interpreter = python.format(repo=instance["repo"].replace("/", "__"))
    tests = tests_of(instance, "FAIL_TO_PASS") + tests_of(instance, "PASS_TO_PASS")
    run = f"{shlex.quote(interpreter)} -m pytest -q -p no:cacheprovider {' '.join(map(shlex.quote, tests))}"
    return f"git apply --whitespace=nowarn {HIDDEN_PATCH} && {run}"


def clone(repo: str, clones: Path) -> Path:
    path = clones / repo.replace("/", "__")
    if not path.is_dir():
        url = f"https://github.com/{repo}.git"
        subprocess.run(["git", "clone", "-q", url, str(path)], check=True)
    return path


def export_tree(clone_dir: Path, commit: str, dest: Path) -> None:
    """The repository's files at `commit`, without its history."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(clone_dir), "archive", "--format=tar", commit], check=True, capture_output=True
    ).stdout
    tar_path = dest.parent / f"{dest.name}.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(dest, filter="data")
    tar_path.unlink()


def toml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def task_table(instance: dict[str, Any], python: str) -> str:
    iid = instance["instance_id"]
    prompt = PROMPT.format(statement=instance["problem_statement"].strip())
    return "\n".join(
        [
            "[[tasks]]",
            f"id = {toml_str(iid)}",
            f"prompt = {toml_str(prompt)}",
            f"check = {toml_str(check_command(instance, python))}",
            f"repo = {toml_str(f'repos/{iid}')}",
            f"hidden = {{ {toml_str(HIDDEN_PATCH)} = {toml_str(instance['test_patch'])} }}",
            "",
        ]
    )


def build(instances: list[dict[str, Any]], out: Path, clones: Path, python: str, name: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    tables = [
        f"name = {toml_str(name)}",
        "check_timeout_s = 1800",
        "turn_timeout_s = 3600",
        "max_turns = 60",
        "",
    ]
    for instance in instances:
        export_tree(
            clone(instance["repo"], clones), instance["base_commit"], out / "repos" / instance["instance_id"]
        )
        tables.append(task_table(instance, python))
    (out / "suite.toml").write_text("\n".join(tables), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("instances", type=Path, help="JSON lines, one SWE-bench instance each")
    ap.add_argument("--out", type=Path, required=True, help="the suite folder to write")
    ap.add_argument("--clones", type=Path, required=True, help="where the repositories are (or get) cloned")
    ap.add_argument("--python", default="python3", help="the checks' interpreter; {repo} is owner__name")
    ap.add_argument("--limit", type=int, default=0, help="the first N instances only")
    ap.add_argument("--name", default="swe", help="the suite's name (outcomes are stored as eval:NAME)")
    args = ap.parse_args(argv)
    lines = args.instances.read_text(encoding="utf-8").splitlines()
    instances = [json.loads(line) for line in lines if line.strip()]
    if args.limit:
        instances = instances[: args.limit]
    args.clones.mkdir(parents=True, exist_ok=True)
    out = build(instances, args.out, args.clones, args.python, args.name)
    print(f"{len(instances)} tasks in {out / 'suite.toml'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
