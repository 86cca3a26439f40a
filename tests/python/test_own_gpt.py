"""A GPT of the user's own, written as readers of nanoGPT's model.py write one for PyTorch, with
`import ag as torch`: the idioms that code leans on run as they are — device= on creation,
inspect.signature(torch.optim.AdamW), a tied lm_head, module.apply for the init, the fused QKV
split into heads, F.scaled_dot_product_attention(is_causal=True), cross_entropy's ignore_index=-1,
x[:, [-1], :] for the last position, and top-k sampling's logits[logits < v[:, [-1]]] = -inf under
@torch.no_grad()."""

import inspect
import math

import ag as torch
import ag.nn as nn
from ag.nn import functional as F


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width, bias=False)  # q, k and v in one product
        self.proj = nn.Linear(width, width, bias=False)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, heads, T, C / heads)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width, bias=False), nn.LayerNorm(width, bias=False)
        self.attention = Attention(width, heads)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, block, width=16, heads=2, layers=2):
        super().__init__()
        self.block = block
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(width, bias=False)
        self.head = nn.Linear(width, vocab, bias=False)
        self.tokens.weight = self.head.weight  # tied
        self.apply(self.init)

    @staticmethod
    def init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.tokens(idx) + self.positions(pos)  # (b, t, width)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        if targets is None:
            return self.head(x[:, [-1], :]), None  # (b, 1, vocab): the last position only
        logits = self.head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, new_tokens, top_k):
        for _ in range(new_tokens):
            logits, _ = self(idx[:, -self.block:])
            logits = logits[:, -1, :]  # (b, vocab)
            v, _ = torch.topk(logits, top_k)
            logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        return idx


def test_a_nanogpt_style_model_trains_and_samples_as_written():
    torch.manual_seed(0)
    model = TinyGPT(vocab=11, block=8)
    # the tied matrix is one parameter: 2-D ones decay, as nanoGPT's configure_optimizers splits
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    assert len(params) == 2 + 2 * 8 + 1 and len(decay) == 2 + 2 * 4
    assert "fused" not in inspect.signature(torch.optim.AdamW).parameters
    groups = [{"params": decay, "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.99))
    # targets: the next token of a repeating sequence, the last of each row ignored (-1)
    x = torch.tensor([[(i + j) % 11 for j in range(8)] for i in range(4)])
    y = torch.tensor([[(i + j + 1) % 11 if j < 7 else -1 for j in range(8)] for i in range(4)])
    losses = []
    for _ in range(30):
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] > 0.9 * math.log(11) and losses[-1] < 0.5 * losses[0]
    assert model.tokens.weight.is_same(model.head.weight)
    model.eval()
    out = model.generate(torch.zeros((2, 1), dtype=torch.long, device="cpu"), 6, top_k=3)
    assert out.shape == (2, 7) and out.dtype == torch.long
    assert all(0 <= token < 11 for row in out.tolist() for token in row)
