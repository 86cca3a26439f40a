// Output paths checked before a long run (io/output_path.h): each reason a path cannot be written
// is found without creating or truncating anything. The unwritable places are ones that fail even
// for root (CI runs as root, where permission bits do not stop a write): a path through a regular
// file, a missing folder, /proc.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/error.h"
#include "io/file.h"
#include "io/output_path.h"
#include "tests/temp_folder.h"

using namespace ag;
using ag::testing::TempFolder;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> names_in(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("an output file that can be written passes, and nothing is created or truncated",
    "[io][output]") {
  TempFolder folder;
  const fs::path existing = folder.path / "model.agm", fresh = folder.path / "new.agm";
  std::ofstream(existing) << "trained for an hour";
  for (OutputKind kind : {OutputKind::file, OutputKind::renamed_file}) {
    CHECK(output_file_problem(existing.string(), kind).empty());
    CHECK(output_file_problem(fresh.string(), kind).empty());
  }
  CHECK(output_directory_problem(folder.path.string()).empty());
  CHECK(output_directory_problem((folder.path / "a" / "b").string()).empty());
  CHECK(output_file_problem("/dev/null").empty());
  // No probe file left, no file created, the existing one intact.
  CHECK(names_in(folder.path) == std::vector<std::string>{"model.agm"});
  CHECK(read(existing) == "trained for an hour");
}

TEST_CASE("an output that cannot be written is refused with the system's reason", "[io][output]") {
  TempFolder folder;
  const fs::path plain = folder.path / "plain";
  std::ofstream(plain) << "a regular file";
  const std::string in_plain = (plain / "x.agc").string();
  for (OutputKind kind : {OutputKind::file, OutputKind::renamed_file}) {
    CHECK(output_file_problem(in_plain, kind) == plain.string() + " is not a directory");
    CHECK(output_file_problem((plain / "a" / "x.agc").string(), kind) ==
          plain.string() + " is not a directory");
    CHECK(output_file_problem((folder.path / "missing" / "x.agc").string(), kind) ==
          "the folder " + (folder.path / "missing").string() + " does not exist");
    CHECK(output_file_problem(folder.path.string(), kind) ==
          folder.path.string() + " is a directory");
    CHECK_THAT(
        output_file_problem("/proc/ag-test.agc", kind), Contains("cannot create files in /proc: "));
    CHECK(output_file_problem("", kind) == "the path is empty");
  }
  CHECK(output_directory_problem(plain.string()) == plain.string() + " is not a directory");
  CHECK(output_directory_problem((plain / "curves").string()) ==
        plain.string() + " is not a directory");
  CHECK_THAT(
      output_directory_problem("/proc/ag-test-curves"), Contains("cannot create files in /proc: "));
  CHECK(names_in(folder.path) == std::vector<std::string>{"plain"});
  CHECK(read(plain) == "a regular file");
}

TEST_CASE(
    "a path that is not a regular file: written through, followed, or refused", "[io][output]") {
  // The policy (docs/checkpoints.md, "Output paths"): a file written whole (renamed_file: a
  // checkpoint, a model, a picture) replaces only a regular file, following a symbolic link to it;
  // a file written in place (file: a log) may also be a character device such as /dev/null.
  TempFolder folder;
  const std::string fifo = folder.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(output_file_problem(fifo, OutputKind::file) == fifo + " is a FIFO, not a regular file");
  CHECK_THAT(output_file_problem(fifo, OutputKind::renamed_file),
      Contains(fifo + " is a FIFO, not a regular file (the new file is written beside it"));
  CHECK(output_file_problem("/dev/null", OutputKind::file).empty());
  CHECK_THAT(output_file_problem("/dev/null", OutputKind::renamed_file),
      Contains("/dev/null is a character device, not a regular file"));
  // The atomic writer itself refuses them, and leaves them as they were.
  CHECK_THROWS_WITH(write_file_atomically("/dev/null", "x", "checkpoint"),
      Contains("checkpoint /dev/null: /dev/null is a character device, not a regular file"));
  CHECK_THROWS_WITH(write_file_atomically(fifo, "x", "checkpoint"), Contains("is a FIFO"));
  struct stat info {};
  REQUIRE(::stat("/dev/null", &info) == 0);
  CHECK(S_ISCHR(info.st_mode));
  REQUIRE(::lstat(fifo.c_str(), &info) == 0);
  CHECK(S_ISFIFO(info.st_mode));

  // A symbolic link, to a file or through a chain of links (one relative, one dangling): the link
  // stays a link, the file it leads to gets the new bytes.
  const std::string target = folder.file("run.agc"), link = folder.file("latest.agc");
  std::ofstream(target) << "old";
  fs::create_symlink("run.agc", link);  // relative to the link's folder
  CHECK(output_file_problem(link, OutputKind::renamed_file).empty());
  write_file_atomically(link, "new", "checkpoint");
  CHECK(fs::is_symlink(link));
  CHECK(read(target) == "new");
  const std::string chain = folder.file("chain"), dangling = folder.file("dangling");
  fs::create_symlink(link, chain);
  fs::create_symlink(folder.file("sub-missing"), dangling);
  write_file_atomically(chain, "newer", "checkpoint");
  CHECK(read(target) == "newer");
  write_file_atomically(dangling, "created", "checkpoint");
  CHECK(fs::is_symlink(dangling));
  CHECK(read(folder.file("sub-missing")) == "created");
  // A link to a device is refused like the device; a loop of links is refused.
  fs::create_symlink("/dev/null", folder.file("to-null"));
  CHECK_THAT(output_file_problem(folder.file("to-null"), OutputKind::renamed_file),
      Contains("/dev/null is a character device"));
  fs::create_symlink(folder.file("loop-b"), folder.file("loop-a"));
  fs::create_symlink(folder.file("loop-a"), folder.file("loop-b"));
  CHECK_THROWS_WITH(write_file_atomically(folder.file("loop-a"), "x", "checkpoint"),
      Contains("more than 40 symbolic links to follow"));
}

TEST_CASE("a write that fails for want of space is an error, and the old file stays whole",
    "[io][output]") {
  // A full disk, as the process sees it: RLIMIT_FSIZE caps the size of any file it writes, and a
  // write past it fails with EFBIG (SIGXFSZ ignored) as one on a full disk fails with ENOSPC.
  TempFolder folder;
  const std::string path = (folder.path / "model.agm").string();
  write_file_atomically(path, "the old model", "checkpoint");
  struct rlimit saved {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  const auto previous_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string error;
  try {
    write_file_atomically(path, std::string(1 << 20, 'x'), "checkpoint");
  } catch (const IoError& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, previous_handler);
  CHECK_THAT(error, Contains("checkpoint " + path + ": write failed: File too large"));
  CHECK(read(path) == "the old model");
  CHECK(names_in(folder.path) == std::vector<std::string>{"model.agm"});  // no temporary file left
}
