// A registry of float64 gradient checks, one per op and broadcast case.
//
// AG_GRADCHECK_CASE(id, "name") { return ag::gradcheck(...); } defines both a Catch2 test case
// (so ctest lists and runs it on its own) and an entry in gradcheck_cases(), which the coverage
// test runs to prove that every op in autograd/op_list.h is exercised by some gradcheck.
#pragma once

#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"

namespace ag_test {

struct GradcheckCase {
  std::string name;
  std::function<ag::GradcheckResult()> run;
};

inline std::vector<GradcheckCase>& gradcheck_cases() {
  static std::vector<GradcheckCase> cases;
  return cases;
}

struct RegisterGradcheck {
  RegisterGradcheck(const char* name, std::function<ag::GradcheckResult()> run) {
    gradcheck_cases().push_back({name, std::move(run)});
  }
};

// A float64 leaf requiring grad with values uniform in [low, high), from its own seed.
inline ag::Tensor input(
    const ag::Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  ag::Generator generator(seed);
  return ag::uniform(shape, low, high, generator, ag::float64).requires_grad_();
}

// Values uniform in [low, high) with a random sign: magnitudes away from 0 (for relu's kink, for
// division, and so on).
inline ag::Tensor away_from_zero(
    const ag::Shape& shape, uint64_t seed, double low = 0.2, double high = 1.0) {
  ag::Generator generator(seed);
  ag::NoGradGuard no_grad;
  ag::Tensor magnitude = ag::uniform(shape, low, high, generator, ag::float64);
  ag::Tensor sign = ag::bernoulli(shape, 0.5, generator, ag::float64) * 2.0 - 1.0;
  return (magnitude * sign).requires_grad_();
}

// A 0/1 float64 mask (not differentiated).
inline ag::Tensor mask(const ag::Shape& shape, uint64_t seed, double p = 0.5) {
  ag::Generator generator(seed);
  return ag::bernoulli(shape, p, generator, ag::float64);
}

}  // namespace ag_test

#define AG_GRADCHECK_CONCAT_INNER(a, b) a##b
#define AG_GRADCHECK_CONCAT(a, b) AG_GRADCHECK_CONCAT_INNER(a, b)

#define AG_GRADCHECK_CASE(id, name) \
  AG_GRADCHECK_CASE_IMPL(AG_GRADCHECK_CONCAT(gradcheck_case_, id), name)
#define AG_GRADCHECK_CASE_IMPL(fn, name)                                                  \
  static ag::GradcheckResult fn();                                                        \
  static const ag_test::RegisterGradcheck AG_GRADCHECK_CONCAT(fn, _registered)(name, fn); \
  TEST_CASE("gradcheck: " name, "[gradcheck]") {                                          \
    const ag::GradcheckResult result = fn();                                              \
    INFO(result.message);                                                                 \
    CHECK(result.passed);                                                                 \
  }                                                                                       \
  static ag::GradcheckResult fn()
