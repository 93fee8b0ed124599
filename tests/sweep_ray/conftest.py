"""Fixtures of the Ray sweep tests: one local Ray head and one S3 server (moto, as
tests/cache_remote) per module, both on 127.0.0.1, both stopped even when a test fails."""

from __future__ import annotations

import pytest

from tests.cache_remote.s3_server import auth_off, start_server
from tests.sweep_ray.ray_head import start_head


@pytest.fixture(scope="module")
def s3():
    server = start_server()
    yield server
    auth_off(server)
    server.stop()


@pytest.fixture(scope="module")
def ray_head(s3):
    head = start_head(s3.env())
    try:
        yield head
    finally:
        head.stop()
