"""Issue 16's "done when", judged per model from one benchmark run (precision_vs_autocast.py's results).

Per model, one line and a verdict:
- Casts: trtpipe's written Casts <= AutoCast defaults' Casts + the allowance, the
  float graph inputs and outputs trtpipe keeps in the raw export's type and
  AutoCast's defaults turn to FP16 (`kept_float_io`, read off both output files by
  output_facts.kept_float_io, not counted by hand);
- accuracy: no output "worse" than AutoCast's defaults under the paired,
  noise-aware verdict (paired_accuracy.py) on the held-out samples;
- PASS when both hold, FAIL when one does not, n/a when AutoCast's defaults did not
  run on the model (unavailable, skipped by depth, or failed: the reason is printed).
The FP16 share of the MatMul/Gemm/Conv FLOPs of both outputs is printed next to
them for context (a tool can buy accuracy with FP32 FLOPs); it is not judged.

Decision: "Casts" are every Cast in each tool's output, the raw export's own
included: they run in the engine like any other, and AutoCast re-decides the raw
export's Casts, so both counts measure the same thing. The `mixed_precision`
recipe keeps the author's Casts except dead or exact no-op ones
(trtpipe/precision/materialize/redundant_casts.py); how many of trtpipe's are the author's is
shown as "(n of the raw export)".
"""

from __future__ import annotations

from bench.autocast.paired_accuracy import WORSE, paired_verdict


def verdicts_against(result: dict, run: str) -> dict[str, object] | None:
    """Per output, the paired verdict of trtpipe against AutoCast `run`; None if either side is missing."""
    ours, theirs = result["trtpipe"], result[run]
    if ours.get("status") != "ok" or theirs.get("status") != "ok":
        return None
    return {name: paired_verdict([float(v) for v in errors], [float(v) for v in theirs["rel_l2_samples"][name]])
            for name, errors in ours["rel_l2_samples"].items()}


def done_when_rows(results: list[dict]) -> list[dict]:
    """One row per model: the counts, the verdicts and PASS / FAIL / n/a."""
    rows = []
    for r in results:
        ours, theirs = r["trtpipe"], r["autocast_defaults"]
        row = {"model": r["model"]}
        if ours.get("status") != "ok":  # trtpipe failing on a model is a failure, never "n/a"
            row.update(verdict="FAIL", why=f"trtpipe {ours.get('status')}", casts_ok=False, worse=[])
            rows.append(row)
            continue
        if theirs.get("status") != "ok":
            row.update(verdict="n/a", why=f"AutoCast defaults {theirs.get('status')}")
            rows.append(row)
            continue
        allowance = r["kept_float_io"] or []
        written, authored = ours["casts"], ours["casts"] - ours["casts_added"]
        casts_ok = written <= theirs["casts"] + len(allowance)
        accuracy = verdicts_against(r, "autocast_defaults")
        worse = [name for name, v in accuracy.items() if v.verdict == WORSE]
        flops = f"{ours.get('fp16_flop_share', float('nan')):.1%} vs {theirs.get('fp16_flop_share', float('nan')):.1%}"
        row.update(written=written, authored=authored, autocast=theirs["casts"], allowance=allowance, fp16_flops=flops,
                   casts_ok=casts_ok, accuracy=accuracy, worse=worse,
                   verdict="PASS" if casts_ok and not worse else "FAIL")
        rows.append(row)
    return rows


def print_done_when(results: list[dict]) -> bool:
    """Print the per-model lines; True when no model FAILs and at least one was compared."""
    rows = done_when_rows(results)
    print("\nIssue 16 \"done when\", per model: trtpipe's default recipe vs AutoCast's defaults, same raw export")
    print("  Casts: trtpipe writes <= AutoCast defaults' Casts + kept float I/O (inputs/outputs trtpipe keeps in")
    print("  their type and AutoCast turns FP16); accuracy: no output worse (paired rel_l2, sign-test 95% interval)")
    for row in rows:
        if "why" in row:
            print(f"  {row['model']:<16} {row['verdict']} ({row['why']})")
            continue
        authored = f" ({row['authored']} of the raw export)" if row["authored"] else ""
        casts = (f"Casts {row['written']}{authored} {'<=' if row['casts_ok'] else '>'} "
                 f"{row['autocast']} + {len(row['allowance'])}")
        accuracy = "; ".join(f"{name} {v.verdict} ({v.ratio:.3f} [{v.low:.3f}, {v.high:.3f}])"
                             for name, v in row["accuracy"].items())
        print(f"  {row['model']:<16} {casts:<38} | FP16 FLOPs {row['fp16_flops']} | {accuracy}")
    for row in rows:
        if "why" not in row:
            problems = ([] if row["casts_ok"] else ["more Casts"]) + [
                f"{name} less accurate" + (f" (non-finite on {row['accuracy'][name].broken} inputs where AutoCast "
                                           "is finite)" if row["accuracy"][name].broken else "")
                for name in row["worse"]]
            print(f"  {row['model']:<16} {row['verdict']}" + (f": {', '.join(problems)}" if problems else ""))
    compared = [row for row in rows if row["verdict"] != "n/a"]
    if not compared:
        # Decision: nothing compared is not a pass (AutoCast unavailable or failing everywhere).
        print("  no model was compared with AutoCast's defaults: the done-when is not shown, not passed")
        return False
    return all(row["verdict"] != "FAIL" for row in rows)
