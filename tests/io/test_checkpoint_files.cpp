// Saving checkpoint files: atomic replacement, even when the saving process is killed halfway.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "autograd/ops.h"
#include "io/checkpoint.h"
#include "tests/temp_folder.h"

using namespace ag;
using ag::testing::TempFolder;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

Checkpoint make(const std::string& kind, int64_t size) {
  Checkpoint c;
  c.kind = kind;
  Generator g(static_cast<uint64_t>(size));
  c.tensors["weights"] = randn({size}, g);  // large enough that a write takes several pieces
  c.integers["size"] = static_cast<uint64_t>(size);
  return c;
}

std::vector<fs::path> files_in(const fs::path& folder) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder)) files.push_back(entry.path().filename());
  return files;
}

}  // namespace

TEST_CASE("save then load gives the same checkpoint, and leaves no temporary file",
    "[checkpoint][files]") {
  TempFolder folder;
  const std::string path = (folder.path / "run.agc").string();
  for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
    save_checkpoint(make("first", 1000), path, {format, {}});
    save_checkpoint(make("second", 300), path, {format, {}});  // replaces it
    Checkpoint back = load_checkpoint(path);
    CHECK(back.kind == "second");
    CHECK(back.integer("size") == 300);
    CHECK(back.tensor("weights").to_vector<float>() ==
          make("second", 300).tensor("weights").to_vector<float>());
    CHECK(files_in(folder.path) == std::vector<fs::path>{"run.agc"});
  }
}

TEST_CASE(
    "a save that fails halfway leaves the old file and no temporary file", "[checkpoint][files]") {
  TempFolder folder;
  const std::string path = (folder.path / "run.agc").string();
  save_checkpoint(make("old", 100), path);
  SaveOptions failing;
  failing.on_phase = [](SavePhase phase) {
    if (phase == SavePhase::half_written) throw std::runtime_error("disk full (simulated)");
  };
  CHECK_THROWS_WITH(save_checkpoint(make("new", 5000), path, failing), Contains("disk full"));
  CHECK(load_checkpoint(path).kind == "old");
  CHECK(files_in(folder.path) == std::vector<fs::path>{"run.agc"});
}

TEST_CASE("saving into a folder that does not exist is a clear error", "[checkpoint][files]") {
  TempFolder folder;
  const std::string path = (folder.path / "missing" / "run.agc").string();
  CHECK_THROWS_AS(save_checkpoint(make("x", 10), path), CheckpointError);
  CHECK_THROWS_WITH(save_checkpoint(make("x", 10), path),
      Contains("run.agc") && Contains("cannot create the temporary file"));
  CHECK_THROWS_WITH(load_checkpoint(path), Contains("run.agc") && Contains("cannot open"));
}

TEST_CASE(
    "a process killed at any point of a save leaves a loadable checkpoint", "[checkpoint][files]") {
  TempFolder folder;
  const std::string path = (folder.path / "run.agc").string();
  const SavePhase phases[] = {SavePhase::temp_file_opened, SavePhase::half_written,
      SavePhase::written, SavePhase::synced, SavePhase::renamed};
  for (SavePhase phase : phases) {
    save_checkpoint(make("old", 100), path);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The child saves a new checkpoint and is killed — no cleanup, no exception — at `phase`.
      SaveOptions dying;
      dying.on_phase = [phase](SavePhase p) {
        if (p == phase) ::raise(SIGKILL);
      };
      save_checkpoint(make("new", 20000), path, dying);
      ::_exit(0);  // not reached
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    INFO("killed at phase " << static_cast<int>(phase));
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    // Either the old checkpoint or the new one, complete: before the rename the old, after it the
    // new.
    Checkpoint c = load_checkpoint(path);
    CHECK(c.kind == (phase == SavePhase::renamed ? "new" : "old"));
    CHECK(c.tensor("weights").numel() == static_cast<int64_t>(c.integer("size")));
    // The killed child may leave its temporary file behind, never a damaged target.
    for (const fs::path& f : files_in(folder.path))
      if (f != "run.agc") fs::remove(folder.path / f);
  }
}

TEST_CASE("the next save removes the temporary files of killed saves, and only those",
    "[checkpoint][files]") {
  TempFolder folder;
  const std::string path = (folder.path / "run.agc").string();
  save_checkpoint(make("old", 100), path);
  // A child killed halfway through its save leaves PATH.tmp-CHILD-0; once reaped, its PID is
  // surely not a live process of ours (and not reused before the next save: PIDs advance).
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    SaveOptions dying;
    dying.on_phase = [](SavePhase p) {
      if (p == SavePhase::half_written) ::raise(SIGKILL);
    };
    save_checkpoint(make("new", 20000), path, dying);
    ::_exit(0);  // not reached
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  // PATH.tmp-CHILD-N, N the saves this process had made before the fork.
  std::string stale;
  for (const fs::path& f : files_in(folder.path))
    if (f.string().rfind("run.agc.tmp-" + std::to_string(child) + "-", 0) == 0)
      stale = (folder.path / f).string();
  REQUIRE(fs::exists(stale));
  // A save in progress in a live process (this one, and our parent), and names of other forms.
  const std::vector<std::string> kept = {path + ".tmp-" + std::to_string(::getpid()) + "-99",
      path + ".tmp-" + std::to_string(::getppid()) + "-0", path + ".tmp-" + std::to_string(child),
      path + ".tmp-" + std::to_string(child) + "-x", path + ".tmp--0",
      (folder.path / "other.agc.tmp-").string() + std::to_string(child) + "-0"};
  for (const std::string& name : kept) std::ofstream(name) << "in progress";

  const SaveResult result = save_checkpoint(make("newer", 100), path);
  CHECK(result.removed_temp_files == std::vector<std::string>{stale});
  CHECK_FALSE(fs::exists(stale));
  for (const std::string& name : kept) CHECK(fs::exists(name));
  CHECK(load_checkpoint(path).kind == "newer");
  // Nothing more to remove the next time.
  CHECK(save_checkpoint(make("newest", 100), path).removed_temp_files.empty());
  CHECK(remove_stale_temp_files(path).empty());
}
