// Dropout, with its backward.
//
//   dropout(x, p)   y = x · m,  m_i = 1/(1 − p) with probability 1 − p, else 0
//   gradient        g · m       (the same mask: dropped units pass no gradient)
//
// Scaling the kept units by 1/(1 − p) ("inverted dropout") keeps E[y] = x, so evaluation needs
// no rescaling: outside training dropout is the identity.
//
// Element i keeps its unit when its uniform draw u_i < 1 − p — the draws bernoulli(x.shape(), 1 − p)
// makes from the same generator state, word for word (see ag::bernoulli). ag::dropout keeps its
// mask as one byte per element (a quarter of a float mask), drawn once. Philox is counter-based —
// element i's draw is a pure function of the seed and the block counter the mask reserved — so a
// fused kernel can instead regenerate the mask of any element range from those numbers
// (detail::apply_dropout_mask: scaled_dot_product_attention does, head by head, and stores none).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/kernels.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"

namespace ag {

namespace {

// keep[i] = 1 if draw i keeps its unit (u_i < keep_prob), else 0, for the n draws of T elements
// that the generator `seed` makes from block `first_block` on.
template <class T>
void draw_keep_mask(uint8_t* keep, int64_t n, uint64_t seed, uint64_t first_block, double keep_prob) {
  constexpr int64_t kBlocks = 64, kWords = 4 * kBlocks;  // one buffer of Philox output
  constexpr int64_t kWordsPerElement = sizeof(T) == 4 ? 1 : 2;
  const Generator generator(seed);
  // float32: u = (w >> 8) · 2⁻²⁴ < keep_prob  ⇔  (w >> 8) < ⌈keep_prob · 2²⁴⌉, compared as integers.
  const auto threshold = static_cast<uint32_t>(std::ceil(keep_prob * 0x1.0p24));
  const int64_t total_words = n * kWordsPerElement;
  const int64_t buffers = (total_words + kWords - 1) / kWords;
  // Counter-based: buffer j's words depend only on its counter, so threads split the buffers.
  detail::parallel_for(buffers, 4 * kWords, [&](int64_t first_buffer, int64_t end_buffer) {
    uint32_t words[kWords];
    for (int64_t word = first_buffer * kWords; word < std::min(end_buffer * kWords, total_words); word += kWords) {
      const int64_t count_words = std::min(kWords, total_words - word);
      generator.fill_blocks(first_block + static_cast<uint64_t>(word / 4), words, (count_words + 3) / 4);
      const int64_t begin = word / kWordsPerElement, count = count_words / kWordsPerElement;
      uint8_t* __restrict keep_chunk = keep + begin;
      if constexpr (sizeof(T) == 4) {
        for (int64_t i = 0; i < count; ++i) keep_chunk[i] = (words[i] >> 8) < threshold;
      } else {
        for (int64_t i = 0; i < count; ++i)
          keep_chunk[i] = detail::uniform_double(words[2 * i], words[2 * i + 1]) < keep_prob;
      }
    }
  });
}

// out_i = in_i · m_i for elements first_element .. first_element + n − 1 of a tensor filled from
// block mask.first_block on (in and out point at element first_element), m_i = mask.scale if
// draw i keeps its unit else 0. Element i's draw is its 32-bit word i (float32) or its words 2i
// and 2i + 1 (float64), word w being word w % 4 of block first_block + w / 4.
template <class T>
void apply_dropout_mask_impl(const T* in, T* out, int64_t first_element, int64_t n, const detail::DropoutMask& mask) {
  constexpr int64_t kBlocks = 64, kWords = 4 * kBlocks;  // one buffer of Philox output
  constexpr int64_t kWordsPerElement = sizeof(T) == 4 ? 1 : 2;
  const Generator generator(mask.seed);
  uint32_t words[kWords];
  const T kept = static_cast<T>(mask.scale);
  // float32: u = (w >> 8) · 2⁻²⁴ < keep_prob  ⇔  (w >> 8) < ⌈keep_prob · 2²⁴⌉, compared as integers.
  const auto threshold = static_cast<uint32_t>(std::ceil(mask.keep_prob * 0x1.0p24));
  const int64_t first_word = first_element * kWordsPerElement;
  const int64_t end_word = first_word + n * kWordsPerElement;
  // Buffers start on a block boundary; the first may begin before first_word (mid-block).
  for (int64_t buffer_start = first_word / 4 * 4; buffer_start < end_word; buffer_start += kWords) {
    const int64_t buffer_end = std::min(buffer_start + kWords, end_word);
    generator.fill_blocks(mask.first_block + static_cast<uint64_t>(buffer_start / 4), words,
                          (buffer_end - buffer_start + 3) / 4);
    const int64_t begin_word = std::max(buffer_start, first_word);
    const uint32_t* w = words + (begin_word - buffer_start);
    const int64_t begin = (begin_word - first_word) / kWordsPerElement;
    const int64_t count = (buffer_end - begin_word) / kWordsPerElement;
    if constexpr (sizeof(T) == 4) {
      for (int64_t i = 0; i < count; ++i)
        out[begin + i] = in[begin + i] * (static_cast<T>((w[i] >> 8) < threshold) * kept);  // kept or 0
    } else {
      for (int64_t i = 0; i < count; ++i) {
        const bool keep = detail::uniform_double(w[2 * i], w[2 * i + 1]) < mask.keep_prob;
        out[begin + i] = in[begin + i] * (static_cast<T>(keep) * kept);
      }
    }
  }
}

}  // namespace

namespace detail {

DropoutMask reserve_dropout_mask(int64_t numel, DType dtype, double p, Generator& generator) {
  const int64_t words_per_element = dtype == float32 ? 1 : 2;
  DropoutMask mask;
  mask.seed = generator.seed();
  mask.first_block = generator.reserve_blocks(static_cast<uint64_t>((numel * words_per_element + 3) / 4));
  // p = 1 drops everything (and 1/(1 − p) would divide by zero): every m_i is 0.
  mask.keep_prob = 1.0 - p;
  mask.scale = p == 1.0 ? 0.0 : 1.0 / mask.keep_prob;
  return mask;
}

void apply_dropout_mask(const float* in, float* out, int64_t first_element, int64_t n, const DropoutMask& mask) {
  apply_dropout_mask_impl(in, out, first_element, n, mask);
}
void apply_dropout_mask(const double* in, double* out, int64_t first_element, int64_t n, const DropoutMask& mask) {
  apply_dropout_mask_impl(in, out, first_element, n, mask);
}

}  // namespace detail

Tensor dropout(const Tensor& x, double p, bool training, Generator& generator) {
  if (!(p >= 0.0 && p <= 1.0))
    detail::fail<ValueError>("dropout: probability ", p, " is outside [0, 1] (input shape ",
                             shape_str(x.shape()), ")");
  if (!training || p == 0.0) return x;
  const int64_t n = x.numel();
  const detail::DropoutMask mask = detail::reserve_dropout_mask(n, x.dtype(), p, generator);
  const double scale = mask.scale;
  auto keep = std::make_shared<std::vector<uint8_t>>(static_cast<std::size_t>(n));  // (numel of x) 1 = kept
  dispatch(x.dtype(), [&]<typename T>() {
    draw_keep_mask<T>(keep->data(), n, mask.seed, mask.first_block, mask.keep_prob);
  });
  // m applied to a tensor of x's shape: the forward applies it to x, the backward to g.
  auto masked = [=](const Tensor& t) {
    const Tensor in = t.contiguous();
    Tensor out = empty(in.shape(), in.dtype());
    dispatch(in.dtype(), [&]<typename T>() {
      // __restrict: the byte mask could alias anything as far as the compiler knows, which would
      // keep it from vectorising the loop.
      const T* __restrict pin = in.data<T>();
      T* __restrict pout = out.data<T>();
      const uint8_t* __restrict k = keep->data();
      const T kept = static_cast<T>(scale);
      detail::parallel_for(n, 1, [=](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) pout[i] = pin[i] * (static_cast<T>(k[i]) * kept);  // k = 0 or 1
      });
    });
    return out;
  };
  Tensor out;
  {
    NoGradGuard no_grad;
    out = masked(x);  // (same shape as x)
  }
  return detail::record(Op::dropout, out, {x}, [masked](const Tensor& g, const NeedsGrad&) -> Grads {
    // dy/dx = m: the forward's mask
    return {masked(g)};
  });
}

Tensor dropout(const Tensor& x, double p, bool training) {
  return dropout(x, p, training, default_generator());
}

}  // namespace ag
