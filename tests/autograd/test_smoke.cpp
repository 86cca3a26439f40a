#include <catch2/catch.hpp>
#include <iostream>
#include "autograd/autograd.h"
#include "autograd/ops.h"
TEST_CASE("smoke") {
  auto a = ag::randn({2, 3}, ag::float64).requires_grad_();
  auto b = ag::randn({3, 4}, ag::float64);
  auto c = ag::matmul(a, b).sum();
  c.backward();
  std::cout << a << "\n" << a.grad() << "\n" << c << "\n";
}
