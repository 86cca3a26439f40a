// Slices of an op's output hand their gradients to that op's node, which writes them into one
// gradient of its whole output (autograd.h, Node::slice_region_; autograd.cpp, run_backward):
// split's pieces fill one tensor instead of each writing a tensor of zeros of the whole shape for
// the engine to add up. The values must be those of slice's backward function (zeros with g
// written into the slice, added up), which a backward observer makes the engine call instead: so
// each case below runs twice, with and without an observer, and compares the leaf's gradients
// bit for bit. Their bytes show which way the engine went.
#include <catch2/catch.hpp>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/profiler.h"
#include "tensor_compare.h"

using namespace ag;

namespace {

// The loss of a case from w, a float64 leaf of shape (2, 3, 12): w's node-made copy x, sliced.
using SlicedLoss = std::function<Tensor(const Tensor& w)>;

struct Backward {
  Tensor grad;               // w's gradient
  int64_t slice_calls = 0;   // "slice_backward" rows' calls in a profile of the backward
  uint64_t slice_bytes = 0;  // and the bytes they asked for
};

// loss(w).backward() from a fresh leaf of seeded values; through slice's backward function where
// `observed` (a backward observer that looks at nothing).
Backward run(const SlicedLoss& loss_of, bool observed, bool retain_twice = false) {
  Generator generator(17);
  const Tensor w = randn({2, 3, 12}, generator, float64).requires_grad_();
  std::optional<BackwardObserverGuard> observer;
  if (observed) observer.emplace([](const Node&, const Tensor&, const Grads&) {});
  const Tensor loss = loss_of(w);
  profiler::profile prof;
  if (retain_twice) {
    loss.backward(Tensor(), /*retain_graph=*/true);
    loss.backward();
  } else {
    loss.backward();
  }
  prof.stop();
  Backward result{w.grad()};
  const profiler::EventList averages = prof.key_averages();
  for (const auto& row : averages.rows())
    if (row.key == "slice_backward") {
      result.slice_calls = row.count;
      result.slice_bytes = row.self_bytes;
    }
  return result;
}

// Σ (t · c) for a fixed c of t's shape: a gradient that differs at every element.
Tensor weighted_sum(const Tensor& t, uint64_t seed) {
  Generator generator(seed);
  return sum(t * randn(t.shape(), generator, float64));
}

constexpr uint64_t kWhole = 2 * 3 * 12 * sizeof(double);  // the bytes of one gradient of x

}  // namespace

TEST_CASE("split's pieces write their gradients into one gradient of the split tensor",
    "[autograd][slice]") {
  // nanoGPT's q, k, v = c_attn(x).split(n_embd, dim=2): three slices that tile x
  const SlicedLoss qkv = [](const Tensor& w) {
    const std::vector<Tensor> pieces = split(w * 1.5, 4, 2);
    return weighted_sum(pieces[0], 1) + weighted_sum(pieces[1], 2) + weighted_sum(pieces[2], 3);
  };
  const Backward engine = run(qkv, false), function = run(qkv, true);
  CHECK(same_bits(engine.grad, function.grad));
  // The function: three slices' backwards, each a gradient of x's shape. The engine: three slices
  // handed on, then one gradient written (a fourth call of the row), its pieces copied in.
  CHECK(function.slice_calls == 3);
  CHECK(function.slice_bytes == 3 * kWhole);
  CHECK(engine.slice_calls == 4);
  CHECK(engine.slice_bytes == kWhole);
  // and the gradient is right: 1.5 · c of each piece
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return qkv(in[0]); },
      {randn({2, 3, 12}, float64).requires_grad_()}));
}

TEST_CASE("slices that overlap, skip or step give the gradient of slice's backward function",
    "[autograd][slice]") {
  const std::vector<std::pair<std::string, SlicedLoss>> cases = {
      {"overlapping",
          [](const Tensor& w) {
            const Tensor x = w * 1.5;
            return weighted_sum(x.slice(2, 0, 8), 1) + weighted_sum(x.slice(2, 4, 12), 2);
          }},
      {"one of them, the last position (select)",
          [](const Tensor& w) { return weighted_sum(select(w * 1.5, 1, -1), 1); }},
      {"every other position, twice (steps of 2 tile x, but not as runs)",
          [](const Tensor& w) {
            const Tensor x = w * 1.5;
            return weighted_sum(x.slice(2, 0, 12, 2), 1) + weighted_sum(x.slice(2, 1, 12, 2), 2);
          }},
      {"along different dims",
          [](const Tensor& w) {
            const Tensor x = w * 1.5;
            return weighted_sum(x.slice(1, 0, 2), 1) + weighted_sum(x.slice(2, 3, 12), 2);
          }},
      {"a slice of a slice",
          [](const Tensor& w) {
            const Tensor x = w * 1.5;
            return weighted_sum(x.slice(2, 2, 10).slice(1, 1, 3), 1) +
                   weighted_sum(x.slice(2, 0, 2), 2);
          }},
      {"a sum's gradient, one value expanded",
          [](const Tensor& w) {
            const std::vector<Tensor> pieces = split(w * 1.5, 6, 2);
            return sum(pieces[0]) + weighted_sum(pieces[1], 2);
          }},
      {"the whole of x after its slices (its gradient added to theirs)",
          [](const Tensor& w) {
            const Tensor x = w * 1.5;
            const Tensor whole = weighted_sum(x, 3);  // recorded first, so it runs last
            return whole + weighted_sum(x.slice(2, 0, 4), 1) + weighted_sum(x.slice(2, 4, 12), 2);
          }},
      {"the whole of x before its slices (theirs added into its own, in place)",
          [](const Tensor& w) {
            const Tensor x = w * 1.5;
            const Tensor sliced =
                weighted_sum(x.slice(2, 0, 4), 1) + weighted_sum(x.slice(2, 2, 12), 2);
            return sliced + weighted_sum(x, 3);  // recorded last, so it runs first
          }},
      {"a sum's expanded gradient of the whole first (added into a copy of it)",
          [](const Tensor& w) {
            const Tensor x = exp(w);  // exp's node keeps a gradient in any layout
            const Tensor sliced =
                weighted_sum(x.slice(2, 0, 4), 1) + weighted_sum(x.slice(2, 2, 12), 2);
            return sliced + sum(x);  // one 1 expanded: added into, it must be copied first
          }},
  };
  for (const auto& [name, loss_of] : cases) {
    INFO(name);
    const Backward engine = run(loss_of, false), function = run(loss_of, true);
    CHECK(same_bits(engine.grad, function.grad));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return loss_of(in[0]); },
        {randn({2, 3, 12}, float64).requires_grad_()}));
    // backward twice over a retained graph: twice the gradient, each pass the same way
    const Backward twice = run(loss_of, false, /*retain_twice=*/true);
    CHECK(same_bits(twice.grad, engine.grad * 2.0));
  }
}

TEST_CASE("a slice of a leaf gives the leaf its gradient through slice's backward function",
    "[autograd][slice]") {
  // A leaf has no node to write into: each slice's backward makes a gradient of its whole shape.
  const SlicedLoss pieces_of_w = [](const Tensor& w) {
    const std::vector<Tensor> pieces = split(w, 4, 2);
    return weighted_sum(pieces[0], 1) + weighted_sum(pieces[2], 3);
  };
  const Backward engine = run(pieces_of_w, false);
  CHECK(engine.slice_calls == 2);
  CHECK(engine.slice_bytes == 2 * kWhole);
  CHECK(same_bits(engine.grad, run(pieces_of_w, true).grad));
}

TEST_CASE("a backward that throws leaves no slice's gradient behind for the next one",
    "[autograd][slice]") {
  Generator generator(3);
  const Tensor w = randn({2, 3, 12}, generator, float64).requires_grad_();
  const std::vector<Tensor> pieces = split(w * 1.5, 6, 2);
  // pieces[1]'s slice runs first and hands its gradient to x's node; then a hook on pieces[0]
  // throws, before x's node has written it out
  bool fail = true;
  pieces[0].register_hook([&fail](const Tensor& g) {
    if (fail) throw std::runtime_error("a hook that throws");
    return g;
  });
  const Tensor loss = weighted_sum(pieces[0], 1) + weighted_sum(pieces[1], 2);
  CHECK_THROWS_AS(loss.backward(Tensor(), /*retain_graph=*/true), std::runtime_error);
  fail = false;
  loss.backward();
  // one pass's gradient: nothing of the failed pass's slice in it
  Generator again(3);
  const Tensor w2 = randn({2, 3, 12}, again, float64).requires_grad_();
  const std::vector<Tensor> pieces2 = split(w2 * 1.5, 6, 2);
  (weighted_sum(pieces2[0], 1) + weighted_sum(pieces2[1], 2)).backward();
  CHECK(same_bits(w.grad(), w2.grad()));
}
