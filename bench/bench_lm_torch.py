#!/usr/bin/env python3
"""bench_lm_torch.py: PyTorch's side of the char-small language-model benchmark: the same model,
data, optimizer, schedule, evaluation, timing and JSON fields as ag-bench-lm (impl "torch"), so
that bench/compare_train.sh (speed) and bench/compare_lm.sh (validation loss) can put the two
side by side.

    /usr/bin/python3 bench/bench_lm_torch.py [--steps S] [--threads N] [--seed S] [--json]
        [--warmup W] [--eval-windows N] [--no-eval] [--fortunes DIR]

(/usr/bin/python3 is the interpreter that has Debian's python3-torch.)

The task (what ag-train --task lm does without --text):
  * the corpus: every regular file in /usr/share/games/fortunes not ending in .dat, symlinks
    skipped, in name order, decoded as UTF-8 and concatenated (nothing in between);
  * the split: the first 90 % of the characters (code points, int(n · 0.9) of them, nanoGPT's
    split) train, the rest validate;
  * the vocabulary: d2l's Vocab (the seed's edition) of the training split's characters, no
    reserved tokens: id 0 <unk>, then the characters by descending frequency, ties in order of
    first appearance; validation characters not in it become <unk>;
  * batches: nanoGPT's get_batch — batch 32 windows of 65 ids starting at uniform random offsets
    in [0, n_train − 65], X the first 64, Y the last 64 (from a torch.Generator seeded with
    --seed; ag draws its own from an ag::Generator, so the two see different but equally
    distributed batches).

The model is char-small, built from d2l's own PyTorch classes (MultiHeadAttention, AddNorm,
PositionWiseFFN, PositionalEncoding, imported from tests/fixtures/make_nn_parity_fixtures.py,
which holds verbatim copies of d2l's code): d2l's TransformerDecoder block without the
cross-attention,
    Y = AddNorm(X, MultiHeadAttention(X, X, X, causal valid_lens))   (post-norm)
    Z = AddNorm(Y, PositionWiseFFN(Y))
with the causal mask given as d2l's training path gives it (valid_lens[b, t] = t + 1) in training
AND in evaluation (d2l drops it in eval mode because it decodes one token at a time; ag keeps it
on); tokens -> PositionalEncoding(Embedding(tokens) · √d) -> 4 blocks -> Linear(d, V).
  d 128, 4 heads, 4 layers, FFN 512, block 64, batch 32, dropout 0.1, attention without bias
  (d2l's default). Initialisation: xavier_uniform_ on every nn.Linear weight, as d2l's train_seq2seq
  and ag's models/ do; the rest PyTorch's defaults (Embedding N(0, 1), biases U(±1/√in), LayerNorm
  1 and 0), which are ag's defaults too.

One step, as ag's train step:
    optimizer.zero_grad(set_to_none=True)
    loss = cross_entropy(net(X).reshape(-1, V), Y.reshape(-1))   # mean over the B·T tokens
    loss.backward()
    clip_grad_norm_(net.parameters(), 1.0)
    optimizer.step(); scheduler step
AdamW(lr 1e-3, betas (0.9, 0.99), eps 1e-8, weight decay 0.1) on every parameter (ag's
optim::AdamW decays every parameter of the groups it is given, and ag's LM train step gives it
one group of all parameters). The learning rate of update t = 1, 2, ... is 1e-3 · f(t), ag's
optim::cosine_with_warmup(100, 2000, 0.1):
    f(t) = t / 100                                        t <= 100
           0.1 + 0.9 · ½ (1 + cos(π (t − 100) / 1900))     100 < t < 2000
           0.1                                            t >= 2000
The schedule is always the 2000-step one: --steps S < 2000 runs its first S updates (for timing).

Evaluation (ag's models:: definition): the model in eval mode (dropout off), consecutive
non-overlapping windows of the validation ids from its start — window k has inputs
val[64k : 64k + 64] and labels val[64k + 1 : 64k + 65] — as many as fit (or the first
--eval-windows), in batches of 32 windows; the loss is the mean cross-entropy per token
(total nats / tokens), perplexity exp(loss), bits per character loss / ln 2.

Timing: every step is timed alone with time.perf_counter; the first --warmup (default 10) are
excluded and the median of the rest is reported (ms_per_step; ms_min their minimum). The process's
CPU time of each step (time.process_time: all its threads) is measured too, cpu_ms_per_step the
median: on a machine shared with other work it shows the work a step costs while the wall-clock
time shows also the waiting. tokens/s =
B·T / median; peak RSS = VmHWM before evaluation; GFLOP/s = the analytical matmul FLOP count of
step_flops / median; mfu = GFLOP/s / the sgemm peak (torch.mm 2048³, best of 5) at the same
thread count.

Threads: --threads N sets OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS before torch
is imported and calls torch.set_num_threads(N); OMP_WAIT_POLICY is taken from the environment and
reported.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

# char-small: width, FFN width, heads, layers, batch, block (T), dropout, schedule length.
D, F, H, L, B, T, DROPOUT, TOTAL_STEPS = 128, 512, 4, 4, 32, 64, 0.1, 2000
LR, BETAS, WEIGHT_DECAY, WARMUP_UPDATES, MIN_FACTOR, CLIP = 1e-3, (0.9, 0.99), 0.1, 100, 0.1, 1.0


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=TOTAL_STEPS, help="training steps (updates)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="parameters, dropout and batches")
    parser.add_argument("--warmup", type=int, default=10, help="steps left out of the timing")
    parser.add_argument("--eval-windows", type=int, default=0,
                        help="validation windows to evaluate (0: all that fit)")
    parser.add_argument("--no-eval", action="store_true", help="skip the final evaluation")
    parser.add_argument("--fortunes", default="/usr/share/games/fortunes")
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    args = parser.parse_args()
    if args.steps < 1 or args.steps > 1000000:
        parser.error(f"--steps {args.steps} must be in [1, 1000000]")
    if args.warmup < 0 or args.warmup >= args.steps:
        parser.error(f"--warmup {args.warmup} must be in [0, --steps {args.steps})")
    if args.threads < 1:
        parser.error(f"--threads {args.threads} must be at least 1")
    if args.eval_windows < 0:
        parser.error(f"--eval-windows {args.eval_windows} must not be negative")
    return args


ARGS = parse_args()
# Before torch is imported: the thread pools read these when they start.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)

import torch  # noqa: E402
from torch import nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
from make_nn_parity_fixtures import (  # noqa: E402  d2l's classes, verbatim
    AddNorm, MultiHeadAttention, PositionalEncoding, PositionWiseFFN)
from bench_train_torch import (  # noqa: E402  the Transformer benchmark's measuring, shared
    proc_status_mb, sgemm_peak_gflops, xavier_init_weights)


# ==== the task ===================================================================================


def read_fortunes(folder):
    """Every regular file not ending in .dat, symlinks skipped, name order, concatenated."""
    if not os.path.isdir(folder):
        sys.exit(f"bench_lm_torch.py: {folder} not found: install Debian's fortunes "
                 "(scripts/install-deps.sh)")
    parts = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".dat") or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            parts.append(f.read().decode("utf-8"))
    return "".join(parts)


class Vocab:
    """d2l's Vocab (zh-v2 / d2l 0.17), for a list of characters; only what the task needs."""

    def __init__(self, tokens, min_freq=0, reserved_tokens=None):
        if reserved_tokens is None:
            reserved_tokens = []
        counter = {}
        for token in tokens:  # collections.Counter's insertion order
            counter[token] = counter.get(token, 0) + 1
        self._token_freqs = sorted(counter.items(), key=lambda x: x[1], reverse=True)
        self.idx_to_token = ['<unk>'] + reserved_tokens
        self.token_to_idx = {token: idx for idx, token in enumerate(self.idx_to_token)}
        for token, freq in self._token_freqs:
            if freq < min_freq:
                break
            if token not in self.token_to_idx:
                self.idx_to_token.append(token)
                self.token_to_idx[token] = len(self.idx_to_token) - 1

    def __len__(self):
        return len(self.idx_to_token)

    def ids(self, tokens):
        return [self.token_to_idx.get(token, 0) for token in tokens]


def load_task(folder):
    text = read_fortunes(folder)
    n_train = int(len(text) * 0.9)  # nanoGPT's; ag's lm::split_text
    train_text, val_text = text[:n_train], text[n_train:]
    vocab = Vocab(list(train_text))
    train = torch.tensor(vocab.ids(train_text), dtype=torch.long)
    val = torch.tensor(vocab.ids(val_text), dtype=torch.long)
    return vocab, train, val


def get_batch(ids, generator):
    """nanoGPT's get_batch: B random windows of T + 1 ids."""
    ix = torch.randint(len(ids) - T, (B,), generator=generator)
    x = torch.stack([ids[i:i + T] for i in ix])
    y = torch.stack([ids[i + 1:i + 1 + T] for i in ix])
    return x, y


# ==== the model ==================================================================================


class LMBlock(nn.Module):
    """d2l's DecoderBlock without the encoder–decoder attention (attention2 / addnorm2)."""

    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, dropout):
        super().__init__()
        self.attention = MultiHeadAttention(num_hiddens, num_hiddens, num_hiddens, num_hiddens,
                                            num_heads, dropout)
        self.addnorm1 = AddNorm([num_hiddens], dropout)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens, num_hiddens)
        self.addnorm2 = AddNorm([num_hiddens], dropout)

    def forward(self, X):
        batch_size, num_steps, _ = X.shape
        # d2l's dec_valid_lens: row b is [1, 2, ..., num_steps] — query t sees keys 0..t.
        causal = torch.arange(1, num_steps + 1, device=X.device).repeat(batch_size, 1)
        Y = self.addnorm1(X, self.attention(X, X, X, causal))
        return self.addnorm2(Y, self.ffn(Y))


class LanguageModel(nn.Module):
    def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_layers, dropout):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.pos_encoding = PositionalEncoding(num_hiddens, dropout)
        self.blks = nn.Sequential()
        for i in range(num_layers):
            self.blks.add_module("block" + str(i),
                                 LMBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout))
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def forward(self, tokens):  # (B, T) -> logits (B, T, V)
        X = self.pos_encoding(self.embedding(tokens) * math.sqrt(self.num_hiddens))
        return self.dense(self.blks(X))


def lr_factor(t):
    """ag's optim::cosine_with_warmup(100, 2000, 0.1) at update t = 1, 2, ..."""
    if t <= WARMUP_UPDATES:
        return t / WARMUP_UPDATES
    if t >= TOTAL_STEPS:
        return MIN_FACTOR
    progress = (t - WARMUP_UPDATES) / (TOTAL_STEPS - WARMUP_UPDATES)
    return MIN_FACTOR + (1 - MIN_FACTOR) * 0.5 * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def evaluate(net, val, max_windows):
    """Mean cross-entropy per token over consecutive non-overlapping validation windows."""
    net.eval()
    windows = (len(val) - 1) // T
    if max_windows:
        windows = min(windows, max_windows)
    total, tokens = 0.0, 0
    for first in range(0, windows, B):
        ks = range(first, min(first + B, windows))
        x = torch.stack([val[k * T:k * T + T] for k in ks])
        y = torch.stack([val[k * T + 1:k * T + T + 1] for k in ks])
        logits = net(x)
        total += nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                             reduction="sum").item()
        tokens += y.numel()
    net.train()
    return total / tokens, windows


# ==== measuring ==================================================================================


def step_flops(V):
    """Matmul FLOPs of one step: 2·M·N·K per product of the forward, × 3 with the backward.
    Per block: Q, K, V, O projections 4·2·B·T·D·D; Q·Kᵀ and weights·V 2·2·B·T·T·D (the masked
    half counts: it is computed); FFN 2·2·B·T·D·F. Output layer 2·B·T·D·V."""
    block = 4 * 2 * B * T * D * D + 2 * 2 * B * T * T * D + 2 * 2 * B * T * D * F
    return 3 * (L * block + 2 * B * T * D * V)


def main():
    torch.set_num_threads(ARGS.threads)
    vocab, train, val = load_task(ARGS.fortunes)
    V = len(vocab)

    torch.manual_seed(ARGS.seed)
    net = LanguageModel(V, D, F, H, L, DROPOUT)
    net.apply(xavier_init_weights)
    net.train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=LR, betas=BETAS, eps=1e-8,
                                  weight_decay=WEIGHT_DECAY)
    batches = torch.Generator().manual_seed(ARGS.seed)

    seconds, cpu_seconds, losses = [], [], []
    rss_start = proc_status_mb("VmRSS")
    for step in range(1, ARGS.steps + 1):
        x, y = get_batch(train, batches)  # not timed (ag's batches are not either)
        start, start_cpu = time.perf_counter(), time.process_time()
        for group in optimizer.param_groups:
            group["lr"] = LR * lr_factor(step)
        optimizer.zero_grad(set_to_none=True)
        logits = net(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), CLIP)
        optimizer.step()
        losses.append(loss.item())
        elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        if step > ARGS.warmup:
            seconds.append(elapsed)
            cpu_seconds.append(elapsed_cpu)
        if not math.isfinite(losses[-1]):
            sys.exit(f"bench_lm_torch.py: the loss is {losses[-1]} at step {step}")
    peak_rss = proc_status_mb("VmHWM")

    val_loss, windows = (float("nan"), 0) if ARGS.no_eval else evaluate(net, val, ARGS.eval_windows)
    median = statistics.median(seconds)
    flops = step_flops(V)
    gflops = flops / median * 1e-9
    peak = sgemm_peak_gflops()
    result = {
        "impl": "torch", "config": "char-small", "threads": ARGS.threads, "seed": ARGS.seed,
        "ms_per_step": round(median * 1e3, 3), "ms_min": round(min(seconds) * 1e3, 3),
        "cpu_ms_per_step": round(statistics.median(cpu_seconds) * 1e3, 3),
        "tokens_per_s": round(B * T / median, 1), "peak_rss_mb": round(peak_rss, 1),
        "rss_start_mb": round(rss_start, 1), "gflops": round(gflops, 2),
        "mfu": round(gflops / peak, 4), "sgemm_peak_gflops": round(peak, 2),
        "flops_per_step": flops, "steps": ARGS.steps, "warmup": ARGS.warmup,
        "parameters": sum(p.numel() for p in net.parameters()), "vocab": V,
        "train_chars": len(train), "val_chars": len(val),
        "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4),
        "val_loss": None if ARGS.no_eval else round(val_loss, 5), "val_windows": windows,
        "train_seconds": round(sum(seconds), 2),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
    }
    if ARGS.json:
        print(json.dumps(result), flush=True)
        return
    print(f"bench_lm_torch.py: char-small, {ARGS.threads} thread(s) (OMP_WAIT_POLICY "
          f"{result['omp_wait_policy']}), seed {ARGS.seed}, {ARGS.steps} steps "
          f"({ARGS.warmup} left out of the timing)")
    print(f"  fortunes: {len(train)} training and {len(val)} validation characters, vocabulary {V}")
    print(f"  {result['ms_per_step']:.3f} ms/step (median; min {result['ms_min']:.3f}), "
          f"{result['tokens_per_s']:.0f} tokens/s; CPU time {result['cpu_ms_per_step']:.3f} ms/step")
    print(f"  peak RSS {peak_rss:.1f} MB ({rss_start:.1f} MB before the first step), "
          f"{result['parameters']} parameters")
    print(f"  matmul work {flops * 1e-9:.3f} GFLOP/step -> {gflops:.2f} GFLOP/s; "
          f"sgemm peak (torch.mm) {peak:.2f} GFLOP/s; mfu {100 * gflops / peak:.1f}%")
    print(f"  training loss {losses[0]:.4f} (first step) -> {losses[-1]:.4f} (last)")
    if not ARGS.no_eval:
        print(f"  validation loss {val_loss:.4f} over {windows} windows of {T} "
              f"(perplexity {math.exp(val_loss):.3f}, {val_loss / math.log(2):.4f} bits/char)")


if __name__ == "__main__":
    main()
