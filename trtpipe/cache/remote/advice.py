"""What to change when the remote is not usable: the last clause of the tier's one warning line (tier.py).

Decisions:
- The line stays a warning (docs/cache.md: a builder whose bucket is away still builds), but it
  names what decides the failure, as an error's Fix would: a missing bucket is created or
  cache.remote corrected; a refused credential is AWS_PROFILE or the key pair; a refused
  permission is the policy (the actions docs/cache.md lists); an endpoint that does not answer is
  AWS_ENDPOINT_URL. Found by a new user: `NoSuchBucket: The specified bucket does not exist` said
  what, not which setting to change.
- Keyed by the S3 error code the reason starts with (s3_store._reason: `Code: Message`), or by
  botocore's own words for a connection that never opened. Any other reason (a read timeout, a
  cut stream, a slow link) is the network's, not a setting's: no clause.
"""

from __future__ import annotations

_CREDENTIAL = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                         "TokenRefreshRequired", "AuthorizationHeaderMalformed", "InvalidClientTokenId"})
_PERMISSION = frozenset({"AccessDenied", "Forbidden", "403", "AllAccessDisabled"})
_UNREACHABLE = ("Could not connect", "Connect timeout")


def advice(reason: str, bucket: str) -> str:
    """`; to use it: ...` for `reason` (RemoteUnavailable's text), or "" when no setting decides it."""
    code = reason.split(":", 1)[0].strip()
    if code == "NoSuchBucket":
        what = f"create the bucket {bucket}, or name one that exists in cache.remote=s3://BUCKET/PREFIX"
    elif code in _CREDENTIAL:
        what = "check the credential (AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    elif code in _PERMISSION:
        what = ("give the credential s3:GetObject and s3:ListBucket (and s3:PutObject to write), "
                "or cache.remote_mode=read for a read-only one (docs/cache.md, A fleet of builders)")
    elif reason.startswith(_UNREACHABLE):
        what = "check AWS_ENDPOINT_URL (unset for AWS S3 itself) and that the store answers"
    else:
        return ""
    return f"; to use it: {what}"
