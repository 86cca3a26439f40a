#!/usr/bin/env python3
"""bench_python.py: ag driven from Python against PyTorch from Python, side by side in one process,
at the same thread count (issue 34's numbers; docs/benchmarks.md, "From Python").

    PYTHONPATH=build /usr/bin/python3 bench/bench_python.py [--threads N] [--repeats R]

(/usr/bin/python3 has Debian's python3-torch; ag's package is the build tree's.)

1. The call overhead of a small op: `a + b` on (10, 10) float32 tensors, called 20,000 times in a
   Python loop; the median over R repeats of the time per call.
2. d2l's tiny Transformer step (bench/bench_train_torch.py's tiny config: D 32, FFN 64, 4 heads, 2
   layers, batch 64, 10 + 10 tokens, vocabulary 20, dropout 0.1, Adam lr 0.005, clipping at 1.0)
   written in Python over each library: PyTorch's is bench_train_torch.py's own (d2l's classes);
   ag's is ag.nn's built-in d2l Transformer, xavier-initialised as d2l does, on the same batches.
   A step is zero_grad, forward, the masked cross-entropy per valid token, backward, clipping,
   the update and loss.item(); 5 untimed steps, then 100 timed ones, median reported.
"""

import argparse
import os
import statistics
import sys
import time

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--repeats", type=int, default=7)
parser.add_argument("--steps", type=int, default=100)
args = parser.parse_args()
for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = str(args.threads)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.argv = [sys.argv[0]]  # bench_train_torch parses its own arguments only when run as a program
import torch  # noqa: E402

import ag  # noqa: E402
import bench_train_torch as reference  # noqa: E402

torch.set_num_threads(args.threads)
ag.set_num_threads(args.threads)


def per_call_seconds(fn, calls=20_000):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def small_op_overhead():
    ta, tb = torch.randn(10, 10), torch.randn(10, 10)
    aa, ab = ag.randn(10, 10), ag.randn(10, 10)
    torch_times, ag_times = [], []
    for _ in range(args.repeats):  # interleaved, so that both see the same machine
        torch_times.append(per_call_seconds(lambda: ta + tb))
        ag_times.append(per_call_seconds(lambda: aa + ab))
    return statistics.median(ag_times), statistics.median(torch_times)


def ag_tiny_model():
    D, F, H, L, B, S, T, V, _ = reference.CONFIGS["tiny"]
    ag.manual_seed(0)
    encoder = ag.nn.TransformerEncoder(V, D, D, D, D, [D], D, F, H, L, 0.1)
    decoder = ag.nn.TransformerDecoder(V, D, D, D, D, [D], D, F, H, L, 0.1)
    net = ag.nn.EncoderDecoder(encoder, decoder)
    for module in net.modules():  # d2l's xavier_init_weights
        if type(module) is ag.nn.Linear:
            ag.nn.init.xavier_uniform_(module.weight)
    net.train()
    return net


def time_steps(step):
    seconds = []
    for i in range(5 + args.steps):
        start = time.perf_counter()
        step(i)
        if i >= 5:
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def tiny_step():
    batches = reference.make_batches("tiny")  # PyTorch tensors; ag's are NumPy copies of them
    ag_batches = [tuple(ag.tensor(t.numpy()) for t in batch) for batch in batches]

    net = reference.make_model("tiny")
    optimizer = torch.optim.Adam(net.parameters(), lr=0.005)
    loss = reference.MaskedSoftmaxCELoss()

    def torch_step(i):
        X, X_valid_len, dec_input, Y, Y_valid_len = batches[i % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        Y_hat, _ = net(X, dec_input, X_valid_len)
        l = loss(Y_hat, Y, Y_valid_len)
        l.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        return l.item()

    ag_net = ag_tiny_model()
    ag_optimizer = ag.optim.Adam(ag_net.parameters(), lr=0.005)

    def ag_step(i):
        X, X_valid_len, dec_input, Y, Y_valid_len = ag_batches[i % len(ag_batches)]
        ag_optimizer.zero_grad(set_to_none=True)
        Y_hat, _ = ag_net(X, dec_input, X_valid_len)
        l = ag.nn.functional.masked_softmax_ce(Y_hat, Y, Y_valid_len)
        l.backward()
        ag.nn.utils.clip_grad_norm_(ag_net.parameters(), 1.0)
        ag_optimizer.step()
        return l.item()

    return time_steps(ag_step), time_steps(torch_step)


ag_add, torch_add = small_op_overhead()
print(f"threads {args.threads}, PyTorch {torch.__version__}")
print(f"(10, 10) add from Python:   ag {ag_add * 1e6:6.2f} us   PyTorch {torch_add * 1e6:6.2f} us"
      f"   ratio {ag_add / torch_add:.2f}")
ag_ms, torch_ms = tiny_step()
print(f"tiny Transformer step:      ag {ag_ms * 1e3:6.2f} ms   PyTorch {torch_ms * 1e3:6.2f} ms"
      f"   ratio {ag_ms / torch_ms:.2f}")
