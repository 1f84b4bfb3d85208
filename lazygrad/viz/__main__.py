"""`python -m lazygrad.viz FILE`: open a saved run (a VIZ record, lazygrad_viz.json, or a PROFILE trace) in the VIZ
web page. `--summary FILE...` prints time per stage and the slowest kernels instead."""

import argparse

from lazygrad.viz.profile import summary
from lazygrad.viz.record import load
from lazygrad.viz.server import serve_until_interrupted

parser = argparse.ArgumentParser(prog="python -m lazygrad.viz", description=__doc__)
parser.add_argument("files", nargs="+", metavar="FILE", help="lazygrad_viz.json (VIZ=1) or a PROFILE=1 trace")
parser.add_argument("--summary", action="store_true", help="print a text summary of each file instead of serving")
args = parser.parse_args()
if not args.summary and len(args.files) > 1:
    parser.error("the page shows one run: give one file (or --summary for several)")
try:
    runs = [(path, load(path)) for path in args.files]
except (OSError, ValueError) as e:  # a missing file, not JSON, or JSON of another kind
    parser.error(str(e))
if args.summary:
    for path, run in runs:
        print(f"{path}:\n{summary(run['trace'])}")
else:
    serve_until_interrupted(runs[0][1])
