"""A tour of the compiler spine: lazy tensors, fused kernels, the generated C, and the kernel counters.

Run with DEBUG=2 to see one line per kernel, DEBUG=4 to see the generated C, NOOPT=1 for unoptimized kernels.
"""

from lazygrad import GlobalCounters, Tensor
from lazygrad.engine.realize import get_runner

Tensor.manual_seed(0)
x = Tensor([[1, 2, 3], [4, 5, 6]])
print("x * 2 + 1, summed over axis 1:", (x * 2 + 1).sum(axis=1).numpy())
print("x.T:", x.T.tolist())
print("x.reshape(3, 2)[1:, ::-1]:", x.reshape(3, 2)[1:, ::-1].tolist())

a, b, c, d = [Tensor.rand(100) for _ in range(4)]
Tensor.realize(a, b, c, d)
out1, out2 = a + b + c, a + b + d
print("\na lazy tensor, nothing computed yet:")
print(out1)
GlobalCounters.reset()
Tensor.realize(out1, out2)
print(f"\nout1 and out2 computed by {GlobalCounters.kernel_count} kernel (shared a + b, two outputs)")

m = Tensor.rand(4, 6).realize()
softmax = m.softmax(axis=1)
schedule = softmax.schedule()
print(f"\nsoftmax over (4, 6) is {len(schedule)} kernels; the C of the last one:")
print(get_runner("CPU", schedule[-1].ast).spec.src.split("void ", 1)[-1])
from lazygrad.engine.realize import run_schedule  # noqa: E402

run_schedule(schedule)
print("row sums of the softmax:", softmax.sum(axis=1).tolist())
