#!/usr/bin/env python3
"""bench_train_torch.py: PyTorch's side of ag-bench-train: the same model, step, configs, timing
and JSON fields (impl "torch"), so that bench/compare_train.sh can put the two side by side.

    /usr/bin/python3 bench/bench_train_torch.py --config tiny|small|medium|mha --threads N \
        [--steps S] [--warmup W] [--json]

(/usr/bin/python3 is the interpreter that has Debian's python3-torch.)

The model is d2l.ai's Transformer: the classes are imported, as examples/reference/d2l_reverse.py
imports them, from tests/fixtures/make_nn_parity_fixtures.py, which holds verbatim copies of d2l's
PyTorch code (the ones ag's layers are tested against). The weights of every nn.Linear are
re-initialised with xavier_uniform_ as d2l's train_seq2seq does; dropout is 0.1; training mode.

One step of the seq2seq configs, as ag's training::Step (ag-train's step) in ag-bench-train:
    optimizer.zero_grad(set_to_none=True)   # ag's zero_grad drops the gradients too
    Y_hat, _ = net(X, dec_input, X_valid_len)
    l = loss(Y_hat, Y, Y_valid_len)         # d2l's MaskedSoftmaxCELoss, ag's normalisation:
                                            # Σ CE over valid tokens / number of valid tokens
    l.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    optimizer.step()                        # torch.optim.Adam, lr 0.005
    l.item()
mha: d2l's MultiHeadAttention(256, 256, 256, 256, 8 heads, dropout 0.1, no bias) alone,
self-attention on X (32, 64, 256) with requires_grad and valid_lens None; a step is zero_grad,
forward, backward of a fixed random upstream gradient.

Configs and batches are ag-bench-train's (see bench/bench_train.cpp): tiny is d2l_reverse.py's
reverse task (vocabulary 20, padded to 10 steps, fresh examples from random.Random(1), held-out
sources skipped); small / medium are full-length random ids in [3, V) — source, labels, decoder
input = <bos> + labels[:, :-1], all valid lengths T. A pool of 8 batches is built before timing.

Threads: --threads N sets OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS before torch is
imported (Debian's torch runs its matmuls in OpenBLAS, the same libopenblas0-pthread as ag) and
calls torch.set_num_threads(N). OMP_WAIT_POLICY is taken from the environment as it is
(compare_train.sh runs 2 threads with it unset and with PASSIVE) and reported.

Timing and the reported numbers are ag-bench-train's: --warmup untimed steps (default 3), then
--steps timed steps (defaults: tiny 100, small 40, medium 20, mha 40), each timed alone with
time.perf_counter, median reported; tokens/s = B·(T_src + T_tgt) per step (mha: B·T) / median;
peak RSS = VmHWM of /proc/self/status after the timed steps (it includes the pages of torch's own
libraries that the process has touched); GFLOP/s = the same analytical matmul FLOP count as
ag-bench-train / median; mfu = GFLOP/s / the sgemm peak measured afterwards in this process at
the same thread count (torch.mm of 2048×2048 matrices into a preallocated output, best of 5).
"""

import argparse
import json
import os
import statistics
import sys
import time

CONFIGS = {
    # name: (D, FFN, heads, layers, batch, T_src, T_tgt, vocab, default timed steps)
    "tiny": (32, 64, 4, 2, 64, 10, 10, 20, 100),
    "small": (128, 512, 4, 2, 32, 32, 32, 32, 40),
    "medium": (256, 1024, 8, 4, 32, 64, 64, 64, 20),
    "mha": (256, 0, 8, 0, 32, 64, 0, 0, 40),
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, choices=sorted(CONFIGS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=0, help="timed steps (0: the config's default)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    return parser.parse_args()


if __name__ == "__main__":  # (bench_train_ddp_torch.py imports the model and batches from here)
    ARGS = parse_args()
    # Before torch is imported: the thread pools read these when they start.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import torch  # noqa: E402
from torch import nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "reference"))
from make_nn_parity_fixtures import (  # noqa: E402  d2l's classes, verbatim
    EncoderDecoder, MultiHeadAttention, TransformerDecoder, TransformerEncoder, sequence_mask)
import d2l_reverse  # noqa: E402  the reverse task (tiny)


class MaskedSoftmaxCELoss(nn.CrossEntropyLoss):
    """d2l's MaskedSoftmaxCELoss with ag's normalisation (nn::masked_softmax_ce): the sum of the
    cross-entropy over the valid tokens divided by their number, instead of d2l's per-sequence
    mean over all positions (the same work either way)."""

    def forward(self, pred, label, valid_len):
        weights = torch.ones_like(label)
        weights = sequence_mask(weights, valid_len)
        self.reduction = 'none'
        unweighted_loss = super(MaskedSoftmaxCELoss, self).forward(pred.permute(0, 2, 1), label)
        return (unweighted_loss * weights).sum() / valid_len.sum()


def xavier_init_weights(m):
    if type(m) == nn.Linear:
        nn.init.xavier_uniform_(m.weight)


def proc_status_mb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return -1.0


def step_flops(config):
    """Matmul FLOPs of one step; the formula of ag-bench-train's step_flops (see there)."""
    D, F, _, L, B, S, T, V, _ = CONFIGS[config]
    if config == "mha":
        return 3 * (4 * 2 * B * S * D * D + 2 * 2 * B * S * S * D)
    encoder_block = 4 * 2 * B * S * D * D + 2 * 2 * B * S * S * D + 2 * 2 * B * S * D * F
    decoder_block = (4 * 2 * B * T * D * D + 2 * 2 * B * T * T * D      # self-attention
                     + 2 * 2 * B * T * D * D + 2 * 2 * B * S * D * D    # cross: projections
                     + 2 * 2 * B * T * S * D                            # cross: Q·Kᵀ, weights·V
                     + 2 * 2 * B * T * D * F)                           # FFN
    return 3 * (L * (encoder_block + decoder_block) + 2 * B * T * D * V)


def sgemm_peak_gflops():
    n = 2048
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    c = torch.zeros(n, n)
    torch.mm(a, b, out=c)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        torch.mm(a, b, out=c)
        best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best * 1e-9


def make_batches(config):
    D, F, H, L, B, S, T, V, _ = CONFIGS[config]
    batches = []
    if config == "tiny":
        held_out = d2l_reverse.held_out_set()
        held_out_sources = {tuple(s) for s, _ in held_out}
        data = d2l_reverse.random.Random(1)
        for _ in range(8):
            X, X_valid_len, Y, Y_valid_len = d2l_reverse.to_tensors(
                d2l_reverse.training_batch(data, held_out_sources, B))
            bos = torch.tensor([d2l_reverse.BOS] * Y.shape[0]).reshape(-1, 1)
            batches.append((X, X_valid_len, torch.cat([bos, Y[:, :-1]], 1), Y, Y_valid_len))
    else:
        g = torch.Generator().manual_seed(1)
        for _ in range(8):
            X = torch.randint(3, V, (B, S), generator=g)
            Y = torch.randint(3, V, (B, T), generator=g)
            dec_input = torch.cat([torch.full((B, 1), d2l_reverse.BOS, dtype=torch.long), Y[:, :-1]], 1)
            batches.append((X, torch.full((B,), S), dec_input, Y, torch.full((B,), T)))
    return batches


def make_model(config):
    """d2l's Transformer of a seq2seq config, xavier-initialised after torch.manual_seed(0), in
    training mode."""
    D, F, H, L, B, S, T, V, _ = CONFIGS[config]
    torch.manual_seed(0)
    encoder = TransformerEncoder(V, D, D, D, D, [D], D, F, H, L, 0.1)
    decoder = TransformerDecoder(V, D, D, D, D, [D], D, F, H, L, 0.1)
    net = EncoderDecoder(encoder, decoder)
    net.apply(xavier_init_weights)
    net.train()
    return net


def run_seq2seq(config, warmup, steps):
    net = make_model(config)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.005)
    loss = MaskedSoftmaxCELoss()
    batches = make_batches(config)

    seconds, losses = [], []
    rss_start = proc_status_mb("VmRSS")
    for i in range(warmup + steps):
        X, X_valid_len, dec_input, Y, Y_valid_len = batches[i % len(batches)]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        Y_hat, _ = net(X, dec_input, X_valid_len)
        l = loss(Y_hat, Y, Y_valid_len)
        l.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        losses.append(l.item())
        elapsed = time.perf_counter() - start
        if i >= warmup:
            seconds.append(elapsed)
    parameters = sum(p.numel() for p in net.parameters())
    return seconds, losses[0], losses[-1], parameters, rss_start


def run_mha(config, warmup, steps):
    D, _, H, _, B, S, _, _, _ = CONFIGS[config]
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, D, D, D, H, 0.1)
    mha.train()
    g = torch.Generator().manual_seed(1)
    X = torch.randn(B, S, D, generator=g).requires_grad_()
    upstream = torch.randn(B, S, D, generator=g)
    seconds = []
    rss_start = proc_status_mb("VmRSS")
    for i in range(warmup + steps):
        start = time.perf_counter()
        mha.zero_grad(set_to_none=True)
        X.grad = None
        out = mha(X, X, X, None)
        out.backward(upstream)
        elapsed = time.perf_counter() - start
        if i >= warmup:
            seconds.append(elapsed)
    parameters = sum(p.numel() for p in mha.parameters())
    return seconds, 0.0, 0.0, parameters, rss_start


def main():
    config = ARGS.config
    D, F, H, L, B, S, T, V, default_steps = CONFIGS[config]
    steps = ARGS.steps or default_steps
    torch.set_num_threads(ARGS.threads)
    run = run_mha if config == "mha" else run_seq2seq
    seconds, first_loss, last_loss, parameters, rss_start = run(config, ARGS.warmup, steps)
    peak_rss = proc_status_mb("VmHWM")  # before the sgemm buffers exist

    median = statistics.median(seconds)
    tokens = B * S if config == "mha" else B * (S + T)
    flops = step_flops(config)
    gflops = flops / median * 1e-9
    peak = sgemm_peak_gflops()
    result = {
        "impl": "torch", "config": config, "threads": ARGS.threads,
        "ms_per_step": round(median * 1e3, 3), "ms_min": round(min(seconds) * 1e3, 3),
        "tokens_per_s": round(tokens / median, 1), "peak_rss_mb": round(peak_rss, 1),
        "rss_start_mb": round(rss_start, 1), "gflops": round(gflops, 2), "mfu": round(gflops / peak, 4),
        "sgemm_peak_gflops": round(peak, 2), "flops_per_step": flops, "steps": steps, "warmup": ARGS.warmup,
        "parameters": parameters, "first_loss": round(first_loss, 4), "last_loss": round(last_loss, 4),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
    }
    if ARGS.json:
        print(json.dumps(result), flush=True)
    else:
        print(f"bench_train_torch.py: config {config}, {ARGS.threads} thread(s) "
              f"(OMP_WAIT_POLICY {result['omp_wait_policy']}), {steps} timed steps after {ARGS.warmup} warm-up")
        print(f"  {result['ms_per_step']:.3f} ms/step (median; min {result['ms_min']:.3f}), "
              f"{result['tokens_per_s']:.0f} tokens/s")
        print(f"  peak RSS {peak_rss:.1f} MB ({rss_start:.1f} MB before the first step), {parameters} parameters")
        print(f"  matmul work {flops * 1e-9:.3f} GFLOP/step -> {gflops:.2f} GFLOP/s; "
              f"sgemm peak (torch.mm) {peak:.2f} GFLOP/s; mfu {100 * gflops / peak:.1f}%")
        if config != "mha":
            print(f"  loss {first_loss:.4f} (first step) -> {last_loss:.4f} (last)")


if __name__ == "__main__":
    main()
