// Tiled attention with an online softmax: the FlashAttention idea on a CPU. The kernel
// ag::attention runs from kTiledAttentionFromKeys keys on (ops_attention.cpp, which also holds what
// the two kernels share).
//
// The same function as scaled_dot_product_attention, computed without ever holding a head's
// (Tq × Tk) weights: the queries are taken in blocks of kQueryBlock rows, the keys in blocks of
// kKeyBlock, and each (query block × key block) tile of scores lives only in a small buffer that
// stays in the core's cache. The softmax is computed "online": for every query row i the kernel
// keeps the running maximum m_i of the scores seen so far, the running sum l_i of exp(s − m_i), and
// the running output O_i = Σ exp(s_j − m_i) D_j V_j; when a key block raises the maximum to m', the
// old sums are rescaled by exp(m_i − m') (the same rows, just measured from a new maximum):
//
//   for each key block J:
//     S_J   = Q·K_Jᵀ / √d + A_J                    (rows × cols), the tile; A_J ALiBi's bias or 0
//     m'    = max(m, max_j S_J)                     per row
//     P_J   = exp(S_J − m')                         unnormalised weights; 0 at masked keys
//     l     = l · exp(m − m') + Σ_j P_J             the denominator, without dropout
//     O     = O · exp(m − m') + (P_J ⊙ D_J) · V_J   the numerator, with dropout (one gemm)
//     m     = m'
//   O = O / l,   L = m + log l                      the row's log-sum-exp, kept for the backward
//
// At the end O_i = Σ_j P_ij D_ij V_j with P_ij = exp(s_ij − L_i) = softmax(s_i)_j: the weights are
// those of scaled_dot_product_attention, and so is the output, up to the rounding of the sums,
// taken in another order (tests/autograd/test_flash_attention.cpp holds outputs and gradients to
// 5e-6 of the largest value in float32 and 1e-12 in float64).
// Key blocks past the longest valid length of a query block are skipped outright, so the causal
// mask of a decoder (valid length i + 1 for query i) halves the work.
//
// Memory held for the backward: q, k, v (the caller's views), O, and L (B·H·Tq numbers): no P and
// no dropout mask — the backward recomputes each tile of P from Q, K and L, and redraws the
// dropout mask from the generator's reserved Philox blocks (a pure function of the element
// index). scaled_dot_product_attention saves B·H·Tq·Tk numbers and as many mask bytes.
//
// Backward, given dO, per head (FlashAttention-2's order):
//   (0) Δ_i = Σ_c dO_ic O_ic                     = Σ_j dP_ij P_ij, softmax's row sum (below)
//   then for each query block I and key block J:
//   (1) P   = exp(Q_I·K_Jᵀ / √d − L_I)          the forward's weights of the tile, recomputed
//   (2) P̃   = P ⊙ D                              the same dropout draws as the forward
//   (3) dV_J += P̃ᵀ·dO_I                          (cols, rows)·(rows, dv)
//   (4) dP̃  = dO_I·V_Jᵀ                          (rows, dv)·(dv, cols)
//   (5) dS  = P ⊙ (dP̃ ⊙ D − Δ_I) / √d            softmax's backward, as in the whole-row kernel;
//                                                0 at masked keys
//   (6) dQ_I += dS·K_J                           (rows, cols)·(cols, d)
//   (7) dK_J += dSᵀ·Q_I                          (cols, rows)·(rows, d)
// Why Δ = rowsum(dO ⊙ O): softmax's backward needs Σ_j dP_j P_j with dP_j = (dO·V_j) D_j, and
// Σ_j (dO·V_j) D_j P_j = dO·(Σ_j P̃_j V_j) = dO·O — one dot product per row instead of a pass over
// the row's Tk weights.
//
// ALiBi and grouped-query attention as in scaled_dot_product_attention (ops_attention.cpp, where
// the math is): the bias A_ij = −m_h·|p_i − j| (p_i = Tk − Tq + i) enters each tile's scores where
// they are scaled (scale_scores), in the forward and again when the backward recomputes P in (1),
// so that P = exp(S − L) holds with the same S, bit for bit; it is a constant, so (5) is unchanged.
// Query head h reads key/value head h / G (G = H / Hkv), and (3) and (7) add into that head's dV
// and dK: the backward splits the work by key/value head and runs the G query heads of each in
// order on one thread, so the sums over a group are the same on any number of threads (and with
// G = 1 they are today's).
//
// A row with valid length 0 gets the uniform weights 1/Tk over all Tk keys, as
// scaled_dot_product_attention: its scores are taken as all equal (0), so the online softmax gives
// exactly 1/Tk, and its dS is 0 (d2l replaced every score by the constant −1e6).

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/detail/attention_kernels.h"
#include "autograd/detail/blas.h"
#include "autograd/detail/kernels.h"
#include "autograd/detail/vector_math.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "autograd/profiler.h"

namespace ag::detail {

namespace {

constexpr int64_t kQueryBlock = 64;  // query rows per tile
constexpr int64_t kKeyBlock = 128;   // keys per tile: a float (64 × 128) tile is 32 KB, in L1

}  // namespace

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& valid_lens,
    double dropout_p, bool training, Generator& generator, const AttentionVariant& variant) {
  AG_PROFILE_OP(Op::flash_attention);
  constexpr const char* kOpName = "flash_attention";
  detail::check_floating(q, kOpName);
  // G query heads per key/value head: query head h reads key/value head h / G
  const int64_t G = check_attention_operands(q, k, v, dropout_p, variant, kOpName);
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), d = q.size(3);
  const int64_t Tk = k.size(2), dv = v.size(3);
  const ValidLengths valid_length(valid_lens, q, k, kOpName);  // valid_length.keys(b, i): RowKeys
  const std::vector<double>& slopes = variant.alibi_slopes;    // empty, or m_h of each query head

  // The dropout mask of the weights as a contiguous (B·H, Tq, Tk) tensor, as
  // scaled_dot_product_attention reserves it: never stored, drawn tile by tile.
  const bool drop = training && dropout_p > 0.0;
  detail::DropoutMask mask;
  if (drop) mask = detail::reserve_dropout_mask(B * H * Tq * Tk, q.dtype(), dropout_p, generator);

  const Heads Q = heads_of(q), K = heads_of(k), V = heads_of(v);
  const Tensor out_buffer = empty({B, Tq, H, dv}, q.dtype());  // (B, Tq, H, dv), O's memory
  Tensor out = detail::make_view(
      out_buffer, {B, H, Tq, dv}, {Tq * H * dv, dv, H * dv, 1}, 0);  // (B, H, Tq, dv)
  const Heads O = heads_of(out);
  Tensor logsumexp = empty({B, H, Tq}, q.dtype());  // (B, H, Tq): L_i = m_i + log l_i

  dispatch(q.dtype(), [&]<typename T>() {
    const T sqrt_d = static_cast<T>(std::sqrt(static_cast<double>(d)));
    parallel_for(B * H, Tq * Tk * (d + dv), [&](int64_t begin, int64_t end) {
      std::vector<T> tile(
          static_cast<std::size_t>(kQueryBlock * kKeyBlock));  // (rows, cols) S, then P ⊙ D
      std::vector<uint8_t> keep(
          drop ? static_cast<std::size_t>(kKeyBlock) : 0);  // one row of the tile's mask
      T row_max[kQueryBlock], row_sum[kQueryBlock];         // m_i and l_i
      RowKeys keys[kQueryBlock];
      for (int64_t head = begin; head < end; ++head) {
        const int64_t b = head / H, h = head % H, kv = h / G;  // kv: the key/value head it reads
        const bool alibi = !slopes.empty();
        for (int64_t i0 = 0; i0 < Tq; i0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, Tq - i0);
          T* O_block = O.head<T>(b, h) + i0 * O.row_stride;  // (rows, dv), rows O.row_stride apart
          int64_t block_keys = 0;  // the longest valid length of the block
          for (int64_t r = 0; r < rows; ++r) {
            keys[r] = valid_length.keys(b, i0 + r);
            block_keys = std::max(block_keys, keys[r].length);
            row_max[r] = -std::numeric_limits<T>::infinity();
            row_sum[r] = 0;
            std::fill(O_block + r * O.row_stride, O_block + r * O.row_stride + dv, T(0));
          }
          for (int64_t j0 = 0; j0 < block_keys; j0 += kKeyBlock) {
            const int64_t cols = std::min(kKeyBlock, Tk - j0);
            // S = Q_I·K_Jᵀ: (rows, d)·(d, cols) -> (rows, cols), row stride kKeyBlock
            detail::gemm<T>(CblasNoTrans, CblasTrans, rows, cols, d,
                Q.head<T>(b, h) + i0 * Q.row_stride, Q.row_stride,
                K.head<T>(b, kv) + j0 * K.row_stride, K.row_stride, tile.data(), kKeyBlock);
            for (int64_t r = 0; r < rows; ++r) {
              T* s = tile.data() + r * kKeyBlock;  // (cols) this row's scores, then its weights
              const int64_t n =
                  std::clamp<int64_t>(keys[r].length - j0, 0, cols);  // keys that count
              // s_j = score_j / √d − m·|p_i − j| (all 0 for a uniform row; no bias without ALiBi);
              // the keys past the valid length weigh 0. Query i0 + r is key position
              // Tk − Tq + i0 + r, the tile's column c key j0 + c.
              const RowBias bias{
                  alibi ? slopes[static_cast<std::size_t>(h)] : 0.0, Tk - Tq + i0 + r - j0};
              scale_scores(s, keys[r], n, cols, sqrt_d, alibi ? &bias : nullptr);
              if (n == 0) continue;  // nothing of this row in the tile: m, l and O stay
              // m' = max(m, max_j s_j); the old sums are rescaled by exp(m − m') (0 on the first
              // tile)
              const T new_max = std::max(row_max[r], *std::max_element(s, s + n));
              const T rescale = std::exp(row_max[r] - new_max);
              row_max[r] = new_max;
              exp_shifted_row(s, new_max, s, n);  // P_j = exp(s_j − m')
              T tile_sum = 0;
              for (int64_t j = 0; j < n; ++j) tile_sum += s[j];
              row_sum[r] = row_sum[r] * rescale + tile_sum;  // l = l·exp(m − m') + Σ_j P_j
              T* O_row = O_block + r * O.row_stride;         // (dv)
              if (rescale != T(1))
                for (int64_t c = 0; c < dv; ++c) O_row[c] *= rescale;
              if (drop) {  // P̃_j = P_j ⊙ D_j: the mask of elements (head, i0 + r, j0 .. j0 + n)
                detail::draw_dropout_keep(
                    mask, q.dtype(), (head * Tq + i0 + r) * Tk + j0, n, keep.data());
                detail::apply_dropout_keep(s, s, keep.data(), n, mask.scale);
              }
            }
            // O_I += P̃·V_J: (rows, cols)·(cols, dv) -> (rows, dv)
            detail::gemm<T>(CblasNoTrans, CblasNoTrans, rows, dv, cols, tile.data(), kKeyBlock,
                V.head<T>(b, kv) + j0 * V.row_stride, V.row_stride, O_block, O.row_stride,
                /*accumulate=*/true);
          }
          // O = O / l and L = m + log l (a row without keys, Tk = 0, keeps O = 0)
          T* L_block = logsumexp.data<T>() + head * Tq + i0;
          for (int64_t r = 0; r < rows; ++r) {
            const T inverse = row_sum[r] > T(0) ? T(1) / row_sum[r] : T(0);
            for (int64_t c = 0; c < dv; ++c) O_block[r * O.row_stride + c] *= inverse;
            L_block[r] = row_sum[r] > T(0) ? row_max[r] + std::log(row_sum[r]) : T(0);
          }
        }
      }
    });
  });
  if (!detail::any_requires_grad({q, k, v})) return out;

  // O for the backward's Δ, as a second view of its buffer (the returned `out` carries the node,
  // which must not hold itself).
  const Heads O_saved = heads_of(detail::make_view(out_buffer, out.shape(), out.strides(), 0));
  auto backward = [Q, K, V, O_saved, logsumexp, valid_length, drop, mask, slopes, B, H, G, Tq, Tk,
                      d, dv](const Tensor& grad_out, const NeedsGrad& needs) -> Grads {
    const Heads dO = heads_of(grad_out);  // (B, H, Tq, dv)
    const bool want_q = needs[0], want_k = needs[1], want_v = needs[2];
    const DType dtype = logsumexp.dtype();
    // Accumulated tile by tile, so they start at 0.
    const HeadGradients grads = head_gradients(Q, K, V, needs, /*zero=*/true);
    const Heads &dQ = grads.dQ, &dK = grads.dK, &dV = grads.dV;

    dispatch(dtype, [&]<typename T>() {
      const T sqrt_d = static_cast<T>(std::sqrt(static_cast<double>(d)));
      // Split by key/value head: chunk [begin, end) of the B·Hkv key/value heads runs the query
      // heads [begin·G, end·G) in order, each adding to its key/value head's dK and dV: the G
      // query heads of a group are summed in one order on any number of threads.
      parallel_for(B * (H / G), G * Tq * Tk * (2 * d + 3 * dv), [&](int64_t begin, int64_t end) {
        std::vector<T> P(
            static_cast<std::size_t>(kQueryBlock * kKeyBlock));  // (rows, cols) P, then P̃
        std::vector<T> dS(
            static_cast<std::size_t>(kQueryBlock * kKeyBlock));  // (rows, cols) dP̃, then dS
        std::vector<uint8_t> keep(drop ? static_cast<std::size_t>(kQueryBlock * kKeyBlock) : 0);
        T delta[kQueryBlock];  // Δ_i
        RowKeys keys[kQueryBlock];
        const bool alibi = !slopes.empty();
        for (int64_t head = begin * G; head < end * G; ++head) {
          const int64_t b = head / H, h = head % H, kv = h / G;  // kv: the key/value head it reads
          const T* L = logsumexp.data<T>() + head * Tq;          // (Tq)
          for (int64_t i0 = 0; i0 < Tq; i0 += kQueryBlock) {
            const int64_t rows = std::min(kQueryBlock, Tq - i0);
            const T* Q_block = Q.head<T>(b, h) + i0 * Q.row_stride;                  // (rows, d)
            const T* dO_block = dO.head<T>(b, h) + i0 * dO.row_stride;               // (rows, dv)
            T* dQ_block = want_q ? dQ.head<T>(b, h) + i0 * dQ.row_stride : nullptr;  // (rows, d)
            int64_t block_keys = 0;
            for (int64_t r = 0; r < rows; ++r) {
              keys[r] = valid_length.keys(b, i0 + r);
              block_keys = std::max(block_keys, keys[r].length);
              // (0) Δ_i = dO_i · O_i
              const T* O_row = O_saved.head<T>(b, h) + (i0 + r) * O_saved.row_stride;
              double dot = 0;
              for (int64_t c = 0; c < dv; ++c)
                dot += double(dO_block[r * dO.row_stride + c]) * double(O_row[c]);
              delta[r] = static_cast<T>(dot);
            }
            for (int64_t j0 = 0; j0 < block_keys; j0 += kKeyBlock) {
              const int64_t cols = std::min(kKeyBlock, Tk - j0);
              const T* K_block = K.head<T>(b, kv) + j0 * K.row_stride;  // (cols, d)
              const T* V_block = V.head<T>(b, kv) + j0 * V.row_stride;  // (cols, dv)
              // in the forward pass this was: P = exp(Q·Kᵀ / √d (+ bias) − L), so
              // (1) P of the tile, recomputed: (rows, d)·(d, cols) -> (rows, cols), with the
              //     forward's scores, ALiBi's bias included, bit for bit
              detail::gemm<T>(CblasNoTrans, CblasTrans, rows, cols, d, Q_block, Q.row_stride,
                  K_block, K.row_stride, P.data(), kKeyBlock);
              for (int64_t r = 0; r < rows; ++r) {
                T* p = P.data() + r * kKeyBlock;
                const int64_t n = std::clamp<int64_t>(keys[r].length - j0, 0, cols);
                const RowBias bias{
                    alibi ? slopes[static_cast<std::size_t>(h)] : 0.0, Tk - Tq + i0 + r - j0};
                scale_scores(p, keys[r], n, cols, sqrt_d, alibi ? &bias : nullptr);
                exp_shifted_row(p, L[i0 + r], p, n);
                // the forward's dropout draws of this tile row, for (2) and (5)
                if (drop)
                  detail::draw_dropout_keep(
                      mask, dtype, (head * Tq + i0 + r) * Tk + j0, n, keep.data() + r * kKeyBlock);
              }
              const bool want_scores = want_q || want_k;  // dS serves only (6) and (7)
              // (4) dP̃ = dO_I·V_Jᵀ: (rows, dv)·(dv, cols) -> (rows, cols)
              if (want_scores)
                detail::gemm<T>(CblasNoTrans, CblasTrans, rows, cols, dv, dO_block, dO.row_stride,
                    V_block, V.row_stride, dS.data(), kKeyBlock);
              for (int64_t r = 0; r < rows; ++r) {
                T* p = P.data() + r * kKeyBlock;
                T* ds = dS.data() + r * kKeyBlock;
                const uint8_t* keep_row = keep.data() + r * kKeyBlock;
                const int64_t n = std::clamp<int64_t>(keys[r].length - j0, 0, cols);
                // (5) dS = P ⊙ (dP̃ ⊙ D − Δ) / √d; 0 past the valid length and in a uniform row
                if (want_scores) {
                  if (drop) detail::apply_dropout_keep(ds, ds, keep_row, n, mask.scale);
                  if (keys[r].uniform)
                    std::fill(ds, ds + n, T(0));
                  else
                    for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - delta[r]) / sqrt_d;
                  std::fill(ds + n, ds + cols, T(0));
                }
                // (2) P̃ = P ⊙ D, for (3)
                if (drop) detail::apply_dropout_keep(p, p, keep_row, n, mask.scale);
              }
              // (3) dV_J += P̃ᵀ·dO_I: (cols, rows)·(rows, dv) -> (cols, dv), into the key/value
              //     head's sum
              if (want_v)
                detail::gemm<T>(CblasTrans, CblasNoTrans, cols, dv, rows, P.data(), kKeyBlock,
                    dO_block, dO.row_stride, dV.head<T>(b, kv) + j0 * dV.row_stride, dV.row_stride,
                    /*accumulate=*/true);
              // (6) dQ_I += dS·K_J: (rows, cols)·(cols, d) -> (rows, d)
              if (want_q)
                detail::gemm<T>(CblasNoTrans, CblasNoTrans, rows, d, cols, dS.data(), kKeyBlock,
                    K_block, K.row_stride, dQ_block, dQ.row_stride, /*accumulate=*/true);
              // (7) dK_J += dSᵀ·Q_I: (cols, rows)·(rows, d) -> (cols, d), into the key/value
              //     head's sum
              if (want_k)
                detail::gemm<T>(CblasTrans, CblasNoTrans, cols, d, rows, dS.data(), kKeyBlock,
                    Q_block, Q.row_stride, dK.head<T>(b, kv) + j0 * dK.row_stride, dK.row_stride,
                    /*accumulate=*/true);
            }
          }
        }
      });
    });
    return {grads.dq, grads.dk, grads.dv};
  };
  // docs/ops.md, flash_attention: per tile: P = exp(S − L) (S with the bias), dV += P̃ᵀ · g, dS = P
  //   ⊙ ((g · Vᵀ) ⊙ D − rowsum(g ⊙ O)) (0 where masked), dQ += dS · K / √d, dK += dSᵀ · Q / √d; dK,
  //   dV summed over the query heads sharing a kv head
  return detail::record(Op::flash_attention, out, {q, k, v},
      /*saved=*/{Q.tensor, K.tensor, V.tensor, out}, backward);
}

}  // namespace ag::detail
