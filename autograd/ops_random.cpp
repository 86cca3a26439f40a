// Dropout, with its backward.
//
//   dropout(x, p)   y = x · m,  m_i = 1/(1 − p) with probability 1 − p, else 0
//   gradient        g · m       (the same mask: dropped units pass no gradient)
//
// Scaling the kept units by 1/(1 − p) ("inverted dropout") keeps E[y] = x, so evaluation needs
// no rescaling: outside training dropout is the identity.
//
// The mask is never stored. Philox is counter-based: element i's draw is a pure function of the
// seed and the block counter the fill reserved, so the backward regenerates the same mask from
// those two integers instead of keeping a mask tensor as large as x alive until the backward pass.
// Element i keeps its unit when its uniform draw u_i < 1 − p — the draws bernoulli(x.shape(), 1 − p)
// makes from the same generator state, word for word (see ag::bernoulli).
#include <algorithm>
#include <cmath>

#include "autograd/autograd.h"
#include "autograd/ops.h"

namespace ag {

namespace {

// out_i = in_i · m_i for n contiguous elements, m_i = scale if draw i keeps its unit else 0, the
// draws being those of the generator `seed` from block `first_block` on.
template <class T>
void apply_dropout_mask(const T* in, T* out, int64_t n, uint64_t seed, uint64_t first_block, double keep_prob,
                        double scale) {
  constexpr int64_t kBlocks = 64, kWords = 4 * kBlocks;  // one buffer of Philox output
  constexpr int64_t kWordsPerElement = sizeof(T) == 4 ? 1 : 2;
  const Generator generator(seed);
  uint32_t words[kWords];
  const T kept = static_cast<T>(scale), dropped = T(0);
  // float32: u = (w >> 8) · 2⁻²⁴ < keep_prob  ⇔  (w >> 8) < ⌈keep_prob · 2²⁴⌉, compared as integers.
  const auto threshold = static_cast<uint32_t>(std::ceil(keep_prob * 0x1.0p24));
  const int64_t total_words = n * kWordsPerElement;
  for (int64_t word = 0; word < total_words; word += kWords) {
    const int64_t count_words = std::min(kWords, total_words - word);
    generator.fill_blocks(first_block + static_cast<uint64_t>(word / 4), words, (count_words + 3) / 4);
    const int64_t begin = word / kWordsPerElement, count = count_words / kWordsPerElement;
    if constexpr (sizeof(T) == 4) {
      for (int64_t i = 0; i < count; ++i)
        out[begin + i] = in[begin + i] * ((words[i] >> 8) < threshold ? kept : dropped);
    } else {
      for (int64_t i = 0; i < count; ++i) {
        const bool keep = detail::uniform_double(words[2 * i], words[2 * i + 1]) < keep_prob;
        out[begin + i] = in[begin + i] * (keep ? kept : dropped);
      }
    }
  }
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& generator) {
  if (!(p >= 0.0 && p <= 1.0))
    detail::fail<ValueError>("dropout: probability ", p, " is outside [0, 1] (input shape ",
                             shape_str(x.shape()), ")");
  if (!training || p == 0.0) return x;
  const int64_t n = x.numel();
  const int64_t words_per_element = x.dtype() == float32 ? 1 : 2;
  const uint64_t seed = generator.seed();
  const uint64_t first_block = generator.reserve_blocks(static_cast<uint64_t>((n * words_per_element + 3) / 4));
  // p = 1 drops everything (and 1/(1 − p) would divide by zero): every m_i is 0.
  const double keep_prob = 1.0 - p, scale = p == 1.0 ? 0.0 : 1.0 / keep_prob;
  // m applied to a tensor of x's shape: the forward applies it to x, the backward to g.
  auto masked = [=](const Tensor& t) {
    const Tensor in = t.contiguous();
    Tensor out = empty(in.shape(), in.dtype());
    dispatch(in.dtype(), [&]<typename T>() {
      apply_dropout_mask<T>(in.data<T>(), out.data<T>(), n, seed, first_block, keep_prob, scale);
    });
    return out;
  };
  Tensor out;
  {
    NoGradGuard no_grad;
    out = masked(x);  // (same shape as x)
  }
  return detail::record(Op::dropout, out, {x}, [masked](const Tensor& g, const NeedsGrad&) -> Grads {
    // dy/dx = m: the same mask, regenerated from (seed, first_block)
    return {masked(g)};
  });
}

Tensor dropout(const Tensor& x, double p, bool training) {
  return dropout(x, p, training, default_generator());
}

}  // namespace ag
