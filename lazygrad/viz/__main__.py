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
if args.summary:
    for path in args.files:
        print(f"{path}:\n{summary(load(path)['trace'])}")
elif len(args.files) > 1:
    parser.error("the page shows one run: give one file (or --summary for several)")
else:
    serve_until_interrupted(load(args.files[0]))
