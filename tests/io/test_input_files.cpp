// Inputs that are not regular files, and files that are not the format they claim (io/file.h's
// InputFile): each reader refuses a FIFO at once instead of waiting for a writer forever, and reads
// a format's header before its body, so that a large file of the wrong kind costs its first bytes.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>

#include "io/checkpoint.h"
#include "io/file.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "tests/temp_folder.h"

using namespace ag;
using ag::testing::TempFolder;
using Catch::Matchers::Contains;

namespace {

// Every reader of a file format, by the name its errors give.
const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> kReaders = {
    {"checkpoint", [](const std::string& path) { load_checkpoint(path); }},
    {"safetensors", [](const std::string& path) { read_safetensors(path); }},
    {"npy", [](const std::string& path) { read_npy(path); }},
};

}  // namespace

TEST_CASE("a FIFO given as an input file is refused at once, not waited on", "[io][files]") {
  TempFolder folder;
  const std::string fifo = folder.file("model.safetensors");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const auto& [what, read] : kReaders) {
    INFO(what);
    auto reading = std::async(std::launch::async, [&, read = read] {
      try {
        read(fifo);
        return std::string("read");
      } catch (const IoError& e) {
        return std::string(e.what());
      }
    });
    if (reading.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      // The reader is blocked in open(): a writer lets it go, so that the test can end.
      const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (writer >= 0) ::close(writer);
      FAIL("the " << what << " reader waited for a writer on the FIFO");
    }
    CHECK_THAT(reading.get(), Contains(what + " " + fifo + ": not a regular file (a FIFO)"));
  }
  CHECK_THROWS_WITH(read_whole_file(folder.path.string(), "safetensors"),
      Contains("not a regular file (a directory)"));
}

TEST_CASE("a 64 GiB file that is not the format is refused from its first bytes", "[io][files]") {
  // A sparse file: no disk, but a reader that took it whole would ask for 64 GiB of memory, more
  // than the machine has, and fail with bad_alloc (or be killed) instead of the format's error.
  // (A file system that cannot hold a sparse file of 64 GiB gets the largest of 16 and 4 GiB it
  // can: still more than a test may allocate.)
  TempFolder folder;
  const std::string path = folder.file("zeros");
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    bool sized = false;
    for (const off_t gib : {64, 16, 4})
      if (!sized) sized = ::ftruncate(fd, gib << 30) == 0;
    ::close(fd);
    REQUIRE(sized);
  }
  CHECK_THROWS_WITH(load_checkpoint(path),
      Contains("checkpoint " + path + ": not an ag checkpoint (its first bytes are not ag's"));
  CHECK_THROWS_WITH(read_npy(path), Contains("does not start with \\x93NUMPY"));
  // Its first 8 bytes, a header length of 0: the header "" is no JSON object.
  CHECK_THROWS_AS(read_safetensors(path), SafetensorsError);
  CHECK_THROWS_WITH(read_safetensors(path), Contains("expected '{' to start the header"));
}

TEST_CASE("InputFile reads the parts a reader asks for, within the file", "[io][files]") {
  TempFolder folder;
  const std::string path = folder.file("bytes");
  write_file_atomically(path, "0123456789", "test");
  const InputFile file(path, "test");
  CHECK(file.size() == 10);
  CHECK(file.read(0, 3) == "012");
  CHECK(file.read(7, 3) == "789");
  CHECK(file.read(10, 0).empty());
  CHECK_THROWS_WITH(
      file.read(8, 3), "test " + path + ": bytes [8, 11) are past the end of the file (10 bytes)");
  CHECK_THROWS_WITH(InputFile(folder.file("missing"), "test"),
      Contains("test " + folder.file("missing") + ": cannot open: No such file or directory"));
}
