"""Config layers validated once: a run whose layers (and pool file) validated before builds them from
FUGU_HOME's cache without building pydantic's validators; a changed file is validated again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fugu_cli.config import load_config, user_config_path
from fugu_cli.errors import ConfigError
from fugu_cli.pool import load_pool_file
from tests.helpers import make_repo, write_pool
from tests.loopback import LoopbackServer

USER = """
max_turns = 7
[llm]
timeout_s = 30
[[workers]]
name = "w"
model = "openai/w"
priority = 2
[hooks]
PreToolUse = [{ matcher = "shell", command = "true" }]
[mcp_servers.notes]
command = "python3"
args = ["server.py"]
"""

PROBE = """
import json, sys
from pathlib import Path
from fugu_cli.config import Config, WorkerConfig, load_config
from fugu_cli.pool import load_pool_file
import fugu_cli.app, fugu_cli.cli, fugu_cli.ui.run  # what a run imports, with every model of fugu's in them
from pydantic import BaseModel
config = load_config(Path(sys.argv[1]))
workers = load_pool_file(Path(sys.argv[2]))
def models(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from models(sub)
any_built = sorted({m.__qualname__ for m in models(BaseModel)
                    if m.__module__.startswith("fugu_cli") and m.__pydantic_complete__})
print(json.dumps({"built": [Config.__pydantic_complete__, WorkerConfig.__pydantic_complete__],
                  "any_built": any_built,
                  "config": config.model_dump(mode="json"), "workers": [w.name for w in workers]}))
"""


def _probe(cwd: Path, pool: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(cwd), str(pool)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_a_second_run_builds_the_same_config_from_the_cache_without_validators(tmp_path: Path) -> None:
    user_config_path().parent.mkdir(parents=True, exist_ok=True)
    user_config_path().write_text(USER)
    pool = write_pool(tmp_path / "pool.toml", [{"name": "a", "model": "openai/a", "priority": 1}])
    first, second = _probe(tmp_path, pool), _probe(tmp_path, pool)
    assert first["built"] == [True, True]  # validated: the validators were built
    assert second["built"] == [False, False]  # from the cache: none was
    assert second["any_built"] == []  # nor any other model of fugu's a run imports (each costs 10-50 ms)
    assert second["config"] == first["config"]
    assert second["workers"] == first["workers"] == ["a"]
    config = load_config(tmp_path)  # in this process, types and nested models as validation gives them
    assert config.max_turns == 7 and config.llm.timeout_s == 30.0 and config.workers[0].priority == 2.0
    assert config.hooks["PreToolUse"][0].commands()[0].command == "true"
    assert config.mcp_servers["notes"].args == ["server.py"]


def test_a_changed_layer_is_validated_again(tmp_path: Path) -> None:
    user_config_path().parent.mkdir(parents=True, exist_ok=True)
    user_config_path().write_text("max_turns = 5\n")
    assert load_config(tmp_path).max_turns == 5
    assert load_config(tmp_path).max_turns == 5
    user_config_path().write_text("max_turns = 0\n")
    with pytest.raises(ConfigError, match="max_turns"):
        load_config(tmp_path)
    user_config_path().write_text("max_turn = 5\n")
    with pytest.raises(ConfigError, match="did you mean 'max_turns'"):
        load_config(tmp_path)


def test_a_changed_pool_file_is_read_again(tmp_path: Path) -> None:
    pool = write_pool(tmp_path / "pool.toml", [{"name": "a", "model": "openai/a"}])
    assert [w.name for w in load_pool_file(pool)] == ["a"]
    write_pool(pool, [{"name": "b", "model": "openai/b", "price_in": 1}])
    (worker,) = load_pool_file(pool)
    assert (worker.name, worker.price_in) == ("b", 1.0)
    write_pool(pool, [{"name": "c", "model": "openai/c", "price_in": -1}])
    with pytest.raises(ConfigError, match="price_in"):
        load_pool_file(pool)


def test_a_config_with_secrets_in_env_or_headers_is_never_copied_to_the_cache(tmp_path: Path) -> None:
    secret = "tok-7f3a9c1e55d04b2b"
    user_config_path().parent.mkdir(parents=True, exist_ok=True)
    user_config_path().write_text(
        '[mcp_servers.notes]\ncommand = "python"\nargs = ["server.py"]\n'
        f'env = {{ NOTES_TOKEN = "{secret}" }}\n'
    )
    cache = user_config_path().parent / "cache"
    for _ in range(2):  # validated each time: nothing of it is kept
        assert load_config(tmp_path).mcp_servers["notes"].env == {"NOTES_TOKEN": secret}
    assert not any(secret.encode() in p.read_bytes() for p in cache.rglob("*") if p.is_file())
    user_config_path().write_text(f'[telemetry]\nheaders = {{ "x-api-key" = "{secret}" }}\n')
    assert load_config(tmp_path).telemetry.headers == {"x-api-key": secret}
    assert not any(secret.encode() in p.read_bytes() for p in cache.rglob("*") if p.is_file())
    user_config_path().write_text("max_turns = 5\n")  # the control: a config without secrets is cached
    load_config(tmp_path)
    assert b'"max_turns": 5' in (cache / "config.json").read_bytes()


RUN = """
import atexit, json, os, sys
from pydantic import BaseModel
def models(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from models(sub)
@atexit.register
def built():
    names = sorted({m.__qualname__ for m in models(BaseModel)
                    if m.__module__.startswith("fugu_cli") and m.__pydantic_complete__})
    with open(os.environ["BUILT_TO"], "w") as f:
        json.dump(names, f)
sys.argv = ["fugu", *sys.argv[1:]]
from fugu_cli.__main__ import main
sys.exit(main())
"""


def test_a_second_one_shot_run_builds_no_model_of_fugus(tmp_path: Path, loopback: LoopbackServer) -> None:
    """The whole run, not only the config's loading: a model used on the way (a `model_dump` builds its
    serializer, and with it the validator, 20-50 ms) is built on every launch."""
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "a", "model": "openai/a", "api_base": loopback.base_url}]
    )
    repo = make_repo(tmp_path / "repo")
    out = tmp_path / "built.json"
    argv = ["-p", "say hi", "--pool", str(pool), "--router", "prior"]
    built = []
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, "-c", RUN, *argv], cwd=repo, capture_output=True, text=True,
            env=dict(os.environ, BUILT_TO=str(out)),
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        built.append(json.loads(out.read_text()))
    assert "Config" in built[0]  # the first run validated its layers
    assert built[1] == []
