#!/usr/bin/env python3
"""nanogpt_torch.py: PyTorch's side of ag-nanogpt (examples/nanogpt/): nanoGPT's GPT and its
training recipe, the same architecture, initialisation, data, batches, schedule, evaluation and log
lines, so that bench/compare_nanogpt.sh can put the two side by side.

    /usr/bin/python3 bench/nanogpt_torch.py [--seed S] [--threads N] [--max-iters N] [--text FILE]
        [any of ag-nanogpt's --n-layer, --n-head, --n-embd, --block-size, --batch-size,
         --gradient-accumulation-steps, --learning-rate, --min-lr, --warmup-iters,
         --lr-decay-iters, --weight-decay, --beta1, --beta2, --grad-clip, --dropout, --bias,
         --eval-interval, --eval-iters, --log-interval]

(/usr/bin/python3 is the interpreter that has Debian's python3-torch, 1.13.) The defaults are
ag-nanogpt's: nanoGPT's README recipe for a CPU on Debian's fortunes (4 layers, 4 heads, width
128, block 64, batch 12, 2000 iterations, lr 1e-3 -> 1e-4 after a warm-up of 100, dropout 0,
weight decay 0.1, betas 0.9/0.99, clipping at 1, evaluation every 250 iterations on 20 batches of
each split), seed 1337.

What is the same as ag-nanogpt, and how:
  * the text and its tokens (nanoGPT's prepare.py): every character a token, the vocabulary the
    sorted set of the whole text's characters, the first int(n * 0.9) characters train and the rest
    validate. The fortunes: every regular file of /usr/share/games/fortunes not ending in .dat,
    symbolic links skipped, in name order, concatenated (data::read_fortunes);
  * the batches: each window's offset is next() mod (len(data) - block_size) of a SplitMix64
    stream seeded with --seed, drawn in the same order as ag-nanogpt draws them (an evaluation's
    eval_iters batches of train, then of val; each iteration's batch_size x
    gradient_accumulation_steps windows) — both programs train and evaluate on the very same
    windows;
  * the model: model.py's GPT, with the causal attention written out as nanoGPT's fallback for a
    PyTorch without F.scaled_dot_product_attention (1.13 has none): q k^T / sqrt(hs), the future
    masked to -inf, softmax, dropout, times v. The mask is a non-persistent buffer, so that the
    state dict holds exactly ag-nanogpt's names (transformer.wte.weight, ..., lm_head.weight);
  * the initialisation scheme: N(0, 0.02) for every Linear and Embedding weight, zero biases,
    N(0, 0.02 / sqrt(2 n_layer)) for the c_proj weights — drawn from torch's generator seeded with
    --seed, so the initial weights themselves differ from ag's (another generator);
  * the recipe: AdamW(eps 1e-8) over two groups, weight decay on the >= 2-D parameters only;
    get_lr (warm-up (it + 1) / (warmup_iters + 1), cosine to min_lr at lr_decay_iters);
    gradient accumulation (each micro-batch's loss / gradient_accumulation_steps, backward);
    clip_grad_norm_ at grad_clip (none for 0); zero_grad(set_to_none=True);
  * the iterations: "step 0" is evaluated before training, then iteration t = 0, 1, ... is the
    update that makes t + 1 updates, and "step N" is evaluated after N updates, every
    eval_interval and after the last (ag-nanogpt's numbering: the run ends with the evaluation of
    step max_iters, without nanoGPT's extra update after it);
  * the log lines: "step N: train loss X, val loss Y" and "iter N: loss X, time Tms", where the
    time is the iteration's alone — its batch, forward, backward and update — by
    time.perf_counter, as ag-nanogpt's by std::chrono::steady_clock; and at the end the same
    summary, "time per iteration: median Tms, CPU time median Cms" (the process's CPU time,
    time.process_time, as ag-nanogpt's std::clock), the first 10 iterations left out.

Threads: --threads N sets OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS before torch is
imported and calls torch.set_num_threads(N), as bench/bench_train_torch.py and bench_lm_torch.py
do.
"""

import argparse
import math
import os
import statistics
import sys
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--threads", type=int, default=1)
    add("--seed", type=int, default=1337, help="the initial weights, dropout and the batches")
    add("--text", default="", help="a UTF-8 text file (default: Debian's fortunes)")
    add("--fortunes", default="/usr/share/games/fortunes")
    add("--n-layer", type=int, default=4)
    add("--n-head", type=int, default=4)
    add("--n-embd", type=int, default=128)
    add("--block-size", type=int, default=64)
    add("--batch-size", type=int, default=12)
    add("--gradient-accumulation-steps", type=int, default=1)
    add("--dropout", type=float, default=0.0)
    add("--bias", action="store_true")
    add("--max-iters", type=int, default=2000)
    add("--learning-rate", type=float, default=1e-3)
    add("--min-lr", type=float, default=1e-4)
    add("--warmup-iters", type=int, default=100)
    add("--lr-decay-iters", type=int, default=2000)
    add("--weight-decay", type=float, default=1e-1)
    add("--beta1", type=float, default=0.9)
    add("--beta2", type=float, default=0.99)
    add("--grad-clip", type=float, default=1.0)
    add("--eval-interval", type=int, default=250)
    add("--eval-iters", type=int, default=20)
    add("--log-interval", type=int, default=1)
    args = parser.parse_args()
    for name in ("threads", "n_layer", "n_head", "n_embd", "block_size", "batch_size",
                 "gradient_accumulation_steps", "max_iters", "lr_decay_iters", "eval_interval",
                 "eval_iters", "log_interval"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.n_embd % args.n_head != 0:
        parser.error(f"--n-head {args.n_head} does not divide --n-embd {args.n_embd}")
    if not 0 <= args.warmup_iters < args.lr_decay_iters:
        parser.error("--warmup-iters must be in [0, --lr-decay-iters)")
    return args


ARGS = parse_args()
# Before torch is imported: the thread pools read these when they start.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402


# ==== the data: prepare.py and get_batch =========================================================


def read_fortunes(folder):
    """Every regular file not ending in .dat, symlinks skipped, name order, concatenated."""
    if not os.path.isdir(folder):
        sys.exit(f"nanogpt_torch.py: {folder} not found: install Debian's fortunes "
                 "(scripts/install-deps.sh)")
    parts = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".dat") or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            parts.append(f.read().decode("utf-8"))
    return "".join(parts)


class BatchStream:
    """SplitMix64 (Steele, Lea & Flood 2014), the stream of ag's data::BatchStream."""
    MASK = (1 << 64) - 1

    def __init__(self, seed):
        self.state = seed & self.MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & self.MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.MASK
        return z ^ (z >> 31)


def get_batch(data, rows, block_size, stream):
    """rows windows of block_size ids (x) and the same shifted by one (y), (rows, T) each."""
    span = len(data) - block_size
    ix = [stream.next() % span for _ in range(rows)]
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


# ==== the model: model.py ========================================================================


class LayerNorm(nn.Module):
    """A LayerNorm whose bias may be left out (PyTorch 1.13's nn.LayerNorm always has one)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout, bias):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)  # q, k, v of every head at once
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        # 1 where query t may see key s (s <= t); not saved, so the state dict is ag's
        causal = torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        self.register_buffer("bias", causal, persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        # the explicit attention of nanoGPT's fallback:
        # (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout, bias):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout, bias)
        self.ln_2 = LayerNorm(n_embd, bias)
        self.mlp = MLP(n_embd, dropout, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, n_layer, n_head, n_embd, block_size, dropout, bias):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, dropout, bias)
                             for _ in range(n_layer)]),
            ln_f=LayerNorm(n_embd, bias),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied: one (V, C) tensor
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # the residual projections, scaled down
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self):
        """The parameters (the tied one once), without the position embeddings."""
        return sum(p.numel() for p in self.parameters()) - self.transformer.wpe.weight.numel()

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


# ==== the training: train.py =====================================================================


def main():
    a = ARGS
    torch.set_num_threads(a.threads)
    text = open(a.text, encoding="utf-8").read() if a.text else read_fortunes(a.fortunes)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    n = len(text)
    n_train = int(n * 0.9)
    train_data = torch.tensor([stoi[ch] for ch in text[:n_train]], dtype=torch.long)
    val_data = torch.tensor([stoi[ch] for ch in text[n_train:]], dtype=torch.long)
    print(f"length of dataset in characters: {n:,}")
    print(f"vocab size: {len(chars)}")
    print(f"train has {len(train_data):,} tokens\nval has {len(val_data):,} tokens")
    rows = a.batch_size * a.gradient_accumulation_steps
    print(f"tokens per iteration will be: {rows * a.block_size:,}")

    torch.manual_seed(a.seed)
    model = GPT(len(chars), a.n_layer, a.n_head, a.n_embd, a.block_size, a.dropout, a.bias)
    print(f"number of parameters: {model.get_num_params() / 1e6:.2f}M ({model.get_num_params():,})")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    print(f"num decayed parameter tensors: {len(decay)}, with "
          f"{sum(p.numel() for p in decay):,} parameters")
    print(f"num non-decayed parameter tensors: {len(no_decay)}, with "
          f"{sum(p.numel() for p in no_decay):,} parameters")
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=a.learning_rate, betas=(a.beta1, a.beta2), eps=1e-8)

    def get_lr(it):
        if it < a.warmup_iters:
            return a.learning_rate * (it + 1) / (a.warmup_iters + 1)
        if it > a.lr_decay_iters:
            return a.min_lr
        decay_ratio = (it - a.warmup_iters) / (a.lr_decay_iters - a.warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return a.min_lr + coeff * (a.learning_rate - a.min_lr)

    stream = BatchStream(a.seed)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split, data in (("train", train_data), ("val", val_data)):
            total = 0.0
            for _ in range(a.eval_iters):
                x, y = get_batch(data, a.batch_size, a.block_size, stream)
                total += model(x, y)[1].item()
            out[split] = total / a.eval_iters
        model.train()
        return out

    best_val_loss = 1e9

    def evaluate(iter_num):
        nonlocal best_val_loss
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}",
              flush=True)
        best_val_loss = min(best_val_loss, losses["val"])

    model.train()
    evaluate(0)
    wall_ms, cpu_ms = [], []
    for it in range(a.max_iters):  # the update that makes it + 1 updates
        t0, cpu0 = time.perf_counter(), time.process_time()
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        x, y = get_batch(train_data, rows, a.block_size, stream)
        lossf = 0.0
        for micro in range(a.gradient_accumulation_steps):
            part = slice(micro * a.batch_size, (micro + 1) * a.batch_size)
            _, loss = model(x[part], y[part])
            loss = loss / a.gradient_accumulation_steps
            loss.backward()
            lossf += loss.item()
        if a.grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        wall_ms.append(dt * 1000)
        cpu_ms.append((time.process_time() - cpu0) * 1000)
        if it % a.log_interval == 0:
            print(f"iter {it}: loss {lossf:.4f}, time {dt * 1000:.2f}ms")
        if not math.isfinite(lossf):
            sys.exit(f"nanogpt_torch.py: the loss is {lossf} at iter {it}")
        if (it + 1) % a.eval_interval == 0 or it + 1 == a.max_iters:
            evaluate(it + 1)
    print(f"best val loss {best_val_loss:.4f}")
    if len(wall_ms) > 10:  # ag-nanogpt's summary: medians, the first 10 iterations left out
        print(f"time per iteration: median {statistics.median(wall_ms[10:]):.2f}ms, CPU time "
              f"median {statistics.median(cpu_ms[10:]):.2f}ms (iterations from 10 on)")


if __name__ == "__main__":
    main()
