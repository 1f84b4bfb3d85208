"""Cold first run: the first digits-CNN training step and the first SmolLM2 prompt with no disk cache (CACHELEVEL=0),
each in a fresh process, best of --reps. Split into Python codegen (AST -> C source) and C compiler time.

    python bench/compile.py [--reps 3] [--baseline PATH]
    python bench/compile.py --timeline llm|cnn [--baseline PATH]
    python bench/compile.py --kernels llm|cnn [--reps 3]

--baseline PATH adds rows for the lazygrad of another checkout (e.g. `git worktree add /tmp/base main`), run the
same way in the same run.

Columns: wall seconds of the step (schedule + codegen + compile + run), kernels compiled, ms per kernel, codegen
seconds (summed over kernels), compiler seconds (wall time during which at least one compiler process ran, so
compilers running side by side count once), and the CPU seconds the step took in all (this process's threads and
every compiler process): on a machine shared with other work the wall time also counts the time the neighbours held
the cores, the CPU seconds do not. tinygrad 0.14 (DEV=CPU) runs the same CNN step when it is installed.

--timeline prints where one cold run's time goes instead (one process per tree, best of --reps by wall time): per
schedule that compiles (and build ahead, engine/realize.py's compile_ahead), when it starts and ends, its kernels'
code generation, each compiler call on the worker threads (from its process's start, which may precede its source,
to the shared object), and how long it waited for the compilers after generating its last kernel, then per worker its
ms compiling and idle at the end (while another worker still compiled); the schedules that compile nothing (a
cached schedule run again, as SmolLM2's later layers) are summed between them.

--kernels prints what each kernel of one cold run costs the C compiler: each built alone (compiler, assembler and
link, the least CPU time of --reps builds, less that of a one-line kernel's build, which is every compiler call's start
and setup), heaviest first, with its bytes of C, then the kernels that differ only in integer constants (a family
could be one binary with those as arguments).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.environ.get("BENCH_LAZYGRAD", REPO))  # a child measuring --baseline imports that lazygrad


class IntervalClock:
    """Summed and covered (union) time of possibly overlapping calls, from any thread."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    def wrap(self, fn):
        def timed(*args, **kwargs):
            st = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spans.append((st, time.perf_counter()))

        return timed

    def total(self) -> float:
        return sum(e - s for s, e in self.spans)

    def covered(self) -> float:
        out, end = 0.0, float("-inf")
        for s, e in sorted(self.spans):
            if e > end:
                out += e - max(s, end)
                end = e
        return out


def cpu_seconds() -> float:
    """CPU seconds of this process's threads and of its finished child processes (the compilers) so far."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class Timeline:
    """Spans (kind, thread, start, end, detail) of one run: schedules run, builds ahead, kernels generated, compiler
    calls."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, int, float, float, object]] = []

    def wrap(self, kind: str, fn, detail=lambda out, *a: None):
        def timed(*args, **kwargs):
            st, out = time.perf_counter(), None
            try:
                out = fn(*args, **kwargs)
                return out
            finally:
                self.spans.append((kind, threading.get_ident(), st, time.perf_counter(), detail(out, *args)))

        return timed

    def install(self) -> None:
        import lazygrad.codegen as codegen
        import lazygrad.tensor as tensor
        from lazygrad.engine import realize
        from lazygrad.runtime import ops_cpu

        codegen._build_program = self.wrap("codegen", codegen._build_program, lambda spec, *a: spec and spec.name)
        tensor.run_schedule = self.wrap("run", tensor.run_schedule)
        if hasattr(realize, "_build_ahead"):  # (before the model's module imports these by name)
            realize._build_ahead = self.wrap("ahead", realize._build_ahead)
            realize.run_together = self.wrap("run", realize.run_together)
        realize._compile = self.wrap(
            "cc", realize._compile, lambda out, c, srcs, names, d: (names, sum(map(len, srcs)))
        )
        build, init = ops_cpu._Build, ops_cpu._Build.__init__

        def started(job, *args, **kwargs) -> None:  # a compiler process's start, which may precede its source
            job.lg_started = time.perf_counter()
            init(job, *args, **kwargs)

        build.__init__ = started
        build.finish = self.wrap("build", build.finish, lambda out, job, src: job.lg_started)

    def report(self, t0: float) -> list[dict]:
        """Per schedule run and per build ahead: its span, and where it compiled, its kernels' code generation (on
        its own thread) and compiler calls (those building its kernels)."""
        ms = lambda t: round((t - t0) * 1e3, 1)  # noqa: E731
        spans = sorted(self.spans, key=lambda s: s[2])
        rows = [s for s in spans if s[0] in ("run", "ahead")]
        gens = [[s for s in spans if s[0] == "codegen" and s[1] == r[1] and r[2] <= s[2] < r[3]] for r in rows]
        calls: list[list] = [[] for _ in rows]
        workers: dict[int, str] = {}
        builds = [s for s in spans if s[0] == "build"]
        for _, tid, st, et, (names, nbytes) in (s for s in spans if s[0] == "cc"):
            kernels = {re.sub(r"n[0-9]+$", "", n) for n in names}  # (a binary's second kernel of a name is renamed)
            owner = [i for i, r in enumerate(rows) if r[2] <= st and kernels <= {g[4] for g in gens[i]}]
            start = min([st] + [b[4] for b in builds if b[1] == tid and abs(b[3] - et) < 2e-3])
            if owner:
                name = workers.setdefault(tid, f"w{len(workers)}")
                calls[owner[-1]].append((name, ms(start), ms(st), ms(et), f"{len(names)}k {nbytes}"))
        return [
            {
                "what": r[0],
                "start": ms(r[2]),
                "end": ms(r[3]),
                "kernels": len(gen),
                "codegen": round(sum(e - s for _, _, s, e, _ in gen) * 1e3, 1),
                "codegen_end": ms(max((e for _, _, _, e, _ in gen), default=r[2])),
                "calls": call,
            }
            for r, gen, call in zip(rows, gens, calls)
        ]


def lazygrad_child(workload: str, timeline: Timeline | None = None, sources: list | None = None) -> dict:
    import lazygrad.codegen as codegen
    from lazygrad.engine import realize
    from lazygrad.runtime.ops_cpu import ClangCompiler

    codegen_clock, cc_clock = IntervalClock(), IntervalClock()
    if sources is not None:
        compile_batch = realize._compile

        def kept(compiler, srcs, names, device):
            sources.extend(zip(names, srcs))
            return compile_batch(compiler, srcs, names, device)

        realize._compile = kept
    if timeline is not None:
        timeline.install()
    codegen._build_program = codegen_clock.wrap(codegen._build_program)
    ClangCompiler._run = cc_clock.wrap(ClangCompiler._run)
    if workload == "cnn":
        from lazygrad import Tensor, nn
        from lazygrad.examples.digits import DigitsCNN, make_step
        from lazygrad.nn.state import get_parameters

        Tensor.manual_seed(0)
        model = DigitsCNN()
        step = make_step(model, nn.optim.Adam(get_parameters(model), lr=1e-3), False)
        x, y = Tensor.rand(64, 1, 8, 8).realize(), Tensor([i % 10 for i in range(64)]).realize()
        n0, cc_clock.spans[:], codegen_clock.spans[:] = len(realize._runners), [], []
        if timeline is not None:
            timeline.spans.clear()
        if sources is not None:
            sources.clear()
        st, cpu0 = time.perf_counter(), cpu_seconds()
        step(x, y)[0].item()
    else:
        from lazygrad.models import smollm2_path
        from lazygrad.models.llama import argmax_token, load_llama
        from lazygrad.models.tokenizer import BPETokenizer

        model, meta = load_llama(smollm2_path(), max_context=64)
        tok = BPETokenizer.from_gguf_metadata(meta)
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "What is a tensor?"}]))
        n0, cc_clock.spans[:], codegen_clock.spans[:] = len(realize._runners), [], []
        if timeline is not None:
            timeline.spans.clear()
        if sources is not None:
            sources.clear()
        st, cpu0 = time.perf_counter(), cpu_seconds()
        argmax_token(model(ids, 0))
    wall, cpu = time.perf_counter() - st, cpu_seconds() - cpu0
    kernels = len(realize._runners) - n0
    out = {"wall": wall, "kernels": kernels, "codegen": codegen_clock.total(), "cc": cc_clock.covered(), "cpu": cpu}
    if timeline is not None:
        out["timeline"] = timeline.report(st)
    if sources is not None:
        out["sources"] = sources
    return out


def tinygrad_child(workload: str) -> dict:
    from tinygrad import Tensor, nn
    from tinygrad.helpers import Context, GlobalCounters

    class TinyCNN:
        def __init__(self) -> None:
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
            self.bn1 = nn.BatchNorm(16)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
            self.fc = nn.Linear(32 * 4 * 4, 10)

        def __call__(self, x: Tensor) -> Tensor:
            x = self.bn1(self.conv1(x)).relu()
            x = self.conv2(x).relu().max_pool2d(2)
            return self.fc(x.flatten(1))

    Tensor.manual_seed(0)
    model = TinyCNN()
    opt = nn.optim.Adam(nn.state.get_parameters(model), lr=1e-3)
    x, y = Tensor.rand(64, 1, 8, 8).realize(), Tensor([i % 10 for i in range(64)]).realize()
    k0 = GlobalCounters.kernel_count
    st = time.perf_counter()
    with Context(TRAINING=1):
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y).backward()
        opt.step()
        loss.item()
    wall = time.perf_counter() - st
    return {"wall": wall, "kernels": GlobalCounters.kernel_count - k0, "codegen": None, "cc": None, "cpu": None}


def run_child(framework: str, workload: str, tree: str | None = None) -> dict | None:
    env = dict(os.environ, CACHELEVEL="0")
    if framework in ("timeline", "sources"):
        framework, workload = "lazygrad", f"{workload} {framework}"
    if framework == "tinygrad":
        env["DEV"] = "CPU"
    if tree is not None:
        env["BENCH_LAZYGRAD"] = tree
    cmd = [sys.executable, os.path.abspath(__file__), "--child", framework, *workload.split()]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"{framework} {workload} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def have_tinygrad() -> bool:
    return subprocess.run([sys.executable, "-c", "import tinygrad"], capture_output=True).returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--baseline", help="another checkout whose lazygrad is measured beside this one")
    ap.add_argument("--timeline", choices=["cnn", "llm"], help="where one cold run's time goes, per schedule")
    ap.add_argument("--kernels", choices=["cnn", "llm"], help="the C compiler's CPU time per kernel of one cold run")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.child[0] == "lazygrad":
            timeline = Timeline() if args.child[2:] == ["timeline"] else None
            sources = [] if args.child[2:] == ["sources"] else None
            print(json.dumps(lazygrad_child(args.child[1], timeline, sources)))
        else:
            print(json.dumps(tinygrad_child(args.child[1])))
        return
    if args.timeline:
        print_timelines(args.timeline, [None] + ([args.baseline] if args.baseline else []), args.reps)
        return
    if args.kernels:
        print_kernel_costs(args.kernels, args.reps)
        return

    rows: list[tuple[str, str, str | None]] = [("lazygrad", "cnn", None), ("lazygrad", "llm", None)]
    if args.baseline:
        rows += [("lazygrad", "cnn", args.baseline), ("lazygrad", "llm", args.baseline)]
    tinygrad = have_tinygrad()
    if tinygrad:
        rows.append(("tinygrad", "cnn", None))
    names = {"cnn": "digits CNN first train step", "llm": "SmolLM2 first prompt"}
    print(f"cold first run (CACHELEVEL=0, fresh process, best of {args.reps} by wall time)")
    print(f"{'':48s} {'wall s':>8s} {'kernels':>8s} {'ms/kernel':>10s} {'codegen s':>10s} {'cc s':>8s} {'CPU s':>8s}")
    results: dict[tuple, dict] = {}
    runs: dict[tuple, list[dict]] = {row: [] for row in rows}
    for _ in range(args.reps):  # rounds, each row once a round: a busy spell of the machine hits every row alike
        for row in rows:
            if (r := run_child(*row)) is not None:
                runs[row].append(r)
    for framework, workload, tree in rows:
        if not runs[(framework, workload, tree)]:
            continue
        best = min(runs[(framework, workload, tree)], key=lambda r: r["wall"])
        results[(framework, workload, tree)] = best
        name = f"{framework} {names[workload]}" + (" (baseline)" if tree else "")
        per = best["wall"] / max(best["kernels"], 1) * 1e3
        cg = f"{best['codegen']:10.3f}" if best["codegen"] is not None else f"{'-':>10s}"
        cc = f"{best['cc']:8.3f}" if best["cc"] is not None else f"{'-':>8s}"
        # the CPU seconds are the least of every run's: another process's cache traffic inflates them too
        cpus = [r["cpu"] for r in runs[(framework, workload, tree)] if r["cpu"] is not None]
        cpu = f"{min(cpus):8.3f}" if cpus else f"{'-':>8s}"
        print(f"{name:48s} {best['wall']:8.3f} {best['kernels']:8d} {per:10.2f} {cg} {cc} {cpu}")
    if not tinygrad:
        print("tinygrad: not installed (pip install tinygrad==0.14.0), no peer column")
    elif ("lazygrad", "cnn", None) in results and ("tinygrad", "cnn", None) in results:
        ratio = results[("tinygrad", "cnn", None)]["wall"] / results[("lazygrad", "cnn", None)]["wall"]
        print(f"CNN first step, tinygrad / lazygrad wall time: {ratio:.2f}x")
    for workload in names if args.baseline else ():  # (without one, the baseline's key is this tree's)
        if ("lazygrad", workload, None) in results and ("lazygrad", workload, args.baseline) in results:
            base, this = results[("lazygrad", workload, args.baseline)], results[("lazygrad", workload, None)]
            cpu = min(r["cpu"] for r in runs[("lazygrad", workload, args.baseline)]) / min(
                r["cpu"] for r in runs[("lazygrad", workload, None)]
            )
            print(
                f"{names[workload]}, baseline / this tree: wall time {base['wall'] / this['wall']:.2f}x, CPU {cpu:.2f}x"
            )


def print_timelines(workload: str, trees: list[str | None], reps: int) -> None:
    best: dict[str | None, dict] = {}
    for _ in range(reps):  # rounds, as main()'s
        for tree in trees:
            r = run_child("timeline", workload, tree)
            if r is not None and (tree not in best or r["wall"] < best[tree]["wall"]):
                best[tree] = r
    for tree, r in best.items():
        print(
            f"{workload}: {'baseline ' + tree if tree else 'this tree'}: wall {r['wall'] * 1e3:.1f} ms, CPU "
            f"{r['cpu'] * 1e3:.0f} ms, {r['kernels']} kernels (ms from the call; compiler calls: worker "
            f"process start / source given - done, kernels, bytes of C)"
        )
        print(f"{'start':>8s} {'end':>8s} {'kernels':>7s} {'codegen':>8s} {'waited':>7s}  compiler calls")
        quiet: list[dict] = []  # schedules that compiled nothing since the last row printed
        for row in [*r["timeline"], None]:
            if row is not None and not row["kernels"] and not row["calls"]:
                quiet.append(row)
                continue
            if quiet:
                ms = sum(q["end"] - q["start"] for q in quiet)
                print(f"{'':44s}({len(quiet)} schedules compiled nothing: {ms:.1f} ms)")
                quiet = []
            if row is not None:
                waited = row["end"] - row["codegen_end"] if row["kernels"] else 0.0
                calls = "  ".join(f"{w} {a:.0f}/{b:.0f}-{c:.0f} {d}" for w, a, b, c, d in row["calls"])
                print(
                    f"{row['start']:8.1f} {row['end']:8.1f} {row['kernels']:7d} {row['codegen']:8.1f} {waited:7.1f}  "
                    f"{'ahead: ' if row['what'] == 'ahead' else ''}{calls}"
                )
                if row["calls"]:
                    print(f"{'':44s}{worker_balance(row['calls'])}")


def worker_balance(calls: list) -> str:
    """Per worker of one schedule's compiler calls: ms compiling (source given to done) and ms idle at the end, from
    its last call's end to the last call's of any worker (a core left waiting while another compiles)."""
    busy: dict[str, float] = {}
    ends: dict[str, float] = {}
    for worker, _, given, done, _ in calls:
        busy[worker] = busy.get(worker, 0.0) + done - given
        ends[worker] = max(ends.get(worker, 0.0), done)
    last = max(ends.values())
    return "  ".join(f"{w} busy {busy[w]:.0f} ms, idle at the end {last - ends[w]:.0f}" for w in sorted(busy))


def print_kernel_costs(workload: str, reps: int) -> None:
    from lazygrad.runtime.ops_cpu import ClangCompiler, find_c_compiler

    run = run_child("sources", workload)
    if run is None:
        return
    compiler = ClangCompiler(find_c_compiler())

    def build_cpu(src: str) -> float:
        best = float("inf")
        for _ in range(reps):
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            before = kids.ru_utime + kids.ru_stime
            compiler.compile(src)
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            best = min(best, kids.ru_utime + kids.ru_stime - before)
        return best

    start = build_cpu("void lg_start(float* restrict out) { out[0] = 1.0f; }\n")
    costs = sorted(((build_cpu(src) - start, name, len(src)) for name, src in run["sources"]), reverse=True)
    head = f"{workload}: {len(costs)} kernels, each built alone by {compiler.cc} (least CPU of {reps})"
    print(f"{head}; a call's start and setup: {start * 1e3:.1f} ms")
    print(f"{'ms CPU':>8s} {'bytes':>7s}  kernel")
    for cpu, name, nbytes in costs:
        print(f"{cpu * 1e3:8.1f} {nbytes:7d}  {name}")
    print(f"{sum(c for c, _, _ in costs) * 1e3:8.1f} {sum(n for _, _, n in costs):7d}  all (without the starts)")
    families: dict[str, list[str]] = {}  # a kernel's source with its name and every integer constant blanked
    for name, src in run["sources"]:
        families.setdefault(re.sub(r"(?<![\w.])[0-9]+(?![0-9.])", "#", src.replace(name, "K")), []).append(name)
    for names in (n for n in families.values() if len(n) > 1):
        print(f"differ only in integer constants: {', '.join(names)}")


if __name__ == "__main__":
    main()
