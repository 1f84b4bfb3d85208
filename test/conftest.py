import os

# every kernel the tests build is checked against the IR rules (lazygrad/uop/spec.py) between codegen passes
os.environ.setdefault("SPEC", "1")
