#include "nn/loss.h"

#include <cmath>

namespace ag::nn {

Tensor masked_softmax_ce(const Tensor& logits, const Tensor& labels, const Tensor& valid_lens) {
  if (logits.dim() != 3 || labels.shape() != Shape{logits.size(0), logits.size(1)} ||
      valid_lens.shape() != Shape{logits.size(0)})
    fail<ShapeError>("masked_softmax_ce: logits ", shape_str(logits.shape()), ", labels ",
        shape_str(labels.shape()), " and valid_lens ", shape_str(valid_lens.shape()),
        " do not fit (expected (B, T, V), (B, T) and (B,))");
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  double valid_tokens = 0;
  for (double len : index_values(valid_lens, "masked_softmax_ce")) {
    if (!(len >= 0 && len <= static_cast<double>(T)) || len != std::floor(len))
      fail<ShapeError>("masked_softmax_ce: valid length ", len, " is not an integer in [0, ", T,
          "] for logits of shape ", shape_str(logits.shape()));
    valid_tokens += len;
  }
  if (valid_tokens == 0)
    fail<ShapeError>("masked_softmax_ce: no valid tokens (valid_lens all 0) for logits of shape ",
        shape_str(logits.shape()));
  // Cross-entropy of every position, padding included: (B·T, V) -> (B·T,) -> (B, T)
  Tensor per_token =
      cross_entropy(logits.reshape({B * T, V}), labels.reshape({B * T}), Reduction::none)
          .reshape({B, T});
  // weight[b, t] = 1 for t < valid_lens[b], 0 for padding: (1, T) < (B, 1) -> (B, T)
  Tensor weights;
  {
    NoGradGuard no_grad;
    Tensor lens = valid_lens.to(logits.dtype()).reshape({B, 1});
    weights = lt(arange(static_cast<double>(T), logits.dtype()).reshape({1, T}), lens);
  }
  return sum(per_token * weights) / valid_tokens;  // mean over the valid tokens
}

Tensor mse_loss(const Tensor& prediction, const Tensor& target) {
  Tensor difference = prediction - target;
  if (difference.shape() != prediction.shape())
    fail<ShapeError>("mse_loss: target of shape ", shape_str(target.shape()),
        " does not broadcast to the prediction's shape ", shape_str(prediction.shape()));
  return mean(difference * difference);
}

}  // namespace ag::nn
