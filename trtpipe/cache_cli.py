"""`trtpipe-cache`: see the artifact cache and bound it (info, prune, clear).

As ccache -s / -M / -C and `pip cache`: `info` shows where the cache is, its size, its
entries per stage and their oldest and newest last use; `prune --max-size SIZE` and/or
`--older-than AGE` delete least recently used entries first; `clear` deletes every entry.
An entry a running trtpipe uses or computes is never deleted: it is skipped and counted.
The cache is the one trtpipe uses: `--dir PATH` (as cache.dir=PATH), else TRTPIPE_CACHE,
else $XDG_CACHE_HOME/trtpipe/artifacts or ~/.cache/trtpipe/artifacts.

A cache.dir that is a symbolic link to a cache is managed at its target.

Exit codes: 0 done, 2 a user error (an unknown size or age, a folder that is not a trtpipe cache,
a folder of another user's cache this user may not read or change).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from trtpipe.errors import EXIT_OK, EXIT_USER_ERROR, UserError, exit_reader_gone

PROG = "trtpipe-cache"


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        lines = args.command(args)
    except UserError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    try:
        for line in lines:
            print(line, flush=True)
    except BrokenPipeError:  # `trtpipe-cache info | head -1`: 141, no traceback
        exit_reader_gone()
    sys.exit(EXIT_OK)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", help="the cache folder (default: TRTPIPE_CACHE, else the user cache directory)")
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(required=True, metavar="{info,prune,clear}")
    info = commands.add_parser("info", parents=[common], help="location, size, entries per stage, oldest/newest use")
    info.add_argument("--json", action="store_true", help="print the numbers as JSON")
    info.set_defaults(command=_info)
    prune = commands.add_parser("prune", parents=[common], help="delete least recently used entries")
    prune.add_argument("--max-size", help="delete until the cache holds at most SIZE (500M, 2G, 1.5Gi)")
    prune.add_argument("--older-than", help="delete entries last used longer ago than AGE (12h, 7d, 2w)")
    prune.set_defaults(command=_prune)
    clear = commands.add_parser("clear", parents=[common], help="delete every entry")
    clear.set_defaults(command=_clear)
    return parser


def _root(args) -> Path:
    from trtpipe.cache.cache_home import default_cache_dir

    return Path(args.dir).expanduser().absolute() if args.dir else default_cache_dir()


def _info(args) -> list[str]:
    from trtpipe.cache.manage import human_size, open_cache, scan

    where = _root(args)
    root = open_cache(where)
    found = scan(root) if root else None
    entries = found.entries if found else []
    stages: dict[str, dict] = {}
    for entry in entries:
        stage = stages.setdefault(entry.stage, {"entries": 0, "bytes": 0})
        stage["entries"] += 1
        stage["bytes"] += entry.size
    numbers = {
        "location": str(where), "bytes": found.total if found else 0,
        "entries": len(entries), "entries_bytes": found.entries_size if found else 0,
        "stages": dict(sorted(stages.items())),
        "oldest_use": entries[0].last_use if entries else None, "newest_use": entries[-1].last_use if entries else None,
    }
    if args.json:
        return [json.dumps(numbers)]
    lines = [f"location     {where}{'' if root else '  (no cache yet)'}",
             f"total        {human_size(numbers['bytes'])} ({numbers['bytes']} bytes; built-in models, timing "
             "cache and lock files included)",
             f"entries      {len(entries)}, {human_size(numbers['entries_bytes'])}"]
    for name, stage in numbers["stages"].items():
        lines.append(f"  {name:15} {stage['entries']:5} entries  {human_size(stage['bytes']):>10}")
    if entries:
        lines.append(f"oldest use   {_when(entries[0].last_use)}")
        lines.append(f"newest use   {_when(entries[-1].last_use)}")
    return lines


def _prune(args) -> list[str]:
    from trtpipe.cache.manage import parse_age, parse_size

    if args.max_size is None and args.older_than is None:
        raise UserError("prune needs a bound", f"{PROG} prune --max-size 2G  (or --older-than 7d)")
    max_size = None if args.max_size is None else parse_size(args.max_size, "--max-size")
    older_than = None if args.older_than is None else parse_age(args.older_than, "--older-than")
    return _delete(args, max_size=max_size, older_than=older_than)


def _clear(args) -> list[str]:
    return _delete(args, everything=True)


def _delete(args, **bounds) -> list[str]:
    from trtpipe.cache.manage import human_size, open_cache, prune

    root = open_cache(_root(args))
    if root is None:
        return [f"{PROG}: no cache at {_root(args)}: nothing to delete"]
    report = prune(root, **bounds)
    lines = [f"{PROG}: deleted {len(report.removed)} entries ({human_size(report.freed)}); "
             f"the cache holds {human_size(report.size_after)} ({report.size_after} bytes)"]
    if report.held:
        lines.append(f"{PROG}: kept {len(report.held)} entries a running trtpipe holds: "
                     + ", ".join(f"{e.stage}/{e.key[:12]}" for e in report.held))
    return lines


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


if __name__ == "__main__":
    main()
