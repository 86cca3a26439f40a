#include "io/detail/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "autograd/error.h"

namespace ag::io::detail {

namespace {
std::atomic<uint64_t> temp_counter{0};

[[noreturn]] void fail_io(const std::string& path, const std::string& problem) {
  throw IoError(path + ": " + problem);
}
}  // namespace

std::string read_whole_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_io(path, "cannot open the " + what + " file: " + std::strerror(errno));
  std::string bytes;
  try {
    struct stat info {};
    if (::fstat(fd, &info) != 0) fail_io(path, std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(info.st_mode)) fail_io(path, "not a regular file (a folder?)");
    bytes.resize(static_cast<std::size_t>(info.st_size));
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_io(path, std::string("read failed: ") + std::strerror(errno));
      if (n == 0) fail_io(path, "the file shrank while it was read");
      done += static_cast<std::size_t>(n);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return bytes;
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  // The temporary file lives in the target's folder, so rename() is atomic (same filesystem).
  const std::string temp =
      path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(temp_counter++);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    fail_io(path, "cannot create the temporary file " + temp + ": " + std::strerror(errno));
  try {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail_io(path, std::string("write failed: ") + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) fail_io(path, std::string("fsync failed: ") + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(temp.c_str());
    fail_io(path, std::string("close failed: ") + std::strerror(errno));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    fail_io(path, std::string("rename failed: ") + std::strerror(error));
  }
  const std::size_t slash = path.rfind('/');
  const std::string folder =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace ag::io::detail
