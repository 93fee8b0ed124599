"""Fixtures of the remote cache tests: a real S3 server on loopback (s3_server.py)."""

from __future__ import annotations

import pytest

from tests.cache_remote.s3_server import auth_off, new_prefix, start_server


@pytest.fixture(scope="module")
def s3():
    server = start_server()  # boto3 and moto[server] come with the test extra: missing, the tests fail
    yield server
    auth_off(server)
    server.stop()


@pytest.fixture
def remote_url(s3) -> str:
    """A fresh prefix of the test bucket: this test's remote cache."""
    from tests.cache_remote.s3_server import BUCKET

    return f"s3://{BUCKET}/{new_prefix()}"


@pytest.fixture
def aws_env(s3, monkeypatch):
    """This process's AWS environment points at the server (for the in-process cache tests)."""
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3


@pytest.fixture
def through(aws_env, monkeypatch):
    """through(Relay, **options): a fault relay (cutting_proxy.py, delay_proxy.py) in front of the
    server, made this process's endpoint; closed after the test."""
    made: list = []

    def make(relay, **options):
        made.append(relay(aws_env.endpoint, **options))
        monkeypatch.setenv("AWS_ENDPOINT_URL", made[-1].endpoint)
        return made[-1]

    yield make
    for relay in made:
        relay.close()
