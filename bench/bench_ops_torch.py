#!/usr/bin/env python3
"""bench_ops_torch.py: PyTorch's side of ag-bench-ops: the same rows, inputs, sizes, timing and JSON
fields (impl "torch"), so that bench/compare_ops.sh can put the two side by side.

    /usr/bin/python3 bench/bench_ops_torch.py [--op NAME,...] [--size small,medium,large,BxTxD]
        [--threads N] [--quick] [--budget-ms MS] [--json] [--ag PATH [--rounds R]]

(/usr/bin/python3 is the interpreter that has Debian's python3-torch.)

One call of a row, as in ag-bench-ops: the leaves' .grad set to None, the row's call on leaves that
require grad, and backward of the sum of its output:
    y = f(inputs)
    y.sum().backward()
Where PyTorch 1.13 has no op of ag's (rms_norm, rotary_embedding) or ag's op is a fused variant of
a composition (length_masked_softmax, dropout_add_layer_norm, linear_relu, ag::attention's two
kernels: PyTorch 1.13 has no F.scaled_dot_product_attention), the row's call is the composition a
user writes instead — for rms_norm and rotary_embedding the very references of
tests/fixtures/make_torch_fixtures.py — and the row is marked "composed" (its JSON carries the code).

Inputs are ag-bench-ops's numbers: element i of stream s is built from splitmix64 hashes of the key
(s << 40) + i — a normal value by Box–Muller on the uniforms of keys 2i and 2i + 1, an index by a
remainder — computed in float64 with numpy and rounded to float32 (see bench/bench_ops.cpp).

Threads: --threads N sets OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS before torch is
imported and calls torch.set_num_threads(N), as bench_train_torch.py does; OMP_WAIT_POLICY is taken
from the environment as it is, and reported.

Timing is ag-bench-ops's: a warm-up call, then samples (loops of calls lasting at least 10 ms; 2 ms
with --quick) until --budget-ms (100; --quick 20) has passed and there are at least 3, at most 15
(--quick 5) of them; the median time per call is reported.

--ag PATH: ag-bench-ops is run too, interleaved: for every size and row, PATH --op ROW --size SIZE
--threads N --json (with --quick and --budget-ms passed on), then PyTorch's timing of the same row,
so that drift on a shared machine hits both alike; --rounds R repeats the whole sequence R times
(ag first in odd rounds, PyTorch first in even ones). Both JSON lines of each row are printed,
marked with their round. The rows of the two programs must be the same (checked: ag-bench-ops
--list), and every op of autograd/op_list.h must have one (checked here as in ag-bench-ops).
"""

import argparse
import functools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--op", default="", help="rows or ops to time, comma-separated (default: all)")
    parser.add_argument("--size", default="small,medium,large",
                        help="small, medium, large or BxTxD, comma-separated")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="short samples, few of them")
    parser.add_argument("--budget-ms", type=float, default=0,
                        help="time spent sampling each row at each size (default 100, --quick 20)")
    parser.add_argument("--json", action="store_true", help="one JSON object per row and size, a line each")
    parser.add_argument("--list", action="store_true", help="print the row names and exit")
    parser.add_argument("--ag", default="", help="ag-bench-ops to run interleaved with PyTorch's rows")
    parser.add_argument("--rounds", type=int, default=1, help="with --ag: times to run the whole sequence")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: expected a count of at least 1")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: expected a count of at least 1")
    return args


if __name__ == "__main__":
    ARGS = parse_args()
    # Before torch is imported: the thread pools read these when they start.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# The references of the ops PyTorch 1.13 lacks, as the fixtures of ag's tests use them.
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
from make_torch_fixtures import llama_apply_rotary_emb, rms_norm_reference  # noqa: E402


# ---- sizes -----------------------------------------------------------------------------------------

class Size:
    def __init__(self, name, B, T, D):
        self.name, self.B, self.T, self.D = name, B, T, D
        # Attention's heads: d = 64 features each where D is a multiple of 64, else one head of D.
        self.head_dim = 64 if D % 64 == 0 else D
        self.heads = D // self.head_dim

    def shape(self):
        return f"{self.B}x{self.T}x{self.D}"


def parse_size(text):
    named = {"small": (4, 8, 32), "medium": (32, 64, 512), "large": (32, 256, 512)}
    if text in named:
        return Size(text, *named[text])
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text)
    if not m or int(m[1]) < 1 or int(m[2]) < 1 or int(m[3]) < 2 or int(m[3]) % 2:
        sys.exit(f"bench_ops_torch.py: --size '{text}': expected small, medium, large or BxTxD with "
                 "B, T >= 1 and an even D >= 2")
    return Size(text, int(m[1]), int(m[2]), int(m[3]))


# ---- inputs: the same numbers as ag-bench-ops's ------------------------------------------------------

def splitmix64(key):
    """splitmix64's output function on a uint64 array (numpy's uint64 arithmetic wraps, as C++'s)."""
    z = key + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def keys(stream, i):
    return (np.uint64(stream) << np.uint64(40)) + i


def uniform_of(h):
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53


@functools.lru_cache(maxsize=16)
def normal_values(shape, stream):
    """~N(0, 1) by Box–Muller, z = √(−2 ln u₁) · cos(2π u₂), in float64, rounded to float32 (kept:
    the rows of one size share their inputs, and numpy takes a while over a large one)."""
    i = np.arange(math.prod(shape), dtype=np.uint64)
    u1 = uniform_of(splitmix64(keys(stream, np.uint64(2) * i)))
    u2 = uniform_of(splitmix64(keys(stream, np.uint64(2) * i + np.uint64(1))))
    z = np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)
    return z.astype(np.float32).reshape(shape)


def normal(shape, stream, grad=True):
    return torch.from_numpy(normal_values(tuple(shape), stream)).requires_grad_(grad)


def positive(shape, stream):
    """|z| + 0.1 for the ops defined on positive numbers (log, sqrt, rsqrt, 1.5 / x)."""
    return (normal(shape, stream, grad=False).abs() + 0.1).requires_grad_()


def indices(shape, high, stream):
    i = np.arange(math.prod(shape), dtype=np.uint64)
    return torch.from_numpy((splitmix64(keys(stream, i)) % np.uint64(high)).astype(np.int64).reshape(shape))


def mask(shape, stream):
    return normal(shape, stream, grad=False) > 0


def rotary_table(T, d, sine):
    """cos or sin of θ_{t,j} = t · 10000^(−2j/d), (T, d/2), in float64, rounded to float32."""
    t = np.arange(T, dtype=np.float64)[:, None]
    j = np.arange(d // 2, dtype=np.float64)[None, :]
    theta = t * np.power(10000.0, -2.0 * j / d)
    return torch.from_numpy((np.sin(theta) if sine else np.cos(theta)).astype(np.float32))


# ---- the rows: ag-bench-ops's, by name ---------------------------------------------------------------

class Row:
    def __init__(self, name, op, inputs, call, composed=None):
        self.name, self.op, self.inputs, self.call = name, op, inputs, call
        self.composed = composed  # the PyTorch code, where it stands in for an op PyTorch lacks


def x_of(s):
    return [normal((s.B, s.T, s.D), 1)]


def positive_x_of(s):
    return [positive((s.B, s.T, s.D), 1)]


def a_b_of(s):
    return [normal((s.B, s.T, s.D), 1), normal((s.B, s.T, s.D), 2)]


def x_w_b_of(s):
    return [normal((s.B, s.T, s.D), 1), normal((s.D, s.D), 2), normal((s.D,), 3)]


def q_k_v_of(s, causal):
    heads = (s.B, s.heads, s.T, s.head_dim)
    inputs = [normal(heads, 1), normal(heads, 2), normal(heads, 3)]
    if causal:  # nanoGPT's mask, made once (its registered buffer)
        inputs.append(torch.ones(s.T, s.T, dtype=torch.bool).triu(diagonal=1))
    return inputs


def attention_composed(q, k, v, future=None):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if future is not None:
        s = s.masked_fill(future, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


ATTENTION_CODE = "torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v"
CAUSAL_CODE = ("torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(future, float('-inf')), "
               "dim=-1) @ v")

ROWS = [
    # elementwise, broadcasting
    Row("add", "add", a_b_of, lambda i, s: i[0] + i[1]),
    Row("sub", "sub", a_b_of, lambda i, s: i[0] - i[1]),
    Row("mul", "mul", a_b_of, lambda i, s: i[0] * i[1]),
    Row("div", "div", lambda s: [normal((s.B, s.T, s.D), 1), positive((s.B, s.T, s.D), 2)],
        lambda i, s: i[0] / i[1]),
    Row("add_scalar", "add_scalar", x_of, lambda i, s: i[0] + 1.5),
    Row("mul_scalar", "mul_scalar", x_of, lambda i, s: i[0] * 1.5),
    Row("div_scalar", "div_scalar", x_of, lambda i, s: i[0] / 1.5),
    Row("rdiv_scalar", "rdiv_scalar", positive_x_of, lambda i, s: 1.5 / i[0]),
    Row("neg", "neg", x_of, lambda i, s: -i[0]),
    Row("pow", "pow", x_of, lambda i, s: i[0].pow(2.0)),
    Row("exp", "exp", x_of, lambda i, s: torch.exp(i[0])),
    Row("log", "log", positive_x_of, lambda i, s: torch.log(i[0])),
    Row("sqrt", "sqrt", positive_x_of, lambda i, s: torch.sqrt(i[0])),
    Row("tanh", "tanh", x_of, lambda i, s: torch.tanh(i[0])),
    Row("sigmoid", "sigmoid", x_of, lambda i, s: torch.sigmoid(i[0])),
    Row("relu", "relu", x_of, lambda i, s: torch.relu(i[0])),
    Row("gelu", "gelu", x_of, lambda i, s: F.gelu(i[0])),
    Row("where", "where",
        lambda s: [normal((s.B, s.T, s.D), 1), normal((s.B, s.T, s.D), 2), mask((s.B, s.T, s.D), 3)],
        lambda i, s: torch.where(i[2], i[0], i[1])),
    Row("masked_fill", "masked_fill", lambda s: [normal((s.B, s.T, s.D), 1), mask((s.B, s.T, s.D), 3)],
        lambda i, s: i[0].masked_fill(i[1], 0.0)),
    Row("gelu_tanh", "gelu_tanh", x_of, lambda i, s: F.gelu(i[0], approximate="tanh")),
    Row("silu", "silu", x_of, lambda i, s: F.silu(i[0])),
    Row("abs", "abs", x_of, lambda i, s: torch.abs(i[0])),
    Row("sin", "sin", x_of, lambda i, s: torch.sin(i[0])),
    Row("cos", "cos", x_of, lambda i, s: torch.cos(i[0])),
    Row("erf", "erf", x_of, lambda i, s: torch.erf(i[0])),
    Row("rsqrt", "rsqrt", positive_x_of, lambda i, s: torch.rsqrt(i[0])),
    Row("maximum", "maximum", a_b_of, lambda i, s: torch.maximum(i[0], i[1])),
    Row("minimum", "minimum", a_b_of, lambda i, s: torch.minimum(i[0], i[1])),
    Row("clamp", "clamp", x_of, lambda i, s: torch.clamp(i[0], -0.5, 0.5)),
    # reductions over the last dim
    Row("sum", "sum", x_of, lambda i, s: i[0].sum(-1)),
    Row("mean", "mean", x_of, lambda i, s: i[0].mean(-1)),
    Row("max", "max", x_of, lambda i, s: torch.amax(i[0], -1)),
    Row("var", "var", x_of, lambda i, s: i[0].var(-1)),
    # softmax over the last dim
    Row("softmax", "softmax", x_of, lambda i, s: torch.softmax(i[0], -1)),
    Row("log_softmax", "log_softmax", x_of, lambda i, s: torch.log_softmax(i[0], -1)),
    # d2l's masked_softmax (its sequence_mask's -1e6, written out of place): scores (B, T, D),
    # the first L_b keys of each batch row valid
    Row("length_masked_softmax", "length_masked_softmax",
        lambda s: [normal((s.B, s.T, s.D), 1), indices((s.B,), s.D // 2 + 1, 4) + s.D // 2],
        lambda i, s: torch.softmax(
            i[0].masked_fill(torch.arange(s.D) >= i[1].reshape(-1, 1, 1), -1e6), dim=-1),
        composed="torch.softmax(x.masked_fill(torch.arange(D) >= lens.reshape(-1, 1, 1), -1e6), dim=-1)"),
    # normalisation over the last dim
    Row("layer_norm", "layer_norm",
        lambda s: [normal((s.B, s.T, s.D), 1), normal((s.D,), 2), normal((s.D,), 3)],
        lambda i, s: F.layer_norm(i[0], (s.D,), i[1], i[2], 1e-5)),
    Row("dropout_add_layer_norm", "dropout_add_layer_norm",
        lambda s: [normal((s.B, s.T, s.D), 1), normal((s.B, s.T, s.D), 4), normal((s.D,), 2),
                   normal((s.D,), 3)],
        lambda i, s: F.layer_norm(i[0] + F.dropout(i[1], 0.1, training=True), (s.D,), i[2], i[3], 1e-5),
        composed="F.layer_norm(x + F.dropout(y, 0.1, training=True), (D,), w, b, 1e-5)"),
    Row("rms_norm", "rms_norm", lambda s: [normal((s.B, s.T, s.D), 1), normal((s.D,), 2)],
        lambda i, s: rms_norm_reference(i[0], (-1,), i[1], eps=torch.finfo(torch.float32).eps),
        composed="rms_norm_reference: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w"),
    # losses: logits (B·T, D), int64 targets (B·T), the mean
    Row("cross_entropy", "cross_entropy", lambda s: [normal((s.B * s.T, s.D), 1), indices((s.B * s.T,), s.D, 4)],
        lambda i, s: F.cross_entropy(i[0], i[1])),
    # matrix product: (B, T, D) · (D, D)
    Row("matmul", "matmul", lambda s: [normal((s.B, s.T, s.D), 1), normal((s.D, s.D), 2)],
        lambda i, s: torch.matmul(i[0], i[1])),
    Row("linear", "linear", x_w_b_of, lambda i, s: F.linear(i[0], i[1], i[2])),
    Row("linear_relu", "linear_relu", x_w_b_of, lambda i, s: torch.relu(F.linear(i[0], i[1], i[2])),
        composed="torch.relu(F.linear(x, w, b))"),
    # shape and indexing
    Row("reshape", "reshape", x_of, lambda i, s: i[0].reshape(-1, s.D)),
    Row("permute", "permute", x_of, lambda i, s: i[0].permute(0, 2, 1)),
    Row("squeeze", "squeeze", lambda s: [normal((s.B, 1, s.T, s.D), 1)], lambda i, s: i[0].squeeze(1)),
    Row("unsqueeze", "unsqueeze", x_of, lambda i, s: i[0].unsqueeze(1)),
    Row("expand", "expand", lambda s: [normal((s.B, 1, s.D), 1)], lambda i, s: i[0].expand(s.B, s.T, s.D)),
    Row("slice", "slice", x_of, lambda i, s: i[0][..., : s.D // 2]),
    Row("concat", "concat", a_b_of, lambda i, s: torch.cat([i[0], i[1]], -1)),
    Row("index_select", "index_select",
        lambda s: [normal((s.B * s.T, s.D), 1), indices((s.B * s.T,), s.B * s.T, 4)],
        lambda i, s: torch.index_select(i[0], 0, i[1])),
    Row("repeat_interleave", "repeat_interleave", x_of, lambda i, s: torch.repeat_interleave(i[0], 2, 1)),
    Row("contiguous", "contiguous", x_of, lambda i, s: i[0].transpose(1, 2).contiguous()),
    Row("clone", "clone", x_of, lambda i, s: i[0].clone()),
    Row("to", "to", x_of, lambda i, s: i[0].to(torch.float64)),
    # gathering, cumulative sums
    Row("gather", "gather", lambda s: [normal((s.B, s.T, s.D), 1), indices((s.B, s.T, s.D), s.D, 4)],
        lambda i, s: torch.gather(i[0], -1, i[1])),
    Row("cumsum", "cumsum", x_of, lambda i, s: torch.cumsum(i[0], -1)),
    Row("topk", "topk", x_of, lambda i, s: torch.topk(i[0], max(1, s.D // 8), -1).values),
    # random
    Row("dropout", "dropout", x_of, lambda i, s: F.dropout(i[0], 0.1, training=True)),
    # rotary position embedding: Meta's Llama apply_rotary_emb on x (B, T, H, d), as the fixtures
    Row("rotary_embedding", "rotary_embedding",
        lambda s: [normal((s.B, s.T, s.heads, s.head_dim), 1), rotary_table(s.T, s.head_dim, False),
                   rotary_table(s.T, s.head_dim, True)],
        lambda i, s: llama_apply_rotary_emb(i[0], torch.complex(i[1], i[2])).permute(0, 2, 1, 3),
        composed="llama_apply_rotary_emb(x, torch.complex(cos, sin)) (Meta's Llama, view_as_complex)"),
    # ag::attention's two kernels; PyTorch 1.13 has no F.scaled_dot_product_attention
    Row("scaled_dot_product_attention", "scaled_dot_product_attention", lambda s: q_k_v_of(s, False),
        lambda i, s: attention_composed(*i), composed=ATTENTION_CODE),
    Row("scaled_dot_product_attention:causal", "scaled_dot_product_attention", lambda s: q_k_v_of(s, True),
        lambda i, s: attention_composed(*i), composed=CAUSAL_CODE),
    Row("flash_attention", "flash_attention", lambda s: q_k_v_of(s, False),
        lambda i, s: attention_composed(*i), composed=ATTENTION_CODE),
    Row("flash_attention:causal", "flash_attention", lambda s: q_k_v_of(s, True),
        lambda i, s: attention_composed(*i), composed=CAUSAL_CODE),
]


def check_rows_cover_op_list():
    """Every op of autograd/op_list.h has a row (as ag-bench-ops checks its own), names unique."""
    names = [r.name for r in ROWS]
    assert len(set(names)) == len(names), "two rows share a name"
    with open(os.path.join(ROOT, "autograd", "op_list.h")) as f:
        text = f.read()
    listed = re.findall(r"X\((\w+)\)", text[text.index("#define AG_DIFFERENTIABLE_OPS"):])
    missing = [op for op in listed if op not in {r.op for r in ROWS}]
    if missing:
        sys.exit("bench_ops_torch.py: no row for the op(s) of autograd/op_list.h: " + ", ".join(missing))


def selected_rows(ops):
    if not ops:
        return list(ROWS)
    picked = []
    for name in filter(None, ops.split(",")):
        matches = [r for r in ROWS if name in (r.name, r.op)]
        if not matches:
            sys.exit(f"bench_ops_torch.py: --op '{name}' is no row or op (see --list)")
        picked += [r for r in matches if r not in picked]
    return picked


# ---- timing ---------------------------------------------------------------------------------------------

FULL = dict(sample_seconds=0.010, budget_seconds=0.10, min_samples=3, max_samples=15, warmup_calls=1)
QUICK = dict(sample_seconds=0.002, budget_seconds=0.02, min_samples=3, max_samples=5, warmup_calls=1)


def time_row(row, size, settings):
    inputs = row.inputs(size)
    leaves = [t for t in inputs if t.requires_grad]

    def one_call():
        for leaf in leaves:
            leaf.grad = None
        y = row.call(inputs, size)
        y.sum().backward()

    def seconds_of(calls):
        start = time.perf_counter()
        for _ in range(calls):
            one_call()
        return time.perf_counter() - start

    for _ in range(settings["warmup_calls"]):
        one_call()
    calls = 1
    first = seconds_of(1)
    while first < settings["sample_seconds"]:  # calibrate: double until a loop is a sample
        calls *= 2
        first = seconds_of(calls)
    samples = [1e3 * first / calls]
    spent = first
    while len(samples) < settings["max_samples"] and (
            spent < settings["budget_seconds"] or len(samples) < settings["min_samples"]):
        t = seconds_of(calls)
        samples.append(1e3 * t / calls)
        spent += t
    return {"median_ms": statistics.median(samples), "calls_per_sample": calls, "samples_ms": samples}


def result_line(row, size, threads, timing):
    line = {"impl": "torch", "name": row.name, "op": row.op, "size": size.name, "shape": size.shape(),
            "threads": threads, **timing, "composed": row.composed or "",
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "torch_version": torch.__version__}
    line["median_ms"] = float(f"{line['median_ms']:.6g}")
    line["samples_ms"] = [float(f"{v:.6g}") for v in line["samples_ms"]]
    return line


def run_ag(args, row, size):
    """ag-bench-ops on one row and size: its JSON line."""
    command = [args.ag, "--op", row.name, "--size", size.name, "--threads", str(args.threads), "--json"]
    if args.quick:
        command.append("--quick")
    if args.budget_ms:
        command += ["--budget-ms", str(args.budget_ms)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_ops_torch.py: {' '.join(command)} failed (exit code {done.returncode}): "
                 f"{done.stderr.strip()}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main(args):
    check_rows_cover_op_list()
    if args.list:
        print("\n".join(r.name for r in ROWS))
        return
    if args.ag:
        listed = subprocess.run([args.ag, "--list"], capture_output=True, text=True, check=True).stdout.split()
        if sorted(listed) != sorted(r.name for r in ROWS):
            only_ag = sorted(set(listed) - {r.name for r in ROWS})
            only_torch = sorted({r.name for r in ROWS} - set(listed))
            sys.exit(f"bench_ops_torch.py: the rows differ: only in ag-bench-ops {only_ag}, only here {only_torch}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    settings = dict(QUICK if args.quick else FULL)
    if args.budget_ms:
        settings["budget_seconds"] = args.budget_ms / 1e3
    rows = selected_rows(args.op)
    sizes = [parse_size(s) for s in filter(None, args.size.split(","))]
    if not args.json:
        print(f"{'row':<38} {'size':<8} {'shape':<12} {'thr':>3} {'torch ms':>10}"
              + (f" {'ag ms':>10} {'ratio':>6}" if args.ag else ""))
    for round_number in range(1, (args.rounds if args.ag else 1) + 1):
        for size in sizes:
            for row in rows:
                ag_lines = []
                if args.ag and round_number % 2 == 1:
                    ag_lines = run_ag(args, row, size)
                line = result_line(row, size, args.threads, time_row(row, size, settings))
                if args.ag and round_number % 2 == 0:
                    ag_lines = run_ag(args, row, size)
                for ag_line in ag_lines:
                    ag_line["round"] = round_number
                line["round"] = round_number
                if args.json:
                    for out in ag_lines + [line]:
                        print(json.dumps(out))
                else:
                    text = (f"{row.name:<38} {size.name:<8} {size.shape():<12} {args.threads:>3} "
                            f"{line['median_ms']:>10.4f}")
                    if ag_lines:
                        ag_ms = ag_lines[0]["median_ms"]
                        text += f" {ag_ms:>10.4f} {ag_ms / line['median_ms']:>6.2f}"
                    print(text)
                sys.stdout.flush()


if __name__ == "__main__":
    main(ARGS)
