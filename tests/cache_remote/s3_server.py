"""A real S3 server on 127.0.0.1 for the remote cache tests: moto's server mode (`moto[server]`,
the test extra), in a thread of the test process, with IAM authentication on.

Decisions:
- moto's server, not a mock of the client: boto3 in trtpipe (and in the `trtpipe` subprocess)
  speaks HTTP to a listening socket, signs its requests, and gets S3's answers (404, 412 for
  `If-None-Match: *`, 403 for a wrong key). It starts in milliseconds and needs no binary download.
- Authentication is on (moto checks a request's SigV4 signature against the keys it issued once
  the first `_SETUP_REQUESTS` requests are made): a wrong credential is refused as on AWS. The
  setup requests make the IAM user, its key and its policy.
- One server per test module (module-scoped fixture); each test takes its own bucket prefix, so
  tests do not see each other's entries. A test that stops a server starts its own
  (`extra_server`), on another port, over the same store.
"""

from __future__ import annotations

import json
import logging
import urllib.request
import uuid
from dataclasses import dataclass

BUCKET = "trtpipe-test-cache"
_SETUP_REQUESTS = 3  # create_user, create_access_key, put_user_policy
_POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}


@dataclass
class S3Server:
    endpoint: str
    key_id: str
    secret: str
    server: object  # moto's ThreadedMotoServer

    def env(self, **changes: str) -> dict[str, str]:
        """The AWS environment of a client of this server (no file of the developer's is read)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.key_id,
                "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_CONFIG_FILE": "/nonexistent/aws-config", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-creds",
                "AWS_EC2_METADATA_DISABLED": "true", **changes}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.key_id,
                            aws_secret_access_key=self.secret, region_name="us-east-1")

    def objects(self, prefix: str) -> dict[str, bytes]:
        client = self.client()
        listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
        return {o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}

    def stop(self) -> None:
        self.server.stop()


def new_prefix() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def start_server() -> S3Server:
    """A moto server on a free loopback port, authentication on, the test bucket made."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # From here, the first _SETUP_REQUESTS requests are free, the rest must be signed with an issued key.
    _reset_auth(endpoint, str(_SETUP_REQUESTS))
    iam = boto3.client("iam", endpoint_url=endpoint, aws_access_key_id="setup", aws_secret_access_key="setup",
                       region_name="us-east-1")
    user = f"builder-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=user)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    iam.put_user_policy(UserName=user, PolicyName="cache", PolicyDocument=json.dumps(_POLICY))
    found = S3Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"], server)
    client = found.client()
    if BUCKET not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
        client.create_bucket(Bucket=BUCKET)
    return found


def another_server(first: S3Server) -> S3Server:
    """A second listening server over the same store (moto keeps one store per process), with the
    same key: stopping it is a remote that goes away while the first keeps serving."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return S3Server(f"http://{host}:{port}", first.key_id, first.secret, server)


def auth_off(server: S3Server) -> None:
    """Back to moto's default (no authentication), for whatever else runs in this process."""
    _reset_auth(server.endpoint, "inf")


def _reset_auth(endpoint: str, free_requests: str) -> None:
    request = urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=free_requests.encode(), method="POST",
                                     headers={"Content-Type": "text/plain"})
    urllib.request.urlopen(request, timeout=10).read()
