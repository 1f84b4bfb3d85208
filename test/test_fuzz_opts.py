"""Random opt lists on real kernels: what BEAM tries (codegen/search.py's `actions`, applied one after another), each
optimized kernel built, checked against the IR rules and run against the unoptimized kernel on the same inputs.

The other fuzzers see the heuristic's opts only; BEAM=2 users get any opt list the action space allows, and a list
that fails to compile is dropped by the search without a word (a slower kernel, and a code generator bug nobody
sees). The kernels are those of test_fuzz.py's op chains (`--source chains`, dtypes and movement) and of
test_fuzz_kernels.py's workloads (`--source kernels`, sizes around the optimizer's thresholds). CI runs a few seeds
of each; a longer hunt is a script:

    python test/test_fuzz_opts.py --source chains --cases 400 --seed 5
    python test/test_fuzz_opts.py --source kernels --cases 300 --seed 10
"""

from __future__ import annotations

import argparse
import random

import pytest

from lazygrad import Device, Tensor
from lazygrad.codegen import get_program
from lazygrad.codegen.kernel import KernelOptError, Opt
from lazygrad.codegen.search import _Bench, _close, _kernel, actions
from lazygrad.uop.ops import Ops, UOp
from test import test_fuzz, test_fuzz_kernels
from test.helpers import fuzz_failures

LISTS_PER_KERNEL = 6  # random opt lists tried on each kernel of a case


def kernels_of(source: str, seed: int) -> tuple[str, list[UOp]]:
    """A fuzzer case's description and the ASTs of its kernels (forward and, for workloads, gradients too)."""
    if source == "chains":
        x0, steps = test_fuzz.gen_case(seed)
        t, lib = Tensor(x0), test_fuzz.Lib(False)
        for s in steps:
            t = s.fn(t, lib)
        outs, what = [t], test_fuzz.describe(seed, x0, steps)
    else:
        case = test_fuzz_kernels.gen_case(seed)
        outs, what = case.run(Tensor, [Tensor(x) for x in case.inputs]), f"seed {seed}: {case.name}"
    outs = [o for o in outs if o.numel()]
    schedule = Tensor.schedule(*outs) if outs else []
    return what, [si.ast for si in schedule if si.ast.op is Ops.SINK]


def random_opts(ast: UOp, rng: random.Random) -> list[Opt]:
    """1 to 4 opts, each drawn from the actions left after the ones before (those that apply)."""
    renderer, opts = Device["CPU"].renderer, []
    for _ in range(rng.randint(1, 4)):
        try:
            choices = actions(_kernel(ast, renderer, opts))
        except KernelOptError:
            break
        if not choices:
            break
        try:
            _kernel(ast, renderer, cand := opts + [rng.choice(choices)])
            opts = cand
        except KernelOptError:
            pass
    return opts


def check(seed: int, source: str) -> tuple[str, str | None]:
    what, asts = kernels_of(source, seed)
    renderer, dev, rng = Device["CPU"].renderer, Device["CPU"], random.Random(seed)
    for i, ast in enumerate(asts):
        bench = _Bench(ast, renderer)
        base = get_program(ast, renderer, [])
        ref, _ = bench.run(base, dev.compiler.compile(base.src), reps=0)
        dts = [bench.bufs[j].dtype for j in sorted(bench.outs)]
        for _ in range(LISTS_PER_KERNEL):
            if not (opts := random_opts(ast, rng)):
                continue
            try:
                spec = get_program(ast, renderer, opts)
                outs, _ = bench.run(spec, dev.compiler.compile(spec.src), reps=0)
            except KernelOptError:
                continue
            except Exception as e:  # a compile or IR-rule failure is a finding, as a wrong value is
                return what, f"kernel {i} with {opts}: {type(e).__name__}: {str(e).splitlines()[0]}"
            if not all(_close(o, r, dt) for o, r, dt in zip(outs, ref, dts)):
                return what, f"kernel {i} with {opts}: values differ from the unoptimized kernel"
    return what, None


CI_CASES = 12


@pytest.mark.parametrize("source", ["chains", "kernels"])
def test_fuzz_opt_lists(source: str) -> None:
    failures = fuzz_failures(range(CI_CASES), lambda seed: check(seed, source))
    assert not failures, f"{len(failures)} of {CI_CASES} cases failed:\n" + "\n".join(failures[:10])


# (source, seed) that once failed in a hunt, run in CI as they are: what broke
FOUND_IN_HUNTS = {
    ("chains", 120): "a select of two int64 compares under an upcast: gcc's 8-byte compare type met our mask type",
}


@pytest.mark.parametrize("source,seed", list(FOUND_IN_HUNTS))
def test_fuzz_opt_cases_found_in_hunts(source: str, seed: int) -> None:
    what, failure = check(seed, source)
    assert failure is None, f"{what}: {failure} ({FOUND_IN_HUNTS[source, seed]})"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=["chains", "kernels"], default="chains")
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=10_000)
    args = ap.parse_args()
    fuzz_failures(range(args.seed, args.seed + args.cases), lambda seed: check(seed, args.source), hunt=True)
