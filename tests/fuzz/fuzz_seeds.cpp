// ag-fuzz-seeds DIR: writes the seed corpus for ag-fuzz-checkpoint into DIR — a few valid
// checkpoints in both encodings, as whole files and as payloads behind the selector byte (see
// fuzz_input.h). Run by tests/fuzz/run.sh.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

#include "autograd/ops.h"
#include "fuzz_input.h"
#include "io/checkpoint.h"
#include "io/optimizer_state.h"

namespace {

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "ag-fuzz-seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

ag::Checkpoint small() {
  ag::Checkpoint c;
  c.kind = "fuzz";
  c.tensors["layer.weight"] =
      ag::tensor({1.5, -0.0, 1e-40, 3.4e38, -2.0, 0.1}, {2, 3}, ag::float32);
  c.tensors["layer.bias"] = ag::tensor({0.1, 1.0 / 3.0, 5e-324, -1e300}, {4}, ag::float64);
  c.tensors["scale"] = ag::scalar_tensor(2.5, ag::float32);
  c.tensors["empty"] = ag::zeros({0, 3}, ag::float64);
  c.integers["step"] = 12345;
  c.integers["seed"] = std::numeric_limits<uint64_t>::max();
  c.reals["lr"] = 1e-3;
  c.reals["inf"] = std::numeric_limits<double>::infinity();
  c.reals["nan"] = std::numeric_limits<double>::quiet_NaN();
  c.strings["name"] = "h\xc3\xa9llo \"[{";
  c.strings["empty"] = "";
  return c;
}

ag::Checkpoint empty() {
  ag::Checkpoint c;
  c.kind = "";
  return c;
}

ag::Checkpoint one_tensor() {
  ag::Checkpoint c;
  c.kind = "model";
  c.tensors["w"] = ag::tensor({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}, ag::float64);
  return c;
}

// AdamW's state in two groups after one step, as ag-train's checkpoints hold it ("optimizer.…").
ag::Checkpoint optimizer_state() {
  ag::Generator g(1);
  const ag::Tensor w = ag::randn({2, 3}, g).requires_grad_();
  const ag::Tensor b = ag::randn({3}, g).requires_grad_();
  ag::optim::AdamW adamw(std::vector<ag::optim::ParamGroup>{{{w}, {}, {}}, {{b}, 0.01, 0.0}}, 0.1);
  w.set_grad(ag::randn({2, 3}, g));
  adamw.step();
  ag::Checkpoint c;
  c.kind = "ag-train";
  ag::put_optimizer_state(c, adamw.state_dict());
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ag-fuzz-seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::pair<const char*, ag::Checkpoint> checkpoints[] = {{"small", small()},
      {"empty", empty()}, {"one-tensor", one_tensor()}, {"optimizer", optimizer_state()}};
  int written = 0;
  for (const auto& [name, c] : checkpoints) {
    for (ag::CheckpointFormat format : {ag::CheckpointFormat::binary, ag::CheckpointFormat::json}) {
      const bool json = format == ag::CheckpointFormat::json;
      const std::string file = ag::serialize_checkpoint(c, format);
      const std::string stem = dir + "/" + name + (json ? "-json" : "-binary");
      write(stem + ".agc", file);  // starts with 0x89: read as a whole file
      const char selector =
          static_cast<char>(json ? ag_fuzz::kJsonPayload : ag_fuzz::kBinaryPayload);
      write(stem + ".payload", selector + file.substr(28));
      written += 2;
    }
  }
  std::printf("ag-fuzz-seeds: wrote %d seeds to %s\n", written, dir.c_str());
  return 0;
}
