// A fresh empty folder under the system's temporary directory, removed with everything in it when
// the test ends: TempFolder folder; folder.file("m.safetensors").
#pragma once

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace ag::testing {

struct TempFolder {
  std::filesystem::path path;
  TempFolder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ag-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  // The path of `name` inside the folder.
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace ag::testing
