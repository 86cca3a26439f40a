// ag's thread pool (autograd/parallel.h): every index once, exceptions reach the caller, nested
// loops run inline, ops give the same bits on 1 and 2 threads where the split cannot matter, and
// a thread count out of bounds or a thread the system refuses is an error, never a hang.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"

using namespace ag;
using Catch::Matchers::Contains;

extern char** environ;

namespace {}  // namespace

TEST_CASE("parallel_for covers every index exactly once, in contiguous chunks", "[parallel]") {
  NumThreadsGuard two(2);
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{1} << 20}) {
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    std::atomic<int> chunks{0};
    parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      CHECK(begin < end);
      ++chunks;
      for (int64_t i = begin; i < end; ++i) ++hits[static_cast<std::size_t>(i)];
    });
    int64_t not_once = 0;
    for (const auto& h : hits) not_once += h.load() != 1;
    CHECK(not_once == 0);
    // Small loops run inline (one chunk); 2^20 items are enough work for both threads.
    CHECK(chunks.load() == (n == (int64_t{1} << 20) ? 2 : 1));
  }
}

TEST_CASE("parallel_for rethrows a chunk's exception and runs nested loops inline", "[parallel]") {
  NumThreadsGuard two(2);
  CHECK_THROWS_WITH(parallel_for(int64_t{1} << 20, 1,
                        [](int64_t begin, int64_t) {
                          if (begin > 0) throw std::runtime_error("chunk failed");
                        }),
      "chunk failed");
  std::atomic<int> inner_chunks{0};
  parallel_for(2, int64_t{1} << 20, [&](int64_t, int64_t) {
    parallel_for(int64_t{1} << 20, 1, [&](int64_t, int64_t) { ++inner_chunks; });
  });
  CHECK(inner_chunks.load() == 2);  // one inline chunk per outer chunk
  // The pool still works after both.
  std::atomic<int64_t> total{0};
  parallel_for(int64_t{1} << 20, 1, [&](int64_t begin, int64_t end) { total += end - begin; });
  CHECK(total.load() == (int64_t{1} << 20));
}

TEST_CASE("elementwise ops, copies and batched matmul give the same bits on 1 and 2 threads",
    "[parallel]") {
  Generator gen(4);
  const Tensor a = randn({64, 8, 64, 32}, gen), b = randn({64, 8, 32, 64}, gen),
               bias = randn({64}, gen);
  auto compute = [&] {
    Tensor product = matmul(a, b);              // (64, 8, 64, 64): 512 products
    Tensor shifted = add(tanh(product), bias);  // broadcast over the last dim
    return std::vector<Tensor>{
        product, shifted, mul(shifted, shifted), contiguous(transpose(a, 1, 2))};
  };
  std::vector<Tensor> one, two;
  {
    NumThreadsGuard t(1);
    one = compute();
  }
  {
    NumThreadsGuard t(2);
    two = compute();
  }
  for (std::size_t i = 0; i < one.size(); ++i)
    CHECK(one[i].to_vector<float>() == two[i].to_vector<float>());
}

TEST_CASE("squared_norm_partials: each block of 4096 is summed in order, on 1 and 2 threads",
    "[parallel]") {
  // clip_grad_norm adds these partial sums; each must be the in-order loop over its block alone
  // (the kernel runs eight blocks side by side), whatever the thread count.
  constexpr int64_t kBlock = 4096;
  Generator gen(9);
  for (const int64_t n : {int64_t(1), kBlock - 1, 8 * kBlock, 8 * kBlock + 5, 21 * kBlock + 100}) {
    for (const DType dtype : {float32, float64}) {
      const Tensor x = mul(randn({n}, gen), full({1}, 3.0)).to(dtype);
      const std::vector<double> values = x.to(float64).to_vector<double>();
      std::vector<double> expected;
      for (int64_t start = 0; start < n; start += kBlock) {
        double sum = 0;
        for (int64_t i = start; i < std::min(n, start + kBlock); ++i)
          sum += values[std::size_t(i)] * values[std::size_t(i)];
        expected.push_back(sum);
      }
      INFO("n " << n << (dtype == float32 ? " float32" : " float64"));
      for (const int threads : {1, 2}) {
        NumThreadsGuard t(threads);
        CHECK(squared_norm_partials(x) == expected);
      }
    }
  }
}

TEST_CASE(
    "layer_norm's backward gives the same bits on 1 and 2 threads, db adding blocks of 64 rows in "
    "order",
    "[parallel]") {
  // The backward sums dw and db over blocks of 64 rows (the blocks split across threads), then
  // adds the blocks' sums in block order: the bits cannot depend on the thread count.
  constexpr int64_t kBlockRows = 64;
  for (const DType dtype : {float32, float64}) {
    for (const int64_t rows : {int64_t(5), kBlockRows, 3 * kBlockRows + 7}) {
      const int64_t n = 37;
      Generator gen(12);
      // upstream / 3: full-width mantissas in float64, so that the order of the sums shows
      const Tensor third = full({1}, 1.0 / 3).to(dtype);
      const Tensor x = randn({rows, n}, gen).to(dtype),
                   upstream = mul(randn({rows, n}, gen).to(dtype), third);
      const Tensor w0 = randn({n}, gen).to(dtype), b0 = randn({n}, gen).to(dtype);
      auto gradients = [&](int threads) {
        NumThreadsGuard t(threads);
        Tensor xg = x.detach().requires_grad_(), w = w0.detach().requires_grad_(),
               b = b0.detach().requires_grad_();
        sum(mul(layer_norm(xg, {n}, w, b, 1e-5), upstream)).backward();  // ∂L/∂y = upstream
        return std::vector<Tensor>{xg.grad(), w.grad(), b.grad()};
      };
      const std::vector<Tensor> one = gradients(1), two = gradients(2);
      INFO(rows << " rows, " << (dtype == float32 ? "float32" : "float64"));
      for (std::size_t i = 0; i < one.size(); ++i)
        CHECK(one[i].to_vector<double>() == two[i].to_vector<double>());
      if (dtype == float64) {
        // db[i] = Σ_blocks (Σ_{rows of the block} upstream[r, i]), each sum in order
        const std::vector<double> g = upstream.to_vector<double>();
        std::vector<double> expected(static_cast<std::size_t>(n), 0.0);
        for (int64_t start = 0; start < rows; start += kBlockRows)
          for (int64_t i = 0; i < n; ++i) {
            double block = 0;
            for (int64_t r = start; r < std::min(rows, start + kBlockRows); ++r)
              block += g[static_cast<std::size_t>(r * n + i)];
            expected[static_cast<std::size_t>(i)] += block;
          }
        CHECK(one[2].to_vector<double>() == expected);
      }
    }
  }
}

TEST_CASE(
    "rms_norm and rotary_embedding give the same bits on 1 and 2 threads, forward and "
    "backward",
    "[parallel]") {
  // rms_norm runs layer norm's loops (dw in blocks of 64 rows, added in block order);
  // rotary_embedding splits its rows, each element computed on its own.
  for (const DType dtype : {float32, float64}) {
    for (const int64_t rows : {int64_t(5), 3 * int64_t(64) + 7}) {
      const int64_t n = 38;
      Generator gen(13);
      const Tensor third = full({1}, 1.0 / 3).to(dtype);
      const Tensor x = randn({rows, n}, gen).to(dtype),
                   upstream = mul(randn({rows, n}, gen).to(dtype), third);
      const Tensor w0 = randn({n}, gen).to(dtype);
      const Tensor theta = randn({rows, n / 2}, gen, float64) * 10.0;
      const Tensor c = ag::cos(theta).to(dtype), s = ag::sin(theta).to(dtype);
      auto run = [&](int threads) {
        NumThreadsGuard t(threads);
        Tensor xg = x.detach().requires_grad_(), w = w0.detach().requires_grad_();
        const Tensor y = rms_norm(xg, {n}, w);
        const Tensor turned = rotary_embedding(y.reshape({1, rows, n}), c, s, RotaryPairs::halves);
        sum(mul(turned.reshape({rows, n}), upstream)).backward();
        return std::vector<Tensor>{y, turned, xg.grad(), w.grad()};
      };
      const std::vector<Tensor> one = run(1), two = run(2);
      INFO(rows << " rows, " << dtype_name(dtype));
      for (std::size_t i = 0; i < one.size(); ++i)
        CHECK(one[i].to_vector<double>() == two[i].to_vector<double>());
    }
  }
}

TEST_CASE("set_num_threads rejects 0 and sets get_num_threads", "[parallel]") {
  NumThreadsGuard keep(get_num_threads());
  set_num_threads(3);
  CHECK(get_num_threads() == 3);
  CHECK_THROWS_AS(set_num_threads(0), ValueError);
  CHECK(get_num_threads() == 3);
}

TEST_CASE(
    "set_num_threads accepts up to max_num_threads and names the bound above it", "[parallel]") {
  NumThreadsGuard keep(get_num_threads());
  const int max = max_num_threads();
  CHECK(max >= 16);
  CHECK(max >= 4 * static_cast<int>(std::thread::hardware_concurrency()));
  set_num_threads(max);
  CHECK(get_num_threads() == max);
  std::atomic<int64_t> covered{0};
  parallel_for(int64_t{1} << 22, 1, [&](int64_t begin, int64_t end) { covered += end - begin; });
  CHECK(covered.load() == (int64_t{1} << 22));
  for (const int bad : {max + 1, 4000, -1}) {
    CHECK_THROWS_AS(set_num_threads(bad), ValueError);
    CHECK_THROWS_WITH(
        set_num_threads(bad), Contains("set_num_threads: " + std::to_string(bad) +
                                       " threads is outside [1, " + std::to_string(max) + "]"));
  }
  CHECK(get_num_threads() == max);
}

namespace {
// Runs `program` in a child process with stdout and stderr into `output`, and returns its wait
// status; a child still running after `limit` is killed (a hang fails the test, it does not hang
// ctest). `environment` is the child's whole environment.
int run_child(const std::string& program, const std::vector<std::string>& environment,
    const std::filesystem::path& output, std::chrono::seconds limit, bool& killed) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(
      &actions, STDOUT_FILENO, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv{const_cast<char*>(program.c_str()), nullptr}, envp;
  for (const std::string& variable : environment)
    envp.push_back(const_cast<char*>(variable.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int spawned =
      posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(spawned == 0);
  killed = false;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      killed = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status;
}
}  // namespace

TEST_CASE("set_num_threads throws, and the pool goes on, when the system refuses a thread",
    "[parallel]") {
  // thread_limit_child.cpp limits its address space so that only about two more threads fit,
  // asks for max_num_threads() threads and checks the error, the count kept and the pool (its
  // exit code says which failed). The pool used to hang here in pthread_cond_destroy.
  // OpenBLAS on one thread from its start, as ag keeps it: otherwise the threads OpenBLAS starts
  // when it loads may allocate their 128 MiB buffers only after the limit is set, and fail.
  std::vector<std::string> environment{"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1"};
  for (char** variable = environ; *variable; ++variable) {
    const std::string entry = *variable;
    if (entry.rfind("OPENBLAS_NUM_THREADS=", 0) != 0 && entry.rfind("OMP_NUM_THREADS=", 0) != 0)
      environment.push_back(entry);
  }
#ifdef __SANITIZE_ADDRESS__
  // AddressSanitizer's detect_stack_use_after_return gives each thread a "fake stack" of about
  // 11 MiB, and dies instead of failing when it cannot map one; under the limit it must be off.
  // (The last value of an option in ASAN_OPTIONS wins.)
  bool found = false;
  for (std::string& variable : environment)
    if (variable.rfind("ASAN_OPTIONS=", 0) == 0) {
      variable += ":detect_stack_use_after_return=0";
      found = true;
    }
  if (!found) environment.emplace_back("ASAN_OPTIONS=detect_stack_use_after_return=0");
#endif
  const std::filesystem::path output =
      std::filesystem::temp_directory_path() /
      ("ag_thread_limit_child_" + std::to_string(getpid()) + ".txt");
  bool killed = false;
  const int status =
      run_child(AG_THREAD_LIMIT_CHILD_PATH, environment, output, std::chrono::seconds(60), killed);
  std::ifstream file(output);
  std::stringstream printed;
  printed << file.rdbuf();
  std::filesystem::remove(output);
  INFO("the child printed: " << printed.str());
  CHECK_FALSE(killed);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(printed.str(), Contains("set_num_threads: could not start " +
                                     std::to_string(max_num_threads()) + " threads (") &&
                                Contains("ag keeps running on 2 threads"));
}
