"""The remote cache tier (`cache.remote=s3://BUCKET/PREFIX`): the same entries as the local
cache, under the same keys, in an S3-compatible bucket.

location.py names the objects, s3_store.py is the only code that talks to S3 (boto3, imported
lazily), fetch.py downloads an entry, upload.py uploads one, tier.py is what the local cache
calls (mode, one warning line when the remote fails, transfer figures).

Part of `trtpipe.cache`: imports `trtpipe.errors` and the cache modules beside it, never the
runner (the local cache calls the tier, not the other way round).
"""
