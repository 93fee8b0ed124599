"""What a Ray sweep adds to the command line (trtpipe/sweep_launch.py), without Ray: the pure part.
The sweeps themselves run on a real Ray head in tests/sweep_ray/."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtpipe.sweep_launch import FORWARDED, job_environment, launch_environment, ray_overrides

START = Path("/work/start")


def test_other_launchers_are_left_alone():
    argv = ["-m", "data.seed=1,2", "hydra/launcher=joblib", "hydra.sweep.dir=sweep"]
    assert ray_overrides(argv, START, quiet_stdout=True) == argv
    assert launch_environment(argv) == {}


def test_a_relative_sweep_dir_is_taken_from_the_start_directory(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = ray_overrides(["-m", "hydra/launcher=ray", "hydra.sweep.dir=sweep"], START, quiet_stdout=False)
    assert out == ["-m", "hydra/launcher=ray", "hydra.sweep.dir='/work/start/sweep'",
                   "++hydra.launcher.ray.remote.max_retries=0"]


def test_the_default_sweep_dir_is_taken_from_the_start_directory_too(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = ray_overrides(["-m", "hydra/launcher=ray"], START, quiet_stdout=False)
    assert "hydra.sweep.dir='/work/start/outputs/multirun/${now:%Y-%m-%d}/${now:%H-%M-%S-%f}'" in out


@pytest.mark.parametrize("value", ["/abs/sweep", "'quoted dir'", "${oc.env:HOME}/s"])
def test_an_absolute_or_quoted_sweep_dir_is_kept_as_typed(value, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert f"hydra.sweep.dir={value}" in ray_overrides(["hydra/launcher=ray", f"hydra.sweep.dir={value}"], START,
                                                       quiet_stdout=False)


def test_joining_a_cluster_drops_the_plugins_object_store_size(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    added = "++hydra.launcher.ray.init.object_store_memory=null"
    assert added in ray_overrides(["hydra/launcher=ray", "hydra.launcher.ray.init.address=h:6379"], START, False)
    assert added not in ray_overrides(["hydra/launcher=ray"], START, False)  # a new local cluster: the plugin's size
    monkeypatch.setenv("RAY_ADDRESS", "h:6379")
    assert added in ray_overrides(["hydra/launcher=ray"], START, False)


def test_the_users_own_settings_win_and_quiet_stdout_keeps_ray_off_it(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "h:6379")
    argv = ["hydra/launcher=ray", "+hydra.launcher.ray.remote.max_retries=2",
            "+hydra.launcher.ray.init.object_store_memory=100000000", "hydra.sweep.dir=/s"]
    out = ray_overrides(argv, START, quiet_stdout=True)
    assert out == [*argv, "++hydra.launcher.ray.init.log_to_driver=false"]


def test_the_launching_environment_goes_with_the_job_without_credentials(monkeypatch):
    for name in FORWARDED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRTPIPE_CACHE", "/caches/team")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    env = launch_environment(["hydra/launcher=ray"])
    assert env == {"TRTPIPE_CACHE": "/caches/team", "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    monkeypatch.setenv("TRTPIPE_CACHE", "/worker/own")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    import os

    with job_environment(env):
        assert (os.environ["TRTPIPE_CACHE"], os.environ["AWS_ENDPOINT_URL"]) == ("/caches/team", "http://127.0.0.1:9")
    assert os.environ["TRTPIPE_CACHE"] == "/worker/own" and "AWS_ENDPOINT_URL" not in os.environ
