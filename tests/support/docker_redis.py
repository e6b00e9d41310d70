"""A Redis container through testcontainers, for when a Docker engine answers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

# Ryuk's image cannot be pulled without a registry; containers are stopped by
# the context manager instead.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
# The machines here carry /.dockerenv, which makes testcontainers believe it runs
# in a container and connect to the bridge gateway. Containers publish on the
# host's loopback; connect there.
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
os.environ.setdefault("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")

REDIS_IMAGE = os.environ.get("REDIS_IMAGE", "redis:7-alpine")


@contextmanager
def redis_container() -> Iterator[str]:
    """Start a Redis container; yields its URL on 127.0.0.1."""
    from testcontainers.community.redis import RedisContainer

    with RedisContainer(image=REDIS_IMAGE) as container:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(6379)
        yield f"redis://{host}:{port}/0"
