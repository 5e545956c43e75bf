"""The environment a command fugu starts gets: an allow-list of fugu's own, never the whole of it.

Variables with a secret-looking name or value are dropped even when allow-listed (unless the user passes
them by name), and the knobs that keep anything from prompting are set. Used by the sandbox; reads
os.environ at call time only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from fugu_cli.redact import is_secret_name, looks_secret

# What a command may see of fugu's environment; everything else (keys, FUGU_*, tokens) stays outside.
ENV_ALLOW = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "NO_COLOR",
        "COLORTERM",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_NOSYSTEM",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    }
)
# Toolchains' own settings (Python, Node, Rust, Go, Java, C): what builds and tests need to behave as the
# user's shell does. A secret-named one (NPM_CONFIG_..._authToken) is still dropped.
ENV_ALLOW_PREFIXES = (
    "LC_",
    "PYTHON",
    "PIP_",
    "UV_",
    "VIRTUAL_ENV",
    "CONDA_",
    "CARGO_",
    "RUSTUP_",
    "RUSTFLAGS",
    "GOPATH",
    "GOROOT",
    "GOFLAGS",
    "GOCACHE",
    "GOMODCACHE",
    "GOPROXY",
    "GOPRIVATE",
    "GOBIN",
    "GO111MODULE",
    "GOTOOLCHAIN",
    "JAVA_HOME",
    "MAVEN_",
    "GRADLE_",
    "NODE_",
    "NPM_CONFIG_",
    "NVM_",
    "PNPM_",
    "DOTNET_",
    "CC",
    "CXX",
    "CFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "PKG_CONFIG_PATH",
    "SSL_CERT_",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "CI",
)
_NETWORK_ENV = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"})
NON_INTERACTIVE = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_EDITOR": "true",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_NO_INPUT": "1",
    "TMPDIR": "/tmp",
}


def minimal_env(
    pass_env: Sequence[str] = (), extra: Mapping[str, str] | None = None, network: bool = False
) -> dict[str, str]:
    """The allow-listed environment a command gets. A variable whose name or value looks secret is left out
    (`CI_JOB_JWT`, `NPM_CONFIG__AUTH`, a `PIP_INDEX_URL` holding a token, `MAVEN_OPTS` holding a
    `-D...password=`); names in `pass_env` pass whatever they hold."""
    allowed = ENV_ALLOW | set(pass_env) | (_NETWORK_ENV if network else set())
    env = {
        k: v
        for k, v in os.environ.items()
        if (k in allowed or k.startswith(ENV_ALLOW_PREFIXES))
        and (k in pass_env or not (is_secret_name(k) or looks_secret(v)))
    }
    env.setdefault("PATH", os.defpath)
    env.update(NON_INTERACTIVE)
    env.update(extra or {})
    return env
