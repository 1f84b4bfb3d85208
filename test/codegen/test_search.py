"""BEAM search: the winner computes the right answer, wrong candidates are rejected, winners come from the disk
cache."""

import numpy as np
import pytest

import lazygrad.codegen.search as search
from lazygrad import Context, Device, Tensor
from lazygrad.codegen.kernel import Opt
from lazygrad.dtype import dtypes


@pytest.fixture
def quick_search(monkeypatch):
    monkeypatch.setattr(search, "BEAM_ROUNDS", 2)
    monkeypatch.setattr(search, "BEAM_BUDGET", 30.0)


def test_beam_result_matches_numpy(quick_search):
    rng = np.random.default_rng(0)
    an, bn = rng.standard_normal((24, 40)).astype(np.float32), rng.standard_normal((40, 56)).astype(np.float32)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    with Context(BEAM=2, CACHELEVEL=0):
        out = (a @ b).relu().numpy()
    np.testing.assert_allclose(out, np.maximum(an @ bn, 0), rtol=1e-4, atol=1e-4)


def test_rejects_wrong_output_and_caches_winner(quick_search, monkeypatch):
    a = Tensor(np.arange(3 * 50, dtype=np.float32).reshape(3, 50) / 7).realize()
    (si,) = (a * 3).sum(-1).schedule()
    renderer = Device["CPU"].renderer
    real_run = search._Bench.run

    def corrupt_optimized(self, spec, lib, reps, cutoff=float("inf")):  # every optimized kernel "computes" garbage
        outs, t = real_run(self, spec, lib, reps, cutoff)
        return (outs, t) if not spec.applied_opts else ([bytes(len(o)) for o in outs], t / 100)

    monkeypatch.setattr(search._Bench, "run", corrupt_optimized)
    with Context(CACHELEVEL=0):
        assert search.beam_search(si.ast, renderer, 2) == []
    monkeypatch.setattr(search._Bench, "run", real_run)
    found = search.beam_search(si.ast, renderer, 1)
    assert all(isinstance(o, Opt) for o in found)

    def no_bench(*args, **kwargs):
        raise AssertionError("a cached kernel must not be searched again")

    monkeypatch.setattr(search, "_Bench", no_bench)
    assert search.beam_search(si.ast, renderer, 1) == found


def test_close_compares_floats_with_tolerance():
    f = dtypes.float32
    x = np.array([1.0, np.nan, 3.0], np.float32)
    assert search._close(x.tobytes(), (x * (1 + 1e-5)).tobytes(), f)
    assert not search._close(x.tobytes(), (x + 1).tobytes(), f)
    assert not search._close(np.array([1, 2], np.int32).tobytes(), np.array([1, 3], np.int32).tobytes(), dtypes.int32)
