#!/usr/bin/env python3
"""The PyTorch reference for ag-train: d2l.ai's Transformer, trained by d2l's train_seq2seq loop on
ag's reverse task, with the configuration of d2l's Transformer chapter.

    /usr/bin/python3 examples/reference/d2l_reverse.py --seed 0 1 2      # ~1 min per seed

(/usr/bin/python3 is the interpreter that has Debian's python3-torch.) Nothing in the build or the
tests runs this script; examples/reference/compare.sh runs it next to ag-train, and the numbers are
in docs/training.md.

The model classes (EncoderDecoder, TransformerEncoder/Decoder, EncoderBlock, DecoderBlock,
MultiHeadAttention, DotProductAttention, masked_softmax, PositionalEncoding, AddNorm,
PositionWiseFFN) are imported from tests/fixtures/make_nn_parity_fixtures.py, which holds faithful
copies of d2l's zh (PyTorch) code and against which ag's layers are tested. MaskedSoftmaxCELoss,
grad_clipping and the body of train_seq2seq are d2l's code as well (below; grad_clipping also
returns the norm it measured, for the report only).

The task, generated here (ag generates its own with its own generator, from the same distribution):
  vocabulary 20: <pad> 0, <bos> 1, <eos> 2, content tokens 3–19;
  source = content (length uniform in 1–9, tokens uniform in 3–19) + <eos>, padded to 10;
  target = reversed content + <eos>, padded to 10; decoder input = <bos> + target[:-1];
  held-out: 500 distinct sources drawn from random.Random(0x5eed), whatever the training seed;
  training: fresh batches from random.Random(seed + 1), skipping any source in the held-out set.
torch.manual_seed(seed) seeds initialisation and dropout.

Reported per seed (one JSON line each, at the end):
  train_loss_per_token  mean over the last 100 steps of Σ CE over valid target tokens / number of
                        valid target tokens (for reporting only: the gradient is d2l's, that of
                        l.sum() where l is each sequence's CE averaged over all 10 positions);
  heldout_exact_seq_acc greedy decoding of the 500 held-out sources, batched, one token at a time
                        with the decoder's state (as d2l's predict_seq2seq); correct when the tokens
                        before the first <eos> are exactly the reversed content. The new token gets
                        the positional encoding of its position (step t: P[t]), as in training and
                        as ag's decoder does;
  heldout_exact_seq_acc_d2l_positions  the same, but calling d2l's TransformerDecoder.forward as
                        predict_seq2seq does, which adds P[:, :X.shape[1]] = P[0] to every step's
                        single token: every decoded token is encoded as position 0;
  heldout_loss_per_token teacher-forced CE per valid token on the held-out set, eval mode (fed one
                        step at a time: see evaluate);
  clipped_fraction, grad_norm_mean  how often grad_clipping acted and the mean norm before it;
  train_seconds, eval_seconds.
"""

import argparse
import json
import math
import os
import platform
import random
import sys
import time

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "fixtures"))
from make_nn_parity_fixtures import (  # noqa: E402  d2l's classes, verbatim
    EncoderDecoder, TransformerDecoder, TransformerEncoder, sequence_mask)

PAD, BOS, EOS = 0, 1, 2
VOCAB_SIZE = 20
MAX_CONTENT = 9
NUM_STEPS = MAX_CONTENT + 1  # content + <eos>
HELD_OUT_SEED = 0x5EED
HELD_OUT_SIZE = 500


# ==== d2l's training code (zh edition, PyTorch) ===================================================


class MaskedSoftmaxCELoss(nn.CrossEntropyLoss):
    """带遮蔽的softmax交叉熵损失函数"""
    # pred的形状：(batch_size,num_steps,vocab_size)
    # label的形状：(batch_size,num_steps)
    # valid_len的形状：(batch_size,)
    def forward(self, pred, label, valid_len):
        weights = torch.ones_like(label)
        weights = sequence_mask(weights, valid_len)
        self.reduction = 'none'
        unweighted_loss = super(MaskedSoftmaxCELoss, self).forward(
            pred.permute(0, 2, 1), label)
        weighted_loss = (unweighted_loss * weights).mean(dim=1)
        return weighted_loss


def grad_clipping(net, theta):
    """裁剪梯度"""
    if isinstance(net, nn.Module):
        params = [p for p in net.parameters() if p.requires_grad]
    else:
        params = net.params
    norm = torch.sqrt(sum(torch.sum((p.grad ** 2)) for p in params))
    if norm > theta:
        for param in params:
            param.grad[:] *= theta / norm
    return norm  # (added: the norm before clipping, for the report)


def xavier_init_weights(m):
    if type(m) == nn.Linear:
        nn.init.xavier_uniform_(m.weight)


# ==== the reverse task =============================================================================


def sample(rng):
    length = rng.randint(1, MAX_CONTENT)
    source = [rng.randint(3, VOCAB_SIZE - 1) for _ in range(length)]
    return source, source[::-1]


def held_out_set():
    rng = random.Random(HELD_OUT_SEED)
    seen, examples = set(), []
    while len(examples) < HELD_OUT_SIZE:
        source, target = sample(rng)
        if tuple(source) not in seen:
            seen.add(tuple(source))
            examples.append((source, target))
    return examples


def training_batch(rng, held_out_sources, batch_size):
    batch = []
    while len(batch) < batch_size:
        source, target = sample(rng)
        if tuple(source) not in held_out_sources:
            batch.append((source, target))
    return batch


def pad(tokens):
    return tokens + [PAD] * (NUM_STEPS - len(tokens))


def to_tensors(examples):
    """X, X_valid_len, Y, Y_valid_len as d2l's load_data_nmt gives them."""
    X = torch.tensor([pad(s + [EOS]) for s, _ in examples], dtype=torch.long)
    X_valid_len = torch.tensor([len(s) + 1 for s, _ in examples])
    Y = torch.tensor([pad(t + [EOS]) for _, t in examples], dtype=torch.long)
    Y_valid_len = torch.tensor([len(t) + 1 for _, t in examples])
    return X, X_valid_len, Y, Y_valid_len


# ==== model, decoding, evaluation ==================================================================


def make_net():
    # d2l's chapter: num_hiddens 32, num_layers 2, dropout 0.1, ffn_num_input 32, ffn_num_hiddens
    # 64, num_heads 4, key/query/value size 32, norm_shape [32].
    num_hiddens, num_layers, dropout = 32, 2, 0.1
    ffn_num_input, ffn_num_hiddens, num_heads = 32, 64, 4
    key_size = query_size = value_size = 32
    norm_shape = [32]
    encoder = TransformerEncoder(VOCAB_SIZE, key_size, query_size, value_size, num_hiddens, norm_shape,
                                 ffn_num_input, ffn_num_hiddens, num_heads, num_layers, dropout)
    decoder = TransformerDecoder(VOCAB_SIZE, key_size, query_size, value_size, num_hiddens, norm_shape,
                                 ffn_num_input, ffn_num_hiddens, num_heads, num_layers, dropout)
    return EncoderDecoder(encoder, decoder)


def decoder_forward_at(decoder, X, state, offset):
    """d2l's TransformerDecoder.forward, except that the tokens of X get the positional encodings of
    positions offset, offset + 1, … instead of 0, 1, … (what step-by-step decoding needs)."""
    X = decoder.embedding(X) * math.sqrt(decoder.num_hiddens)
    X = decoder.pos_encoding.dropout(X + decoder.pos_encoding.P[:, offset:offset + X.shape[1], :])
    for blk in decoder.blks:
        X, state = blk(X, state)
    return decoder.dense(X), state


@torch.no_grad()
def greedy_decode(net, X, X_valid_len, d2l_positions):
    """predict_seq2seq batched: one token per step, carrying the decoder state. Returns, for each
    source, the tokens before the first <eos> (or all NUM_STEPS of them)."""
    net.eval()
    enc_outputs = net.encoder(X, X_valid_len)
    dec_state = net.decoder.init_state(enc_outputs, X_valid_len)
    dec_X = torch.full((X.shape[0], 1), BOS, dtype=torch.long)
    steps = []
    for t in range(NUM_STEPS):
        if d2l_positions:
            Y, dec_state = net.decoder(dec_X, dec_state)
        else:
            Y, dec_state = decoder_forward_at(net.decoder, dec_X, dec_state, t)
        dec_X = Y.argmax(dim=2)
        steps.append(dec_X)
    net.train()
    predictions = []
    for row in torch.cat(steps, dim=1).tolist():
        predictions.append(row[:row.index(EOS)] if EOS in row else row)
    return predictions


@torch.no_grad()
def evaluate(net, held_out):
    X, X_valid_len, Y, Y_valid_len = to_tensors(held_out)
    targets = [t for _, t in held_out]
    accuracy = {}
    for d2l_positions in (False, True):
        predictions = greedy_decode(net, X, X_valid_len, d2l_positions)
        accuracy[d2l_positions] = sum(p == t for p, t in zip(predictions, targets)) / len(held_out)
    # Teacher-forced loss. In eval mode d2l's DecoderBlock drops its causal mask (it expects one
    # token per call), so a full forward would let every position see the later targets; feeding the
    # targets one step at a time gives what a causally masked forward gives, without dropout.
    net.eval()
    dec_input = torch.cat([torch.full((Y.shape[0], 1), BOS, dtype=torch.long), Y[:, :-1]], 1)
    dec_state = net.decoder.init_state(net.encoder(X, X_valid_len), X_valid_len)
    logits = []
    for t in range(NUM_STEPS):
        Y_hat, dec_state = decoder_forward_at(net.decoder, dec_input[:, t:t + 1], dec_state, t)
        logits.append(Y_hat)
    net.train()
    return accuracy[False], accuracy[True], per_token_loss(torch.cat(logits, 1), Y, Y_valid_len)


def per_token_loss(Y_hat, Y, Y_valid_len):
    """Σ CE over the valid target tokens / number of valid target tokens."""
    ce = nn.functional.cross_entropy(Y_hat.detach().permute(0, 2, 1), Y, reduction='none')
    mask = torch.arange(Y.shape[1])[None, :] < Y_valid_len[:, None]
    return (ce * mask).sum().item() / Y_valid_len.sum().item()


# ==== training: d2l's train_seq2seq ================================================================


def run(seed, steps, batch_size, lr, log_every):
    torch.manual_seed(seed)
    net = make_net()
    held_out = held_out_set()
    held_out_sources = {tuple(s) for s, _ in held_out}
    data = random.Random(seed + 1)

    # train_seq2seq(net, data_iter, lr, num_epochs, tgt_vocab, device), with steps for epochs
    net.apply(xavier_init_weights)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    loss = MaskedSoftmaxCELoss()
    net.train()
    recent, recent_d2l, norms = [], [], []
    start = time.perf_counter()
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        X, X_valid_len, Y, Y_valid_len = to_tensors(training_batch(data, held_out_sources, batch_size))
        bos = torch.tensor([BOS] * Y.shape[0]).reshape(-1, 1)
        dec_input = torch.cat([bos, Y[:, :-1]], 1)  # 强制教学
        Y_hat, _ = net(X, dec_input, X_valid_len)
        l = loss(Y_hat, Y, Y_valid_len)
        l.sum().backward()  # 损失函数的标量进行“反向传播”
        norms.append(grad_clipping(net, 1).item())
        num_tokens = Y_valid_len.sum()
        optimizer.step()
        with torch.no_grad():
            recent.append(per_token_loss(Y_hat, Y, Y_valid_len))  # reporting only
            recent_d2l.append(l.sum().item() / num_tokens.item())  # what d2l's animator plots
            recent, recent_d2l = recent[-100:], recent_d2l[-100:]
        if log_every and step % log_every == 0:
            print(f"seed {seed} step {step}/{steps}  loss per token {sum(recent) / len(recent):.4f}  "
                  f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    train_seconds = time.perf_counter() - start

    start = time.perf_counter()
    accuracy, accuracy_d2l_positions, heldout_loss = evaluate(net, held_out)
    eval_seconds = time.perf_counter() - start
    return {
        "impl": "pytorch-d2l",
        "seed": seed,
        "steps": steps,
        "train_loss_per_token": round(sum(recent) / len(recent), 4),
        "heldout_exact_seq_acc": round(accuracy, 4),
        "heldout_exact_seq_acc_d2l_positions": round(accuracy_d2l_positions, 4),
        "heldout_loss_per_token": round(heldout_loss, 4),
        "d2l_reported_loss": round(sum(recent_d2l) / len(recent_d2l), 4),
        "clipped_fraction": round(sum(n > 1 for n in norms) / len(norms), 4),
        "grad_norm_mean": round(sum(norms) / len(norms), 4),
        "grad_norm_mean_last100": round(sum(norms[-100:]) / len(norms[-100:]), 4),
        "train_seconds": round(train_seconds, 1),
        "eval_seconds": round(eval_seconds, 2),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, nargs="+", default=[0], help="one run per seed")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--log-every", type=int, default=500, help="progress on stderr (0: none)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"d2l_reverse.py: torch {torch.__version__}, python {platform.python_version()}, 1 thread",
          file=sys.stderr)
    results = [run(seed, args.steps, args.batch_size, args.lr, args.log_every) for seed in args.seed]
    for r in results:
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
