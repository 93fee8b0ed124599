"""Where an entry lives in the bucket: `cache.remote=s3://BUCKET/PREFIX` and the object keys under it.

Layout under PREFIX/:
  files/<sha256[:2]>/<sha256>        a file of some entry, named by its content (each stored once)
  entries/<stage>/<key>.json         an entry's record: entry.json, byte for byte

Decisions:
- Files are content-addressed, the record names them by digest: an upload writes the files
  first and the record last, so a reader that finds a record finds (or misses) files that are
  whole objects, and two writers of one key can never mix their files (same name, same bytes).
- The two-character fan-out keeps listings of `files/` short on stores that list by prefix.
- Only `s3://` is accepted: the client (boto3) speaks S3 to any compatible store, and the
  endpoint is the AWS configuration's business (AWS_ENDPOINT_URL, profiles), not the URL's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trtpipe.errors import UserError

REMOTE_MODES = ("read", "write", "readwrite")
# S3's bucket name rules (3-63 characters of lower-case letters, digits, dots and hyphens).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_FIX = "cache.remote=s3://BUCKET/PREFIX with a bucket of yours, or 'cache.remote=null' for no remote"


@dataclass(frozen=True)
class RemoteLocation:
    bucket: str
    prefix: str  # "" or "some/path/" (always ends with "/")

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def record_key(self, stage: str, key: str) -> str:
        return f"{self.prefix}entries/{stage}/{key}.json"

    def file_key(self, digest: str) -> str:
        return f"{self.prefix}files/{digest[:2]}/{digest}"


def parse_remote(url: object) -> RemoteLocation:
    """`s3://BUCKET[/PREFIX]` -> RemoteLocation; anything else is exit 2 in one line."""
    text = str(url)
    match = re.fullmatch(r"s3://([^/]+)(?:/(.*))?", text)
    if match is None:
        raise UserError(f"cache.remote is {text!r}, not an s3://BUCKET/PREFIX address", _FIX)
    bucket, prefix = match.group(1), (match.group(2) or "").strip("/")
    if not _BUCKET.fullmatch(bucket):
        raise UserError(f"cache.remote names the bucket {bucket!r}, which is not an S3 bucket name", _FIX)
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise UserError(f"cache.remote's prefix {prefix!r} has an empty, '.' or '..' part", _FIX)
    return RemoteLocation(bucket, f"{prefix}/" if prefix else "")
