"""The only code that talks to S3: boto3, imported when `cache.remote` is set, never before.

Decisions:
- boto3 finds endpoint, region and credentials as every AWS tool does (environment,
  AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3, ~/.aws/config and credentials, profiles, instance
  roles); trtpipe adds no setting of its own for them.
- Short connect timeout, two attempts: a remote that does not answer must cost seconds, not
  minutes, since the run goes on without it (tier.py). Reads may stream slowly (60 s between
  bytes before giving up). Those bound a wait for one byte, not a transfer: a transfer slower
  than `LOW_SPEED_LIMIT` over `LOW_SPEED_TIME` is given up too (low_speed.py), else a link that
  trickles could hold a run (and every job waiting on its stage's lock) for days. The floor, 10 kB/s:
  below it a 121 MB engine takes more than 3 hours, a download no rebuild is worth waiting for;
  a minute: a short pause of a healthy link (a retransmit, a busy server) is not a verdict.
- Three answers, nothing else: the object (or True), "absent" (None / False: a miss, or a record
  another writer published first), or `RemoteUnavailable` with the reason in one line (no
  connection, a refused credential, a missing bucket, a cut stream). The caller decides.
- Uploads are trtpipe's own (one PUT, or parts of `_PART_BYTES`), not s3transfer's `upload_file`:
  the body must report every block it gives the socket for the low-speed floor (GuardedPart).
- The record is written with `If-None-Match: *` (S3 conditional writes; AWS since 2024, MinIO,
  moto): the first complete record of a key stays, a later writer gets 412 and keeps its entry
  local. On a store that ignores the header the later record replaces the earlier whole (a PUT is
  atomic) and each record's files were uploaded before it: a reader still sees one complete entry.
"""

from __future__ import annotations

from pathlib import Path

from trtpipe.cache.remote.low_speed import GuardedPart, LowSpeedGuard, TooSlow
from trtpipe.errors import UserError

_ABSENT = {"NoSuchKey", "404", "NotFound"}
_LOST_RACE = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_CHUNK = 64 << 10  # read in pieces: the low-speed guard counts progress per piece
CONNECT_TIMEOUT = 5  # seconds to open a connection (and, in urllib3, to send one block of a body)
READ_TIMEOUT = 60  # seconds without a byte of the answer
ATTEMPTS = 2  # per request, retries included
LOW_SPEED_LIMIT = 10_000  # bytes per second, averaged over LOW_SPEED_TIME seconds
LOW_SPEED_TIME = 60
# Above this an upload is multipart, in parts of this size, 4 at a time (a PUT stops at 5 GB).
_PART_BYTES = 64 << 20


class RemoteUnavailable(Exception):
    """The remote cannot be used; str() is the reason in one line."""


def check_boto3() -> None:
    """boto3 installed, or exit 2 in one line (without importing it: `find_spec` finds it)."""
    from importlib.util import find_spec

    if find_spec("boto3") is None or find_spec("botocore") is None:
        from trtpipe.errors import pip_install_extra

        raise UserError("cache.remote is set, but boto3 (the S3 client the remote cache uses) is not installed",
                        pip_install_extra("remote"))


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
            from botocore.config import Config
        except ImportError as error:  # installed (check_boto3) but broken
            raise RemoteUnavailable(f"boto3 cannot be imported: {error}") from None
        self._errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError,
                        boto3.exceptions.Boto3Error)
        self._client_error = botocore.exceptions.ClientError
        config = Config(connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT,
                        retries={"max_attempts": ATTEMPTS, "mode": "standard"})
        try:
            return boto3.session.Session().client("s3", config=config)
        except self._errors as error:  # a malformed ~/.aws/config, an unknown profile
            raise RemoteUnavailable(_reason(error)) from None

    def get_bytes(self, key: str, limit: int) -> bytes | None:
        """The object, or its first `limit + 1` bytes when it is longer (the caller refuses it)."""
        pieces: list[bytes] = []
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                self._copy(body, pieces.append, limit + 1)
            finally:
                body.close()
            return b"".join(pieces)
        except self._errors as error:
            return self._absent_or_raise(error)

    def download(self, key: str, path: Path) -> int | None:
        """The object into a new file `path`; its size, or None when absent."""
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            with open(path, "xb") as handle:
                return self._copy(body, handle.write)  # a short stream raises (IncompleteReadError)
        except self._errors as error:
            return self._absent_or_raise(error)

    def _copy(self, body, write, limit: int | None = None) -> int:
        """`body` (a streaming answer) into `write`, up to `limit` bytes; the bytes copied.
        Raises RemoteUnavailable when the link crawls (low_speed.py)."""
        copied = 0
        with LowSpeedGuard(LOW_SPEED_LIMIT, LOW_SPEED_TIME, _stopper(body)) as guard:
            try:
                while chunk := body.read(_CHUNK if limit is None else min(_CHUNK, limit - copied)):
                    write(chunk)
                    copied += len(chunk)
                    guard.progress(len(chunk))
            except (TooSlow, *self._errors) as error:
                raise RemoteUnavailable(guard.reason or _reason(error)) from None
        if guard.reason:  # stopped by the watcher, and the stream ended without an error
            raise RemoteUnavailable(guard.reason)
        return copied

    def size(self, key: str) -> int | None:
        try:
            return int(self._client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
        except self._errors as error:
            return self._absent_or_raise(error)

    def upload(self, key: str, path: Path) -> None:
        """A file in one PUT, or in parts of `_PART_BYTES` above them (4 at a time)."""
        size = path.stat().st_size
        # Nothing to stop: a body is read block by block as the socket takes them, each block's send
        # bounded by the connect timeout, so the next read raises (GuardedPart).
        with LowSpeedGuard(LOW_SPEED_LIMIT, LOW_SPEED_TIME) as guard:
            try:
                if size <= _PART_BYTES:
                    with GuardedPart(path, 0, size, guard) as body:
                        self._client.put_object(Bucket=self.bucket, Key=key, Body=body)
                else:
                    self._upload_parts(key, path, size, guard)
            except (TooSlow, *self._errors) as error:
                raise RemoteUnavailable(guard.reason or _reason(error)) from None

    def _upload_parts(self, key: str, path: Path, size: int, guard: LowSpeedGuard) -> None:
        """A multipart upload (S3's only way past 5 GB in one object); aborted when a part fails.

        Decision: once a part has failed, no part not yet begun is sent (`failed`): the upload is
        lost, and the pool would otherwise send every queued part before the abort (its exit waits
        for them), up to 5 GB for nothing. Found with tests/cache_remote/test_upload_cut.py."""
        import threading
        from concurrent.futures import ThreadPoolExecutor

        upload = self._client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        failed = threading.Event()

        def part(number: int) -> dict | None:
            if failed.is_set():  # a part before it failed: that error is the one raised
                return None
            offset = (number - 1) * _PART_BYTES
            try:
                with GuardedPart(path, offset, min(_PART_BYTES, size - offset), guard) as body:
                    answer = self._client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload,
                                                      PartNumber=number, Body=body)
            except BaseException:
                failed.set()
                raise
            return {"PartNumber": number, "ETag": answer["ETag"]}

        try:
            with ThreadPoolExecutor(4, thread_name_prefix="trtpipe-upload") as pool:
                parts = list(pool.map(part, range(1, -(-size // _PART_BYTES) + 1)))
            self._client.complete_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload,
                                                   MultipartUpload={"Parts": parts})
        except BaseException:
            try:  # parts left behind cost storage until a lifecycle rule removes them
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
            except self._errors:
                pass
            raise

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


def _stopper(body):
    """What ends a read of `body` blocked in another thread: urllib3's `HTTPResponse.shutdown`
    (urllib3 >= 2.3, made for this), reached through botocore's StreamingBody; None on older
    versions (then only the reads that return are checked)."""
    return getattr(getattr(body, "_raw_stream", None), "shutdown", None)


def _code(error) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _reason(error: Exception) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict) and response.get("Error"):
        details = response["Error"]
        return f"{details.get('Code', '?')}: {str(details.get('Message') or 'no message').rstrip('.')}"
    return " ".join(str(error).split()).rstrip(".") or type(error).__name__
