"""The guards on fugu's shape bite: the import contracts in pyproject.toml fail on a circle added on purpose
(between bottom-layer siblings, between two upper packages, inside one package), run by the real
`lint-imports` on a copy of the package; and no module imports a dependency's private module or name."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")

# (module that gains an import, the module it imports); each pair already imports the other way, or
# sits beside it in a layer whose siblings must stay independent
CIRCLES = {
    "bottom-layer siblings": (
        "fugu_cli/errors.py",
        "fugu_cli.redact",
        "fugu_cli/redact.py",
        "fugu_cli.errors",
    ),
    "two upper packages": (
        "fugu_cli/serve/options.py",
        "fugu_cli.eval.report",
        "fugu_cli/eval/report.py",
        "fugu_cli.serve.options",
    ),
    "inside one package": ("fugu_cli/llm/faults.py", "fugu_cli.llm.attempt", "", ""),
}


def _copy(tmp_path: Path) -> Path:
    where = tmp_path / "copy"
    shutil.copytree(
        ROOT / "fugu_cli", where / "fugu_cli", ignore=shutil.ignore_patterns("__pycache__", "data")
    )
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")
    return where


def _add_import(copy: Path, module_file: str, imported: str) -> None:
    path = copy / module_file
    path.write_text(path.read_text() + f"\nimport {imported}  # added by the test: a circle\n")


def _lint(copy: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(copy)}  # the copy, not the installed package
    return subprocess.run(
        [str(LINT), "pyproject.toml", "--no-cache"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_contracts_hold_on_an_untouched_copy(tmp_path: Path) -> None:
    done = _lint(_copy(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("where", list(CIRCLES))
def test_an_import_circle_breaks_a_contract(tmp_path: Path, where: str) -> None:
    copy = _copy(tmp_path)
    first, first_imports, second, second_imports = CIRCLES[where]
    _add_import(copy, first, first_imports)
    if second:
        _add_import(copy, second, second_imports)
    done = _lint(copy)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout and first_imports.rsplit(".", 1)[-1] in done.stdout


def _private_imports(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            if name.split(".")[0] in ("fugu_cli", "__future__"):
                continue
            if any(part.startswith("_") for part in name.split(".")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    return found


def test_no_module_imports_a_dependencys_private_parts() -> None:
    """A private module or name (`mcp.shared._httpx_utils`) may change in any patch release."""
    found = [hit for path in sorted((ROOT / "fugu_cli").rglob("*.py")) for hit in _private_imports(path)]
    assert found == []
