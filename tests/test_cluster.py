"""Choosing where work runs: flags over `[executor]`, an address alone asks for Ray, and a missing ray package
is one clear line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fugu_cli import cluster
from fugu_cli.config import ExecutorSettings, load_config
from fugu_cli.errors import ConfigError, UsageError


def test_flags_beat_the_config_and_an_address_alone_means_ray() -> None:
    local = ExecutorSettings()
    assert cluster.choose(local) is None
    assert cluster.choose(local, "ray") == cluster.ClusterSpec()
    assert cluster.choose(local, None, "ray://head:10001") == cluster.ClusterSpec(address="ray://head:10001")
    configured = ExecutorSettings(kind="ray", address="auto", cpus_per_job=0.5, max_retries=1, num_cpus=4)
    spec = cluster.choose(configured, env={"K_API_KEY": "v"})
    assert spec == cluster.ClusterSpec("auto", 4, None, 0.5, 1, {"K_API_KEY": "v"})
    assert cluster.choose(configured, "local") is None
    with pytest.raises(UsageError, match="--ray-address needs --executor ray"):
        cluster.choose(local, "local", "auto")
    with pytest.raises(UsageError, match="choose local or ray"):
        cluster.choose(local, "dask")


def test_the_executor_table_is_validated_and_a_project_cannot_set_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("FUGU_HOME", str(home))
    (home / "config.toml").write_text('[executor]\nkind = "ray"\ncpus_per_job = 0.25\n')
    assert load_config(tmp_path).executor == ExecutorSettings(kind="ray", cpus_per_job=0.25)
    (home / "config.toml").write_text('[executor]\nkind = "slurm"\n')
    with pytest.raises(ConfigError, match=r"executor\.kind"):
        load_config(tmp_path)
    (home / "config.toml").unlink()
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".fugu").mkdir()
    # a cloned repository must not send the user's jobs (and keys) to its own cluster
    (repo / ".fugu" / "config.toml").write_text('[executor]\nkind = "ray"\naddress = "ray://evil:10001"\n')
    config = load_config(repo)
    assert config.executor == ExecutorSettings() and "executor" in config.ignored


def test_only_the_pool_keys_that_are_set_are_forwarded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALPHA_API_KEY", "a-secret")
    assert cluster.forwarded_env(["ALPHA_API_KEY", None, "BETA_API_KEY", "ALPHA_API_KEY"]) == {
        "ALPHA_API_KEY": "a-secret"
    }


def test_without_the_ray_package_the_message_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does where it is not installed
    with pytest.raises(UsageError, match=r"pip install 'fugu-cli\[ray\]'"):
        cluster.Cluster.connect(cluster.ClusterSpec())
