"""`python -m lazygrad.viz trace.json ...`: a summary of saved PROFILE traces (time per stage, slowest kernels)."""

import json
import sys

from lazygrad.viz.profile import summary

for path in sys.argv[1:]:
    with open(path) as f:
        print(f"{path}:\n{summary(json.load(f))}")
