"""numpy is optional: the library computes, trains, jits, saves and loads a quantized GGUF model without it (a
process where `import numpy` fails). Only converting to and from numpy arrays needs it."""

import subprocess
import sys
import textwrap

import pytest

BLOCK_NUMPY = "import sys\nsys.modules['numpy'] = None  # `import numpy` raises ImportError from here on\n"


def run_without_numpy(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", BLOCK_NUMPY + textwrap.dedent(code)], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_tensors_training_jit_and_state_without_numpy(tmp_path) -> None:
    out = run_without_numpy(f"""
        from lazygrad import Tensor, TinyJit, nn, dtypes
        from lazygrad.nn import optim, state
        import lazygrad.nn.gguf, lazygrad.models.llama, lazygrad.models.minilm, lazygrad.nn.datasets
        x = Tensor([[1.0, 2.0], [3.0, 4.0]])
        print((x @ x.T).sum(1).tolist(), x.max().item(), (x.cast(dtypes.int32) * 3).tolist())
        l1 = nn.Linear(2, 4)
        opt = optim.Adam(state.get_parameters(l1), lr=0.1)
        with Tensor.train():
            for _ in range(3):
                opt.zero_grad()
                loss = l1(x).relu().sum().backward()
                opt.step()
        assert loss.item() == loss.item()  # a number
        step = TinyJit(lambda a: (a * 2 + 1).realize())
        print([step(Tensor([float(i)] * 3)).tolist() for i in range(3)])
        print(Tensor.arange(5)[Tensor([1, 3])].tolist(), Tensor([1, 2, 3], dtype=dtypes.uint8).data().tobytes())
        state.safe_save({{"w": l1.weight}}, {str(tmp_path / "w.safetensors")!r})
        print(state.safe_load({str(tmp_path / "w.safetensors")!r})["w"].shape)
    """)
    assert out.splitlines() == [
        "[16.0, 36.0] 4.0 [[3, 6], [9, 12]]",
        "[[1.0, 1.0, 1.0], [3.0, 3.0, 3.0], [5.0, 5.0, 5.0]]",
        "[1, 3] b'\\x01\\x02\\x03'",
        "(4, 2)",
    ]


def test_quantized_gguf_model_without_numpy() -> None:
    """Loading keeps the weights quantized (blocks regrouped by kernels, not numpy) and the model answers as with
    numpy present."""
    pytest.importorskip("numpy")  # the answer to compare with, computed in this process
    from lazygrad.models import smollm2_path
    from lazygrad.models.llama import argmax_token, load_llama
    from lazygrad.models.tokenizer import BPETokenizer

    try:
        path = smollm2_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    model, meta = load_llama(path, max_context=32, quantized=True)
    tok = BPETokenizer.from_gguf_metadata(meta)
    want = argmax_token(model(tok.encode("The capital of France is"), 0))
    out = run_without_numpy("""
        from lazygrad.models import smollm2_path
        from lazygrad.models.llama import argmax_token, load_llama
        from lazygrad.models.tokenizer import BPETokenizer
        model, meta = load_llama(smollm2_path(), max_context=32, quantized=True)
        tok = BPETokenizer.from_gguf_metadata(meta)
        print(argmax_token(model(tok.encode("The capital of France is"), 0)))
    """)
    assert int(out) == want
