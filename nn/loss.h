// Losses for training (ag::cross_entropy, the fused softmax cross-entropy, is in autograd/ops.h).
#pragma once

#include "autograd/autograd.h"
#include "autograd/ops.h"

namespace ag::nn {

// d2l's MaskedSoftmaxCELoss, normalised by the number of valid tokens: for logits (B, T, V),
// labels (B, T) of class ids and valid_lens (B,),
//   loss = Σ_{b, t < valid_lens[b]} CE(logits[b, t], labels[b, t]) / Σ_b valid_lens[b]
// — the mean cross-entropy per valid token. (d2l instead averages each sequence over all T
// positions, padding included, which makes the loss depend on how much padding there is.) So
// uniform logits give ln V whatever the lengths, and padding positions get gradient 0.
Tensor masked_softmax_ce(const Tensor& logits, const Tensor& labels, const Tensor& valid_lens);

// mean((prediction − target)²), target broadcast to the prediction's shape.
Tensor mse_loss(const Tensor& prediction, const Tensor& target);

}  // namespace ag::nn
