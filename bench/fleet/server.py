"""The fleet's S3 server: moto's server mode (the `test` extra) in a thread of the benchmark's
process, on 127.0.0.1, with a bucket; the builders reach it as any S3 endpoint.

Decisions:
- moto, as the tests use (tests/cache_remote/s3_server.py), but without its authentication: the
  builders' credentials are not what is measured, and the benchmark must not depend on the tests.
- In this process, not a child: this process only waits for its builders, so the server's thread
  has a core's share like any builder's requests would have from a real store.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

BUCKET = "trtpipe-fleet"


@dataclass
class FleetServer:
    endpoint: str
    server: object  # moto's ThreadedMotoServer

    def env(self) -> dict[str, str]:
        """A builder's AWS environment: this server, a dummy key, no file of the developer's read."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "fleet", "AWS_SECRET_ACCESS_KEY": "fleet",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/nonexistent/aws-config",
                "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-creds", "AWS_EC2_METADATA_DISABLED": "true"}

    def stored_bytes(self, prefix: str) -> tuple[int, int]:
        """(objects, bytes) under `prefix` of the bucket."""
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="fleet",
                              aws_secret_access_key="fleet", region_name="us-east-1")
        count = size = 0
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            for item in page.get("Contents", []):
                count, size = count + 1, size + item["Size"]
        return count, size

    def stop(self) -> None:
        self.server.stop()


def start_server() -> FleetServer:
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    found = FleetServer(f"http://{host}:{port}", server)
    boto3.client("s3", endpoint_url=found.endpoint, aws_access_key_id="fleet", aws_secret_access_key="fleet",
                 region_name="us-east-1").create_bucket(Bucket=BUCKET)
    return found
