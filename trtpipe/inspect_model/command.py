"""`trtpipe-inspect MODEL [--json] [--tensorrt-version V]` (also `trtpipe inspect MODEL ...`).

Decisions:
- No stage runs and nothing is written: the model is read with its weights left on disk, each
  stage's default is previewed in memory (stage_preview.py). So it needs no config, no Hydra,
  no cache, and answers in about the time `polygraphy inspect model` takes (bench/inspect).
- Imports are lazy (inside `main`): `--help` and a bad path answer before onnx is imported.
- Bad input (missing, a folder, empty, not ONNX, unreadable external data) is one line on stderr,
  exit 2 (errors.py), with the Fix for this command: load_model's own Fix names `model.path`,
  the run's key, so its problem is kept and its Fix replaced.
- `--json` prints the report as one JSON document (the dict the text is drawn from), for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trtpipe.errors import EXIT_OK, EXIT_USER_ERROR, UserError, exit_reader_gone

PROG = "trtpipe-inspect"
PATH_FIX = "give trtpipe-inspect the path of an .onnx file"


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        report = inspect_model(Path(args.model), args.tensorrt_version)
    except UserError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        if args.json:
            print(json.dumps({"status": "user_error", "exit_code": EXIT_USER_ERROR, "error": str(error)}))
        sys.exit(EXIT_USER_ERROR)
    try:
        if args.json:
            print(json.dumps(report, indent=1))
        else:
            from trtpipe.inspect_model.report_text import report_lines

            print("\n".join(report_lines(report)), flush=True)
    except BrokenPipeError:  # `trtpipe-inspect m.onnx | head`: 141, no traceback
        exit_reader_gone()
    sys.exit(EXIT_OK)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="What is in an ONNX model and what each trtpipe stage "
                                                            "would do with it by default; no stage runs, nothing "
                                                            "is written.")
    parser.add_argument("model", help="the .onnx file (its external data next to it)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--tensorrt-version", help="check ops against this TensorRT release's parser list "
                                                   "(default: the newest shipped list), as build.tensorrt_version")
    return parser


def inspect_model(path: Path, tensorrt_version: str | None = None) -> dict:
    """The report: `model` (model_facts.py) and `stages` (stage_preview.py)."""
    from trtpipe.inspect_model.model_facts import model_facts
    from trtpipe.inspect_model.stage_preview import (parser_preview, precision_preview, sanitize_preview,
                                                     upgrade_preview)

    model = _load(path)
    facts = model_facts(model, path)
    return {"model": facts, "stages": {
        "sanitize": sanitize_preview(model),
        "upgrade_opset": upgrade_preview(model),
        "precision": precision_preview(model, facts["inputs"]),
        "parser": parser_preview(model, tensorrt_version),
    }}


def _load(path: Path):
    from trtpipe.onnxmodel.onnx_io import load_model

    try:
        return load_model(path, weights_on_disk=True)
    except UserError as error:  # its problem names the file; its Fix names the run's model.path
        raise UserError(error.problem, PATH_FIX) from None
