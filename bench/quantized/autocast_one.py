"""Child process (the bench extra's Python, which has ModelOpt): AutoCast on one quantized model.

    python -m bench.quantized.autocast_one IN OUT

`modelopt.onnx.autocast.convert_to_mixed_precision(onnx_path=IN, low_precision_type="fp16",
keep_io_types=True)`, every other argument its default (its range rule with its own reference run, its
graph sanitizer), then `onnx.save`; prints one JSON line {"seconds"} (the call and the save, timed here
so the child's start-up and imports are not charged). `keep_io_types=True`: trtpipe's recipes keep the
graph's float inputs and outputs as they are, and so the two outputs have the source's interface.
"""
from __future__ import annotations

import json
import logging
import sys
import time


def main(argv=None) -> int:
    import onnx
    from modelopt.onnx.autocast import convert_to_mixed_precision
    from modelopt.onnx.autocast.logging_config import configure_logging

    source, out = (argv or sys.argv[1:])[:2]
    logging.getLogger("modelopt.onnx").setLevel(logging.WARNING)
    configure_logging("WARNING")   # its INFO log writes one line per node
    start = time.perf_counter()
    converted = convert_to_mixed_precision(onnx_path=source, low_precision_type="fp16", keep_io_types=True)
    onnx.save(converted, out)
    print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
