"""Regenerate trtpipe's TensorRT ONNX-parser operator lists (trtpipe/trt/parser/onnx_parser_ops/<version>.json).

Source of truth: onnx-tensorrt's `docs/operators.md` (the parser's support matrix: operator,
Y/N, supported types, restrictions) at the commit that NVIDIA/TensorRT pins as its
`parsers/onnx` submodule for a release, plus the plugin table of NVIDIA/TensorRT's
`plugin/README.md` at that release (the plugins `libnvinfer_plugin` registers, which the
parser finds for ops it has no importer for: Polygraphy and trtexec load that library
before parsing).

Two ways to run it:

    # from git checkouts (e.g. fetched snapshots of NVIDIA/TensorRT and onnx/onnx-tensorrt)
    python -m bench.trt.parser_ops --tensorrt-git TensorRT/.git --tag v10.16 \
        --onnx-tensorrt-git onnx-tensorrt/.git --out trtpipe/trt/parser/onnx_parser_ops/10.16.json

    # from files already saved (record where they came from)
    python -m bench.trt.parser_ops --operators-md operators.md --commit <sha> --date 2026-03-25 \
        --plugins-md plugin_README.md --plugins-ref v10.16 --pinned-by "NVIDIA/TensorRT v10.16 parsers/onnx" \
        --out trtpipe/trt/parser/onnx_parser_ops/10.16.json

Decisions:
- The table is parsed leniently (cells split on `|`, whitespace stripped; a missing
  trailing `|` is fine): the files are hand-edited and not every row is closed.
- "Supported" is the first token of the second cell (`Y`, `Y [EXPERIMENTAL]` -> True).
  The third cell is a list of types only when every entry looks like a type
  (FP32, INT64, BOOL...); otherwise it is a note (DynamicQuantizeLinear's "Not supported.
  ... model local function") and is kept as such.
- The TensorRT version is the one the file states ("TensorRT 10.16 supports operators..."),
  never the file name: a mismatch with --tag is an error.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

TYPE_TOKEN = re.compile(r"^(FP|INT|UINT|BF)\d+$|^BOOL$|^DOUBLE$")
HEADER = re.compile(r"TensorRT\s+(\d+(?:\.\d+)*)\s+supports operators\s+(?:in the inclusive range of opset\s+(\d+)\s+"
                    r"to opset\s+(\d+)|up to Opset\s+(\d+))", re.IGNORECASE)
FORMAT = 1


def parse_operators_md(text: str) -> dict:
    """{"tensorrt_version", "opset_range", "ops": {op: {"supported", "types", "restrictions"}}}."""
    header = HEADER.search(text)
    if header is None:
        raise ValueError("operators.md does not state 'TensorRT <version> supports operators ...'")
    version = header.group(1)
    opsets = [int(header.group(2)), int(header.group(3))] if header.group(2) else [None, int(header.group(4))]
    ops: dict[str, dict] = {}
    in_table = False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
        if cells is None:
            in_table = in_table and not line.startswith("#")
            continue
        if cells[0].lower() == "operator":
            in_table = True
            continue
        if not in_table or set(cells[0]) <= set("-: "):
            continue
        name, flag = cells[0], cells[1] if len(cells) > 1 else ""
        third = cells[2] if len(cells) > 2 else ""
        entries = [t for t in re.split(r"[,\s]+", third) if t]  # 10.0's Split row lacks a comma: "INT64 BOOL"
        is_types = bool(entries) and all(TYPE_TOKEN.match(t) for t in entries)
        restrictions = " ".join(c for c in cells[3:] if c)
        if third and not is_types:
            restrictions = " ".join(x for x in (third, restrictions) if x)
        ops[name] = {"supported": flag.upper().startswith("Y"), "types": entries if is_types else [],
                     "restrictions": restrictions}
    if not ops:
        raise ValueError("operators.md has no operator table")
    return {"tensorrt_version": version, "opset_range": opsets, "ops": dict(sorted(ops.items()))}


def parse_plugin_readme(text: str) -> dict[str, list[str]]:
    """Plugin name -> versions, from NVIDIA/TensorRT plugin/README.md's Contents table."""
    names: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not line.lstrip().startswith("|") or cells[1] in ("Name", "---") or not cells[1]:
            continue
        if set(cells[1]) <= set("-: "):
            continue
        versions = {v.strip() for v in cells[2].split(",") if v.strip().isdigit()}
        names.setdefault(cells[1], set()).update(versions)
    return {name: sorted(v, key=int) for name, v in sorted(names.items())}


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True).stdout


def document(operators_text: str, source: dict, plugins_text: str | None, plugins_source: dict | None) -> dict:
    table = parse_operators_md(operators_text)
    doc = {"format": FORMAT, "tensorrt_version": table["tensorrt_version"], "opset_range": table["opset_range"],
           "source": {**source, "tensorrt_version_stated": table["tensorrt_version"]},
           "generated_by": "python -m bench.trt.parser_ops", "ops": table["ops"]}
    if plugins_text is not None:
        doc["plugins"] = {"source": plugins_source, "names": parse_plugin_readme(plugins_text)}
    return doc


def dumps(doc: dict) -> str:
    """Indented JSON with one line per operator and per plugin, so a new release diffs by line."""
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key == "ops" or key == "plugins":
            inner = value if key == "ops" else value["names"]
            rows = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in inner.items()]
            body = "{\n" + ",\n".join(rows) + "\n }"
            if key == "plugins":
                body = '{"source": ' + json.dumps(value["source"]) + ', "names": ' + body + "}"
            lines.append(f" {json.dumps(key)}: {body}{comma}")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}{comma}")
    return "\n".join(lines) + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tensorrt-git", help="git dir of NVIDIA/TensorRT (reads parsers/onnx and plugin/README.md)")
    ap.add_argument("--tag", help="NVIDIA/TensorRT tag, e.g. v10.16")
    ap.add_argument("--onnx-tensorrt-git", help="git dir of onnx/onnx-tensorrt holding the pinned commit")
    ap.add_argument("--operators-md", type=Path, help="a saved docs/operators.md")
    ap.add_argument("--commit", help="onnx/onnx-tensorrt commit the saved operators.md is from")
    ap.add_argument("--date", help="date of that commit or of the TensorRT release that pins it")
    ap.add_argument("--pinned-by", default=None)
    ap.add_argument("--plugins-md", type=Path, help="a saved NVIDIA/TensorRT plugin/README.md")
    ap.add_argument("--plugins-ref", help="the NVIDIA/TensorRT tag that plugin README is from")
    ap.add_argument("--note", help="how the text was obtained, recorded in the source block")
    args = ap.parse_args(argv)

    plugins_text = plugins_source = None
    commit, date, pinned_by = args.commit, args.date, args.pinned_by
    if args.tensorrt_git:
        if not args.tag:
            ap.error("--tensorrt-git needs --tag")
        commit = _git(args.tensorrt_git, "ls-tree", args.tag, "parsers/onnx").split()[2]
        date = date or _git(args.tensorrt_git, "log", "-1", "--format=%cs", args.tag).strip()
        pinned_by = pinned_by or f"NVIDIA/TensorRT {args.tag} (submodule parsers/onnx)"
        plugins_text = _git(args.tensorrt_git, "show", f"{args.tag}:plugin/README.md")
        plugins_source = {"repository": "NVIDIA/TensorRT", "path": "plugin/README.md", "ref": args.tag}
    if args.plugins_md:
        plugins_text = args.plugins_md.read_text()
        plugins_source = {"repository": "NVIDIA/TensorRT", "path": "plugin/README.md", "ref": args.plugins_ref}
    if args.operators_md:
        operators_text = args.operators_md.read_text()
    elif args.onnx_tensorrt_git and commit:
        operators_text = _git(args.onnx_tensorrt_git, "show", f"{commit}:docs/operators.md")
        date = date or _git(args.onnx_tensorrt_git, "log", "-1", "--format=%cs", commit).strip()
    else:
        ap.error("give --operators-md FILE, or --onnx-tensorrt-git with --tensorrt-git/--tag or --commit")
    if not commit:
        ap.error("the onnx-tensorrt commit is unknown: give --commit")
    source = {"repository": "onnx/onnx-tensorrt", "path": "docs/operators.md", "commit": commit,
              "date": date, "date_is": "commit date of the NVIDIA/TensorRT release tag that pins it"
              if args.tensorrt_git else "given with --date", "pinned_by": pinned_by}
    if args.note:
        source["note"] = args.note
    doc = document(operators_text, source, plugins_text, plugins_source)
    stated = doc["tensorrt_version"]
    if args.tag and args.tag.lstrip("v").split(".")[:2] != stated.split(".")[:2]:
        print(f"error: {args.tag} pins an operators.md that states TensorRT {stated}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dumps(doc))
    supported = sum(1 for op in doc["ops"].values() if op["supported"])
    print(f"{args.out}: TensorRT {stated}, {len(doc['ops'])} ops ({supported} supported), "
          f"{len(doc.get('plugins', {}).get('names', {}))} plugins; onnx-tensorrt {commit[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
