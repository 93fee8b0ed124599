"""N simulated builders sharing one S3 server, with and without the remote tier (a few minutes on 2 cores):

    python -m bench.fleet [--builders 2,3] [--record]

Needs the `test` extra (moto's server, boto3), as tests/cache_remote/ does.

For each N, N builders (builder.py: processes, each with its own HOME and empty local cache) run
the same 8-job sweep of the README's main command at once, first without a remote (each builds
alone), then with `cache.remote` on one moto S3 server on 127.0.0.1 (server.py), an empty prefix per
fleet. Measured per fleet: where each stage's result came from (local hit, remote hit, miss:
ran here), per stage and in all; how many times each distinct key was computed across the fleet;
bytes uploaded (the tier's log lines) and downloaded (the manifests), bytes left in the bucket;
the fleet's wall time (start to the last builder's end) and its CPU time (every builder, children
included); the seconds the manifests give the stages, summed by where their results came from
(a miss's is its computation, a remote hit's its download and checks); the remote tier's warning lines; and whether every builder's outputs of each job are the
same bytes as every other's, with and without the remote.

Not measured here: a real network (loopback has no latency, the 2 cores are shared by the builders
and the server), AWS or another store than moto, many hosts; tests/cache_remote/ covers faults.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from bench.fleet.builder import JOBS, Builder, bytes_moved, outputs_of, start_builder, wait_all, where_from
from bench.fleet.server import BUCKET, FleetServer, start_server

MODES = ("no_remote", "remote")


def run_fleet(server: FleetServer, folder: Path, count: int, mode: str) -> list[Builder]:
    remote = f"s3://{BUCKET}/{folder.name}" if mode == "remote" else None
    builders = [start_builder(folder / f"builder{i}", i, count, remote, server.env()) for i in range(count)]
    wait_all(builders)
    for builder in builders:
        if builder.exit_code != 0 or len(builder.jobs) != JOBS:
            raise SystemExit(f"{folder.name} builder {builder.index} failed (exit {builder.exit_code}, "
                             f"{len(builder.jobs)} jobs): {(builder.folder / 'stderr.txt').read_text()[-800:]}")
    return builders


def fleet_figures(builders: list[Builder], server: FleetServer, prefix: str, mode: str) -> dict:
    stages: dict[str, dict[str, int]] = {}
    keys: set[tuple[str, str]] = set()
    uploaded = downloaded = 0
    seconds = {"local": 0.0, "remote": 0.0, "miss": 0.0}
    for job in (job for b in builders for job in b.jobs):
        for stage in job["stages"]:
            counts = stages.setdefault(stage["name"], {"local": 0, "remote": 0, "miss": 0})
            counts[where_from(stage)] += 1
            seconds[where_from(stage)] += stage["seconds"]
            keys.add((stage["name"], stage["key"]))
        up, down = bytes_moved(job)
        uploaded, downloaded = uploaded + up, downloaded + down
    total = {where: sum(c[where] for c in stages.values()) for where in ("local", "remote", "miss")}
    executions = sum(total.values())
    warnings = sum(1 for b in builders for line in (b.folder / "stderr.txt").read_text().splitlines()
                   if line.startswith("cache.remote "))
    figures = {"wall_s": round(max(b.wall_s for b in builders), 1),
               "builder_wall_s": [round(b.wall_s, 1) for b in builders],
               "cpu_s": round(sum(b.cpu_s for b in builders), 1),
               "hits_local": total["local"], "hits_remote": total["remote"], "misses": total["miss"],
               "hit_pct": round(100 * (total["local"] + total["remote"]) / executions, 1),
               "distinct_keys": len(keys), "runs_per_key": round(total["miss"] / len(keys), 2),
               "uploaded_mb": round(uploaded / 1e6, 2), "downloaded_mb": round(downloaded / 1e6, 2),
               "remote_warning_lines": warnings,
               "miss_stage_s": round(seconds["miss"], 1), "remote_hit_stage_s": round(seconds["remote"], 1),
               "local_hit_stage_s": round(seconds["local"], 1),
               "per_miss_s": round(seconds["miss"] / max(total["miss"], 1), 2),
               "per_remote_hit_s": round(seconds["remote"] / max(total["remote"], 1), 2),
               "per_builder_cpu_s": round(sum(b.cpu_s for b in builders) / len(builders), 1)}
    figures.update({f"stage.{name}": [c["local"], c["remote"], c["miss"]] for name, c in stages.items()})
    if mode == "remote":
        objects, stored = server.stored_bytes(f"{prefix}/")
        figures.update({"bucket_objects": objects, "bucket_mb": round(stored / 1e6, 2)})
    return figures


def same_outputs(fleets: list[list[Builder]]) -> bool:
    """Every job's outputs are the same bytes in every builder of every fleet."""
    seen: dict[tuple, dict] = {}
    for job in (job for builders in fleets for b in builders for job in b.jobs):
        key, outputs = outputs_of(job)
        if seen.setdefault(key, outputs) != outputs:
            return False
    return len(seen) == JOBS


def print_table(figures: dict, counts: list[int]) -> None:
    print(f"{'fleet':18} {'wall s':>7} {'cpu s':>7} {'local':>6} {'remote':>7} {'miss':>5} {'hit %':>6} "
          f"{'runs/key':>8} {'up MB':>7} {'down MB':>8}")
    for count in counts:
        for mode in MODES:
            f = {k.split(".", 2)[2]: v for k, v in figures.items() if k.startswith(f"n{count}.{mode}.")}
            print(f"N={count} {mode:13} {f['wall_s']:7} {f['cpu_s']:7} {f['hits_local']:6} {f['hits_remote']:7} "
                  f"{f['misses']:5} {f['hit_pct']:6} {f['runs_per_key']:8} {f['uploaded_mb']:7} {f['downloaded_mb']:8}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builders", default="2,3", help="fleet sizes, comma-separated")
    parser.add_argument("--record", action="store_true", help="write bench/fleet/results.json")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.builders.split(",")]
    figures: dict = {}
    fleets = []
    server = start_server()
    try:
        with tempfile.TemporaryDirectory(prefix="trtpipe-fleet-", dir=os.environ.get("TMPDIR")) as scratch:
            for count in counts:
                for mode in MODES:
                    name = f"n{count}-{mode}"
                    print(f"fleet {name}: {count} builders x {JOBS} jobs ...", flush=True)
                    builders = run_fleet(server, Path(scratch) / name, count, mode)
                    fleets.append(builders)
                    found = fleet_figures(builders, server, name, mode)
                    figures.update({f"n{count}.{mode}.{k}": v for k, v in found.items()})
                for what in ("cpu_s", "wall_s", "misses"):
                    alone, shared = figures[f"n{count}.no_remote.{what}"], figures[f"n{count}.remote.{what}"]
                    figures[f"n{count}.{what}_saved_pct"] = round(100 * (1 - shared / alone), 1)
            figures["outputs_identical"] = int(same_outputs(fleets))
            figures["jobs"] = JOBS
    finally:
        server.stop()
    print_table(figures, counts)
    print(f"outputs identical across builders and fleets: {bool(figures['outputs_identical'])}")
    if args.record:
        from bench.common.results import write_results
        write_results("fleet", figures, command="python -m bench.fleet --record",
                      notes="N builders (processes, own HOME and empty cache) start at once, each running the "
                            "README's main command (built-in transformer) over 8 jobs in its own order; one moto "
                            "S3 server on 127.0.0.1 in the benchmark's process; stage.<name> is [local hits, "
                            "remote hits, misses]; build is deferred (no TensorRT); 2 shared cores")
    return 0 if figures["outputs_identical"] else 1
