"""`cache.max_size`: after each run, prune the cache to its bound (cache/manage.py).

Decisions:
- It runs after the manifest is written, while the run still holds its entries (holds.py):
  the entries this run used are passed as `keep` and are never deleted, and entries other
  runs hold are skipped. The run's outcome never depends on it: a failure to prune is one
  warning line, the exit code stays the run's.
- One console line when it deleted something or could not get under the bound (what, how
  much, the size now, what is kept); nothing when the cache was within it.
"""

from __future__ import annotations

import logging

from trtpipe.cache.cache import ArtifactCache
from trtpipe.cache.manage import human_size, parse_size, prune
from trtpipe.errors import UserError

log = logging.getLogger("trtpipe")


def bound_cache(cache: ArtifactCache, max_size: str | None) -> None:
    if max_size is None:
        return
    limit = parse_size(max_size, "cache.max_size")
    try:
        report = prune(cache.root, max_size=limit, keep=cache.holds.keys if cache.holds else frozenset())
    except (OSError, UserError) as error:
        log.warning("trtpipe: cache.max_size=%s: pruning the cache failed: %s", max_size, error)
        return
    over = report.size_after > limit
    if not report.removed and not over:
        return
    kept = ""
    if over:  # what keeps the cache above its bound
        kept = " (over the bound: this run's entries" + (f" and {len(report.held)} other runs hold" if report.held
                                                          else "") + " are kept)"
    log.info("trtpipe: cache.max_size=%s: deleted %d least recently used cache entries (%s); the cache holds %s%s",
             max_size, len(report.removed), human_size(report.freed), human_size(report.size_after), kept)
