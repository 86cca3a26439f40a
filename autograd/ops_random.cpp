// Dropout, with its backward.
//
//   dropout(x, p)   y = x · m,  m_i = 1/(1 − p) with probability 1 − p, else 0
//
// Its gradient is the docs/ops.md tag beside its backward: the same mask.
//
// Scaling the kept units by 1/(1 − p) ("inverted dropout") keeps E[y] = x, so evaluation needs
// no rescaling: outside training dropout is the identity.
//
// Element i keeps its unit when its uniform draw u_i < 1 − p — the draws bernoulli(x.shape(), 1 −
// p) makes from the same generator state, word for word (see ag::bernoulli). The mask is kept for
// the backward as one byte per element (a quarter of a float mask). Philox is counter-based —
// element i's draw is a pure function of the seed and the block counter the mask reserved — so any
// range of the mask can be drawn on its own: threads split it, and scaled_dot_product_attention
// draws the mask of its weights head by head (detail::draw_dropout_keep).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "autograd/allocator.h"
#include "autograd/autograd.h"
#include "autograd/detail/kernels.h"
#include "autograd/detail/target_clones.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "autograd/profiler.h"

namespace ag {

namespace {

// keep[i] = (w[i] >> 8) < threshold for i < count: float32's keep test on each element's word
// (below). One copy per instruction set: AVX-512 tests 16 words at once where the portable build
// tests 4.
AG_TARGET_CLONES void keep_from_words(
    const uint32_t* __restrict w, int64_t count, uint32_t threshold, uint8_t* __restrict keep) {
  for (int64_t i = 0; i < count; ++i) keep[i] = (w[i] >> 8) < threshold;
}

// out[i] = in[i] · (keep[i] · scale): keep is 0 or 1, so a multiply instead of a select, and the
// loop vectorises (two multiplies, no add: every instruction set rounds it alike).
template <class T>
[[gnu::always_inline]] inline void apply_keep(
    const T* in, T* out, const uint8_t* __restrict keep, int64_t n, double scale) {
  const T kept = static_cast<T>(scale);
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * (static_cast<T>(keep[i]) * kept);
}

// The draws of elements first_element .. first_element + n − 1 of a mask over T elements: element
// e's draw is its 32-bit word e (float32) or its words 2e and 2e + 1 (float64), word w being word
// w % 4 of Philox block mask.first_block + w / 4.
template <class T>
void draw_keep(
    const detail::DropoutMask& mask, int64_t first_element, int64_t n, uint8_t* __restrict keep) {
  constexpr int64_t kBlocks = 64, kWords = 4 * kBlocks;  // one buffer of Philox output
  constexpr int64_t kWordsPerElement = sizeof(T) == 4 ? 1 : 2;
  const Generator generator(mask.seed);
  uint32_t words[kWords];
  // float32: u = (w >> 8) · 2⁻²⁴ < keep_prob ⇔ (w >> 8) < ⌈keep_prob · 2²⁴⌉, compared as integers.
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
    uint8_t* k = keep + (begin_word - first_word) / kWordsPerElement;
    const int64_t count = (buffer_end - begin_word) / kWordsPerElement;
    if constexpr (sizeof(T) == 4) {
      keep_from_words(w, count, threshold, k);
    } else {
      for (int64_t i = 0; i < count; ++i)
        k[i] = detail::uniform_double(w[2 * i], w[2 * i + 1]) < mask.keep_prob;
    }
  }
}

}  // namespace

namespace detail {

DropoutMask reserve_dropout_mask(int64_t numel, DType dtype, double p, Generator& generator) {
  const uint64_t words_per_element = dtype == float32 ? 1 : 2;
  // ⌈words / 4⌉ blocks, in uint64: the numel of a large expanded view times 2 exceeds int64.
  const uint64_t words = static_cast<uint64_t>(numel) * words_per_element;
  DropoutMask mask;
  mask.seed = generator.seed();
  mask.first_block = generator.reserve_blocks(words / 4 + (words % 4 != 0 ? 1 : 0));
  // p = 1 drops everything (and 1/(1 − p) would divide by zero): every m_i is 0.
  mask.keep_prob = 1.0 - p;
  mask.scale = p == 1.0 ? 0.0 : 1.0 / mask.keep_prob;
  return mask;
}

void draw_dropout_keep(
    const DropoutMask& mask, DType dtype, int64_t first_element, int64_t n, uint8_t* keep) {
  dispatch(dtype, [&]<typename T>() { draw_keep<T>(mask, first_element, n, keep); });
}

AG_TARGET_CLONES void apply_dropout_keep(
    const float* in, float* out, const uint8_t* keep, int64_t n, double scale) {
  apply_keep(in, out, keep, n, scale);
}
AG_TARGET_CLONES void apply_dropout_keep(
    const double* in, double* out, const uint8_t* keep, int64_t n, double scale) {
  apply_keep(in, out, keep, n, scale);
}

}  // namespace detail

Tensor dropout(const Tensor& x, double p, bool training, Generator& generator) {
  AG_PROFILE_OP(Op::dropout);
  detail::check_floating(x, "dropout");
  if (!(p >= 0.0 && p <= 1.0))
    fail<ValueError>(
        "dropout: probability ", p, " is outside [0, 1] (input shape ", shape_str(x.shape()), ")");
  if (!training || p == 0.0) return x;
  const int64_t n = x.numel();
  const detail::DropoutMask mask = detail::reserve_dropout_mask(n, x.dtype(), p, generator);
  // (numel of x) 1 = kept, from the caching allocator (no fresh pages every step)
  const std::shared_ptr<uint8_t> keep =
      detail::allocate_bytes(static_cast<std::size_t>(n), "dropout", x.shape());
  // Any element range can be drawn on its own: ag's threads split them (the same draws).
  parallel_for(n, 8, [&](int64_t begin, int64_t end) {
    detail::draw_dropout_keep(mask, x.dtype(), begin, end - begin, keep.get() + begin);
  });
  // m applied to a tensor of x's shape: the forward applies it to x, the backward to g.
  auto masked = [keep, n, scale = mask.scale](const Tensor& t) {
    const Tensor in = t.contiguous();
    Tensor out = detail::empty(in.shape(), in.dtype(), "dropout");
    dispatch(in.dtype(), [&]<typename T>() {
      const T* pin = in.data<T>();
      T* pout = out.data<T>();
      parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        detail::apply_dropout_keep(
            pin + begin, pout + begin, keep.get() + begin, end - begin, scale);
      });
    });
    return out;
  };
  Tensor out;
  {
    NoGradGuard no_grad;
    out = masked(x);  // (same shape as x)
  }
  // docs/ops.md, dropout: g · m
  return detail::record(
      Op::dropout, out, {x}, [masked](const Tensor& g, const NeedsGrad&) -> Grads {
        // dy/dx = m: the forward's mask
        return {masked(g)};
      });
}

Tensor dropout(const Tensor& x, double p, bool training) {
  return dropout(x, p, training, default_generator());
}

}  // namespace ag
