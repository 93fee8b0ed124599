"""bench/autocast/results.json from what `python -m bench.autocast` prints (report.py's tables).

    python -m bench.autocast --record                    # run, print, and record what was printed
    python -m bench.autocast.record PRINTED.txt          # record an earlier run's printed output
    python -m bench.autocast.record bench/README.md      # ... the one saved there (its block "AutoCast: ...")

Why from the printed report and not from the result rows: the printed tables are what the
docs quote, so the figures and the printout cannot disagree, and an earlier run's saved output
(bench/README.md keeps one) converts without rerunning a benchmark that needs the `bench` extra.

Keys (docs/figures.md#autocast): `<model>.<fact>` for the whole-path table (`nodes`,
`load_save_s`, `trtpipe_s`, `trt_x_io`, `acm_s`, `acd_s`, `acm_x_trtpipe`) and the plan tables
(`casts`, `fp32`, `flops_pct`, and `acm.*` / `acd.*` for AutoCast matched / defaults), the
done-when allowance (`allowed`, `raw_casts`); `<model>/<output>.rel_l2`, `.acm.rel_l2`,
`.acd.rel_l2`, `.vs_acm` and `.vs_acd` ([ratio, low, high]); `vs_acm.better` ... counts of
verdicts; `seconds_total`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

NUM = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"


def _number(text: str):
    text = text.strip().rstrip("%")
    return None if text in ("-", "") else (int(text) if re.fullmatch(r"-?\d+", text) else float(text))


def figures_from_report(text: str) -> dict:
    figures: dict = {}
    section = None
    verdicts = {"acm": {"better": 0, "same": 0, "worse": 0}, "acd": {"better": 0, "same": 0, "worse": 0}}
    for line in text.splitlines():
        if (total := re.search(r"benchmark total ([\d.]+) s", line)):
            figures["seconds_total"] = float(total.group(1))
        if line.startswith("Whole path from the raw export"):
            section = "time"
        elif line.startswith("Plans: trtpipe (its recipe) / AutoCast matched"):
            section = "acm"
        elif line.startswith("Plans: trtpipe (its recipe) / AutoCast defaults"):
            section = "acd"
        elif line.startswith("Accuracy on held-out inputs"):
            section = "accuracy"
        elif line.startswith(("Targets", "Issue 16")):
            section = "done" if line.startswith("Issue 16") else None
        if not line.strip() or line.startswith(("model ", "---")):
            continue
        if section == "time" and "|" in line:
            # model nodes | load+save trtpipe (runs) trt/io | AC matched (runs) AC defaults (runs) | ratios
            head, ours, theirs, _ = (part.split() for part in line.split("|"))
            if len(head) != 2:
                continue
            model = head[0]
            figures[f"{model}.nodes"] = int(head[1])
            figures[f"{model}.load_save_s"] = _number(ours[0])
            figures[f"{model}.trtpipe_s"] = _number(ours[1])
            figures[f"{model}.trt_x_io"] = _number(ours[3])
            theirs = [cell for cell in theirs if not cell.startswith("(")]
            matched, defaults = _number(theirs[0]), _number(theirs[1])
            if matched is not None:
                figures[f"{model}.acm_s"] = matched
                figures[f"{model}.acd_s"] = defaults
                figures[f"{model}.acm_x_trtpipe"] = round(matched / figures[f"{model}.trtpipe_s"], 3)
        elif section in ("acm", "acd") and "|" in line:
            model, casts, fp32, flops, _ = (part.strip() for part in line.split("|"))
            for fact, cell in (("casts", casts), ("fp32", fp32), ("flops_pct", flops)):
                ours, theirs = (_number(x) for x in cell.split("/"))
                figures[f"{model}.{fact}"] = ours
                if theirs is not None:
                    figures[f"{model}.{section}.{fact}"] = theirs
        elif section == "accuracy" and "|" in line:
            head, errors, vs_matched, vs_defaults, _ = (part.strip() for part in line.split("|"))
            model, output = head.split()[:2]
            key = f"{model}/{output}"
            for name, value in zip(("rel_l2", "acm.rel_l2", "acd.rel_l2"), errors.split("/")):
                if _number(value) is not None:
                    figures[f"{key}.{name}"] = _number(value)
            for name, cell in (("acm", vs_matched), ("acd", vs_defaults)):
                found = re.match(rf"({NUM}) \[({NUM}), ({NUM})\] (better|same within noise|worse)", cell)
                if found:
                    figures[f"{key}.vs_{name}"] = [float(found.group(i)) for i in (1, 2, 3)]
                    verdicts[name][found.group(4).split()[0]] += 1
        elif section == "done":
            found = re.match(rf"\s+(\S+)\s+Casts (\d+)(?: \((\d+) of the raw export\))? <= (\d+) \+ (\d+)", line)
            if found:
                figures[f"{found.group(1)}.allowed"] = int(found.group(5))
                figures[f"{found.group(1)}.raw_casts"] = int(found.group(3) or 0)
    for name, counts in verdicts.items():
        figures.update({f"vs_{name}.{verdict}": count for verdict, count in counts.items()})
    return figures


def record(printed: str, command: str, notes: str = "", converted_from: str | None = None) -> None:
    from bench.common.results import write_results

    write_results("autocast", figures_from_report(printed), command=command, notes=notes,
                  converted_from=converted_from, owns=lambda key: not key.startswith("whole_path."))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: python -m bench.autocast.record PRINTED.txt  (the output of python -m bench.autocast)")
    text = Path(argv[0]).read_text()
    blocks = [block for block in re.split(r"^```\w*$", text, flags=re.M)[1::2] if block.lstrip("\n").startswith("AutoCast:")]
    blocks = [block.strip("\n") for block in blocks]
    record(blocks[0] if blocks else text, command=f"python -m bench.autocast.record {argv[0]}",
           notes="converted from the saved printed output of an earlier `python -m bench.autocast` run "
                 "(its first line names the AutoCast version and the run's total seconds); not rerun here",
           converted_from=f"{argv[0]}: {(blocks[0] if blocks else text).splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
