"""What no command fugu starts may see: the maintained list of credential files of common tools, and the host
folders that hold unix sockets (a daemon's socket is a door out of the sandbox: docker's runs as root).

Data and path arithmetic only; the sandbox decides how to hide (an empty tmpfs over a folder, /dev/null over
a file). `[sandbox] hide` in config adds to the list.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

# Credential stores under $HOME that commands never need to read in a coding task. Keep it sorted by tool.
CREDENTIALS = (
    "~/.ssh",
    "~/.gnupg",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/git/credentials",
    "~/.config/gh",
    "~/.config/hub",
    "~/.config/glab-cli",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.oci",
    "~/.kube",
    "~/.docker",
    "~/.config/containers/auth.json",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.vault-token",
    "~/.claude/.credentials.json",
    "~/.claude.json",
    "~/.codex/auth.json",
    "~/.cache/huggingface/token",
    "~/.huggingface/token",
    "~/.config/openai",
    "~/.npmrc",
    "~/.yarnrc",
    "~/.yarnrc.yml",
    "~/.config/pip/pip.conf",
    "~/.pypirc",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.gem/credentials",
    "~/.config/composer/auth.json",
    "~/.composer/auth.json",
    "~/.m2/settings-security.xml",
    "~/.gradle/gradle.properties",
    "~/.nuget/NuGet/NuGet.Config",
    "~/.pgpass",
    "~/.my.cnf",
    "~/.bash_history",
    "~/.zsh_history",
    "~/.local/share/fish/fish_history",
    "~/.python_history",
    "~/.node_repl_history",
    "~/.psql_history",
    "~/.mysql_history",
    "~/.sqlite_history",
    "~/.lesshst",
    "~/.mozilla",
    "~/.config/google-chrome",
    "~/.config/chromium",
    "~/.config/BraveSoftware",
)
# Folders where daemons put their unix sockets (docker, D-Bus, ssh-agent, podman, systemd, lxd, colima).
SOCKET_FOLDERS = (
    "/run",
    "/var/run",
    "/var/snap/lxd/common/lxd",
    "/var/lib/lxd",
    "~/.colima",
    "~/.lima",
    "~/.rd",
)


def expand(path: str | Path) -> Path:
    return Path(os.path.expanduser(str(path))).absolute()


def expand_all(paths: tuple[str, ...]) -> tuple[Path, ...]:
    """`expand` of each path, remembered per $HOME (every command asks for the whole list)."""
    return _expand_all(paths, os.environ.get("HOME", ""))


@functools.lru_cache(maxsize=8)
def _expand_all(paths: tuple[str, ...], home: str) -> tuple[Path, ...]:
    return tuple(expand(p) for p in paths)


def socket_folders() -> list[Path]:
    """The socket folders that exist here, resolved (/var/run is usually /run), and the user's runtime dir."""
    names = [*SOCKET_FOLDERS, os.environ.get("XDG_RUNTIME_DIR") or ""]
    found = [p for p in dict.fromkeys(expand(n).resolve() for n in names if n and expand(n).exists())]
    return [p for p in found if p != Path("/") and not any(p != q and p.is_relative_to(q) for q in found)]
