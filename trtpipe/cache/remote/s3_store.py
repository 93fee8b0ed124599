"""The only code that talks to S3: boto3, imported when `cache.remote` is set, never before.

Decisions:
- boto3 finds endpoint, region and credentials as every AWS tool does (environment,
  AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3, ~/.aws/config and credentials, profiles, instance
  roles); trtpipe adds no setting of its own for them.
- Short connect timeout, two attempts: a remote that does not answer must cost seconds, not
  minutes, since the run goes on without it (tier.py). Reads may stream slowly (60 s between
  bytes before giving up).
- Three answers, nothing else: the object (or True), "absent" (None / False: a miss, or a record
  another writer published first), or `RemoteUnavailable` with the reason in one line (no
  connection, a refused credential, a missing bucket, a cut stream). The caller decides.
- The record is written with `If-None-Match: *` (S3 conditional writes; AWS since 2024, MinIO,
  moto): the first complete record of a key stays, a later writer gets 412 and keeps its entry
  local. On a store that ignores the header the later record replaces the earlier whole (a PUT is
  atomic) and each record's files were uploaded before it: a reader still sees one complete entry.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from trtpipe.errors import UserError

_ABSENT = {"NoSuchKey", "404", "NotFound"}
_LOST_RACE = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_CHUNK = 1 << 20
# Above this an upload is multipart (several parts in parallel; put_object stops at 5 GB).
_MULTIPART_BYTES = 64 << 20


class RemoteUnavailable(Exception):
    """The remote cannot be used; str() is the reason in one line."""


def check_boto3() -> None:
    """boto3 installed, or exit 2 in one line (without importing it: `find_spec` finds it)."""
    from importlib.util import find_spec

    if find_spec("boto3") is None or find_spec("botocore") is None:
        raise UserError("cache.remote is set, but boto3 (the S3 client the remote cache uses) is not installed",
                        "pip install 'trtpipe[remote]'")


class S3Store:
    """Decision: boto3 is imported and its client made at the first request, not before: a run
    whose every stage is a local hit never asks the remote and does not pay boto3's import and
    client set-up (about a second here, measured with `python -X importtime` and a timer)."""

    _errors: tuple = ()  # boto3's exception types, once imported (`_make_client`)
    _client_error: type = type(None)

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self._made = None

    @property
    def _client(self):
        if self._made is None:
            self._made = self._make_client()
        return self._made

    def _make_client(self):
        try:
            import boto3
            import botocore
            from boto3.s3.transfer import TransferConfig
            from botocore.config import Config
        except ImportError as error:  # installed (check_boto3) but broken
            raise RemoteUnavailable(f"boto3 cannot be imported: {error}") from None
        self._errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError,
                        boto3.exceptions.Boto3Error)
        self._client_error = botocore.exceptions.ClientError
        self._transfer = TransferConfig(multipart_threshold=_MULTIPART_BYTES, max_concurrency=4)
        config = Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 2, "mode": "standard"})
        try:
            return boto3.session.Session().client("s3", config=config)
        except self._errors as error:  # a malformed ~/.aws/config, an unknown profile
            raise RemoteUnavailable(_reason(error)) from None

    def get_bytes(self, key: str, limit: int) -> bytes | None:
        """The object, or its first `limit + 1` bytes when it is longer (the caller refuses it)."""
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                return body.read(limit + 1)
            finally:
                body.close()
        except self._errors as error:
            return self._absent_or_raise(error)

    def download(self, key: str, path: Path) -> int | None:
        """The object into a new file `path`; its size, or None when absent."""
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            with open(path, "xb") as handle:
                shutil.copyfileobj(body, handle, _CHUNK)  # a short stream raises (IncompleteReadError)
            return path.stat().st_size
        except self._errors as error:
            return self._absent_or_raise(error)

    def size(self, key: str) -> int | None:
        try:
            return int(self._client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
        except self._errors as error:
            return self._absent_or_raise(error)

    def upload(self, key: str, path: Path) -> None:
        try:
            self._client.upload_file(str(path), self.bucket, key, Config=self._transfer)
        except self._errors as error:
            raise RemoteUnavailable(_reason(error)) from None

    def put(self, key: str, data: bytes) -> None:
        """Unconditional: only to replace a record this run refused (upload.py)."""
        try:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType="application/json")
        except self._errors as error:
            raise RemoteUnavailable(_reason(error)) from None

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """False: the key already holds an object (another writer was first)."""
        try:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*",
                                    ContentType="application/json")
            return True
        except self._errors as error:
            if isinstance(error, self._client_error) and _code(error) in _LOST_RACE:
                return False
            raise RemoteUnavailable(_reason(error)) from None

    def _absent_or_raise(self, error: Exception) -> None:
        if isinstance(error, self._client_error) and _code(error) in _ABSENT:
            return None
        raise RemoteUnavailable(_reason(error)) from None


def _code(error) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _reason(error: Exception) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict) and response.get("Error"):
        details = response["Error"]
        return f"{details.get('Code', '?')}: {str(details.get('Message') or 'no message').rstrip('.')}"
    return " ".join(str(error).split()).rstrip(".") or type(error).__name__
