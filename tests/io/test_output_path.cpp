// Output paths checked before a long run (io/output_path.h): each reason a path cannot be written
// is found without creating or truncating anything. The unwritable places are ones that fail even
// for root (CI runs as root, where permission bits do not stop a write): a path through a regular
// file, a missing folder, /proc.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

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
