"""makemore's idioms (Karpathy's "Building makemore" parts 4 and 5), written as its readers write
them for PyTorch, with `import ag as torch`: an MLP's backward written by hand and checked against
the gradients backward keeps (retain_grad, allclose, probs[range(n), Yb], dlogprobs[range(n), Yb] =
-1.0/n, dC[ix] += demb[k, j]), and a WaveNet of the reader's own layer classes — a Linear that adds
its bias with self.out += self.bias, a BatchNorm1d with running statistics, p.data += -lr * p.grad
as the update."""

import pytest

import ag as torch
from ag.nn import functional as F


def batch(n=32, block=3, vocab=9, seed=5):
    g = torch.Generator().manual_seed(seed)
    X = torch.randint(0, vocab, (n, block), generator=g)
    Y = torch.randint(0, vocab, (n,), generator=g)
    return X, Y, g


def test_a_backward_written_by_hand_matches_the_one_backward_keeps():
    vocab, n_embd, block, n_hidden, n = 9, 4, 3, 16, 32
    Xb, Yb, g = batch(n, block, vocab)
    C = torch.randn((vocab, n_embd), generator=g)
    W1 = torch.randn((n_embd * block, n_hidden), generator=g) * 0.3
    b1 = torch.randn(n_hidden, generator=g) * 0.1
    W2 = torch.randn((n_hidden, vocab), generator=g) * 0.1
    b2 = torch.randn(vocab, generator=g) * 0.1
    bngain = torch.randn((1, n_hidden)) * 0.1 + 1.0
    bnbias = torch.randn((1, n_hidden)) * 0.1
    parameters = [C, W1, b1, W2, b2, bngain, bnbias]
    for p in parameters:
        p.requires_grad = True
    # the forward, in small steps
    emb = C[Xb]  # (n, block, n_embd)
    embcat = emb.view(emb.shape[0], -1)
    hprebn = embcat @ W1 + b1
    bnmeani = 1 / n * hprebn.sum(0, keepdim=True)
    bndiff = hprebn - bnmeani
    bndiff2 = bndiff**2
    bnvar = 1 / (n - 1) * bndiff2.sum(0, keepdim=True)
    bnvar_inv = (bnvar + 1e-5)**-0.5
    bnraw = bndiff * bnvar_inv
    hpreact = bngain * bnraw + bnbias
    h = torch.tanh(hpreact)
    logits = h @ W2 + b2
    logit_maxes = logits.max(1, keepdim=True).values
    norm_logits = logits - logit_maxes
    counts = norm_logits.exp()
    counts_sum = counts.sum(1, keepdims=True)
    counts_sum_inv = counts_sum**-1
    probs = counts * counts_sum_inv
    logprobs = probs.log()
    loss = -logprobs[range(n), Yb].mean()
    kept = [logprobs, probs, counts, counts_sum, counts_sum_inv, norm_logits, logit_maxes,
            logits, h, hpreact, bnraw, bnvar_inv, bnvar, bndiff2, bndiff, hprebn, bnmeani,
            embcat, emb]
    for t in kept:
        t.retain_grad()
    loss.backward()
    assert abs(F.cross_entropy(logits, Yb).item() - loss.item()) < 1e-12

    # exercise 1, in grad mode as the notebook runs it: its += are recorded in the graph
    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(n), Yb] = -1.0 / n
    dprobs = (1.0 / probs) * dlogprobs
    dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
    dcounts = counts_sum_inv * dprobs
    dcounts_sum = (-counts_sum**-2) * dcounts_sum_inv
    dcounts += torch.ones_like(counts) * dcounts_sum
    dnorm_logits = counts * dcounts
    dlogits = dnorm_logits.clone()
    dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)
    dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes
    dh = dlogits @ W2.T
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(0)
    dhpreact = (1.0 - h**2) * dh
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnraw = bngain * dhpreact
    dbnbias = dhpreact.sum(0, keepdim=True)
    dbndiff = bnvar_inv * dbnraw
    dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
    dbnvar = (-0.5 * (bnvar + 1e-5)**-1.5) * dbnvar_inv
    dbndiff2 = (1.0 / (n - 1)) * torch.ones_like(bndiff2) * dbnvar
    dbndiff += (2 * bndiff) * dbndiff2
    dhprebn = dbndiff.clone()
    dbnmeani = (-dbndiff).sum(0)
    dhprebn += 1.0 / n * (torch.ones_like(hprebn) * dbnmeani)
    dembcat = dhprebn @ W1.T
    dW1 = embcat.T @ dhprebn
    db1 = dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    for k in range(Xb.shape[0]):
        for j in range(Xb.shape[1]):
            ix = Xb[k, j]
            dC[ix] += demb[k, j]
    assert dC.grad_fn == "where"  # recorded: demb's gradient would reach it
    # exercise 2: cross_entropy's backward in one line. softmax keeps its output for its
    # backward, so writing into it in the graph is refused (PyTorch would fail at a backward
    # through it); outside the graph it is a plain write.
    dlogits_fast = F.softmax(logits, 1)
    with pytest.raises(torch.AutogradError, match="memory another tensor shares"):
        dlogits_fast[range(n), Yb] -= 1
    with torch.no_grad():
        dlogits_fast = F.softmax(logits, 1)
        dlogits_fast[range(n), Yb] -= 1
        dlogits_fast /= n

    by_hand = [dlogprobs, dprobs, dcounts, dcounts_sum, dcounts_sum_inv, dnorm_logits,
               dlogit_maxes, dlogits, dh, dhpreact, dbnraw, dbnvar_inv, dbnvar, dbndiff2,
               dbndiff, dhprebn, dbnmeani, dembcat, demb]
    for t, dt in zip(kept, by_hand):
        assert torch.allclose(dt, t.grad), t.grad_fn  # (dbnmeani: (16,) against (1, 16))
    assert torch.all(dlogprobs == logprobs.grad).item()  # the first ones are exact
    for p, dp in zip(parameters, [dC, dW1, db1, dW2, db2, dbngain, dbnbias]):
        assert torch.allclose(dp, p.grad)
    assert torch.allclose(dlogits_fast, logits.grad)
    assert not torch.allclose(dC, C.grad * 2)  # (the check can fail)


class Linear:
    def __init__(self, fan_in, fan_out, bias=True):
        self.weight = torch.randn((fan_in, fan_out)) / fan_in**0.5
        self.bias = torch.zeros(fan_out) if bias else None

    def __call__(self, x):
        self.out = x @ self.weight
        if self.bias is not None:
            self.out += self.bias  # in place, recorded in the graph
        return self.out

    def parameters(self):
        return [self.weight] + ([] if self.bias is None else [self.bias])


class BatchNorm1d:
    def __init__(self, dim, eps=1e-5, momentum=0.1):
        self.eps, self.momentum, self.training = eps, momentum, True
        self.gamma, self.beta = torch.ones(dim), torch.zeros(dim)
        self.running_mean, self.running_var = torch.zeros(dim), torch.ones(dim)

    def __call__(self, x):
        if self.training:
            dim = 0 if x.ndim == 2 else (0, 1)
            xmean = x.mean(dim, keepdim=True)
            xvar = x.var(dim, keepdim=True)
        else:
            xmean, xvar = self.running_mean, self.running_var
        xhat = (x - xmean) / torch.sqrt(xvar + self.eps)
        self.out = self.gamma * xhat + self.beta
        if self.training:
            with torch.no_grad():
                self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * xmean
                self.running_var = (1 - self.momentum) * self.running_var + self.momentum * xvar
        return self.out

    def parameters(self):
        return [self.gamma, self.beta]


class Tanh:
    def __call__(self, x):
        self.out = torch.tanh(x)
        return self.out

    def parameters(self):
        return []


class Embedding:
    def __init__(self, num_embeddings, embedding_dim):
        self.weight = torch.randn((num_embeddings, embedding_dim))

    def __call__(self, IX):
        self.out = self.weight[IX]
        return self.out

    def parameters(self):
        return [self.weight]


class FlattenConsecutive:
    def __init__(self, n):
        self.n = n

    def __call__(self, x):
        B, T, C = x.shape
        x = x.view(B, T // self.n, C * self.n)
        if x.shape[1] == 1:
            x = x.squeeze(1)
        self.out = x
        return self.out

    def parameters(self):
        return []


class Sequential:
    def __init__(self, layers):
        self.layers = layers

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        self.out = x
        return self.out

    def parameters(self):
        return [p for layer in self.layers for p in layer.parameters()]


def test_a_wavenet_of_the_readers_own_layers_trains_and_samples():
    torch.manual_seed(42)
    vocab, n_embd, n_hidden = 9, 8, 32
    model = Sequential([
        Embedding(vocab, n_embd),
        FlattenConsecutive(2), Linear(n_embd * 2, n_hidden, bias=False), BatchNorm1d(n_hidden),
        Tanh(),
        FlattenConsecutive(2), Linear(n_hidden * 2, n_hidden, bias=False), BatchNorm1d(n_hidden),
        Tanh(),
        Linear(n_hidden, vocab),
    ])
    with torch.no_grad():
        model.layers[-1].weight *= 0.1
    parameters = model.parameters()
    for p in parameters:
        p.requires_grad = True
    Xb, Yb, _ = batch(n=32, block=4, vocab=vocab)
    losses = []
    for _ in range(40):  # one batch, learned by heart
        loss = F.cross_entropy(model(Xb), Yb)
        for p in parameters:
            p.grad = None
        loss.backward()
        for p in parameters:
            p.data += -0.1 * p.grad
        losses.append(loss.item())
    assert model.layers[-1].out.grad_fn == "add"  # the bias's +=, recorded
    assert model.layers[-1].bias.grad is not None  # and its gradient reached the bias
    assert losses[-1] < 0.5 * losses[0]
    running = model.layers[3].running_mean
    assert running.shape == (1, 1, n_hidden) and running.abs().sum().item() > 0
    for layer in model.layers:
        layer.training = False
    with torch.no_grad():
        context = [0] * 4
        logits = model(torch.tensor([context]))
        probs = F.softmax(logits, dim=1)
        ix = torch.multinomial(probs, num_samples=1).item()
    assert 0 <= ix < vocab
