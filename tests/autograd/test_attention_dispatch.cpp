// ag::attention's choice of kernel: in automatic mode the whole-row kernel below
// kTiledAttentionFromKeys keys and the tiled one from there on; either can be forced; both give the
// attention weights on request (the tiled kernel forms them only then, once). The kernels
// themselves are tested in test_attention_op.cpp and test_flash_attention.cpp.
#include <catch2/catch.hpp>

#include <string>

#include "autograd/autograd.h"
#include "autograd/ops.h"

using namespace ag;

namespace {

// The op ag::attention recorded for Tk keys (q, k, v of one head, q requiring grad).
std::string recorded_op(int64_t keys) {
  Generator values(1), unused(0);
  const Tensor q = randn({1, 1, 2, 3}, values).requires_grad_();
  const Tensor k = randn({1, 1, keys, 3}, values), v = randn({1, 1, keys, 2}, values);
  const Tensor out = attention(q, k, v, Tensor(), 0.0, false, unused);  // (1, 1, 2, 2)
  REQUIRE(out.grad_fn() != nullptr);
  return out.grad_fn()->name();
}

}  // namespace

TEST_CASE("ag::attention, automatic: whole rows below kTiledAttentionFromKeys keys, tiled above",
    "[attention_dispatch]") {
  REQUIRE(attention_kernel() == AttentionKernel::automatic);  // the default
  CHECK_FALSE(use_tiled_attention(64));
  CHECK_FALSE(use_tiled_attention(kTiledAttentionFromKeys - 1));
  CHECK(use_tiled_attention(kTiledAttentionFromKeys));
  CHECK(recorded_op(3) == "scaled_dot_product_attention");
  CHECK(recorded_op(kTiledAttentionFromKeys - 1) == "scaled_dot_product_attention");
  CHECK(recorded_op(kTiledAttentionFromKeys) == "flash_attention");
}

TEST_CASE("ag::attention: AttentionKernel forces either kernel, and the guard restores the setting",
    "[attention_dispatch]") {
  {
    AttentionKernelGuard whole(AttentionKernel::whole_rows);
    CHECK_FALSE(use_tiled_attention(1 << 20));
    CHECK(recorded_op(kTiledAttentionFromKeys) == "scaled_dot_product_attention");
    {
      AttentionKernelGuard tiled(AttentionKernel::tiled);
      CHECK(use_tiled_attention(1));
      CHECK(recorded_op(3) == "flash_attention");
    }
    CHECK(attention_kernel() == AttentionKernel::whole_rows);
  }
  CHECK(attention_kernel() == AttentionKernel::automatic);
}

TEST_CASE("ag::attention: the same weights from both kernels — the tiled one forms them on request",
    "[attention_dispatch]") {
  const int64_t B = 2, H = 3, Tq = 5, Tk = 7;
  Generator values(2);
  const Tensor q = randn({B, H, Tq, 4}, values), k = randn({B, H, Tk, 4}, values);
  const Tensor v = randn({B, H, Tk, 2}, values), lens = tensor({4, 0});
  Generator whole_generator(3), tiled_generator(3);
  AttentionWeights whole_weights, tiled_weights;
  {
    AttentionKernelGuard whole(AttentionKernel::whole_rows);
    attention(q, k, v, lens, 0.5, true, whole_generator, &whole_weights);
  }
  uint64_t before = 0;
  {
    AttentionKernelGuard tiled(AttentionKernel::tiled);
    attention(q, k, v, lens, 0.5, true, tiled_generator, &tiled_weights);
    before = detail::storage_allocation_count();
  }
  CHECK(whole_generator.state() == tiled_generator.state());  // the same dropout draws reserved
  const Tensor& weights = tiled_weights.tensor();             // (B, H, Tq, Tk), formed now
  CHECK(detail::storage_allocation_count() > before);
  REQUIRE(weights.shape() == Shape{B, H, Tq, Tk});
  CHECK_FALSE(weights.requires_grad());
  // Before dropout, by the whole-row kernel: the same bits as the whole-row call's weights.
  CHECK(weights.to_vector<double>() == whole_weights.tensor().to_vector<double>());
  // Batch row 1 has valid length 0: uniform weights 1/Tk
  const std::vector<double> uniform(H * Tq * Tk, static_cast<float>(1.0 / Tk));
  CHECK(weights.select(0, 1).to_vector<double>() == uniform);
  // Formed once, then kept.
  const uint64_t formed = detail::storage_allocation_count();
  CHECK(tiled_weights.tensor().shares_storage(weights));
  CHECK(detail::storage_allocation_count() == formed);
  CHECK_FALSE(AttentionWeights().tensor().defined());  // none asked for
}

TEST_CASE("ag::attention: errors name the kernel's op, whichever the setting",
    "[attention_dispatch][errors]") {
  Generator g(0);
  const Tensor q = zeros({2, 3, 4, 5}), v = zeros({2, 3, 6, 7});
  // A k that is not (B, H, Tk, d) has no key count: the whole-row kernel reports it.
  CHECK_THROWS_AS(attention(q, zeros({2, 6, 5}), v, Tensor(), 0.0, true, g), ShapeError);
  CHECK_THROWS_WITH(attention(q, zeros({2, 6, 5}), v, Tensor(), 0.0, true, g),
      Catch::Matchers::Contains("scaled_dot_product_attention: q [2,3,4,5], k [2,6,5]"));
  AttentionKernelGuard tiled(AttentionKernel::tiled);
  CHECK_THROWS_WITH(attention(q, zeros({2, 6, 5}), v, Tensor(), 0.0, true, g),
      Catch::Matchers::Contains("flash_attention: q [2,3,4,5], k [2,6,5]"));
}
