#include "io/file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "autograd/error.h"

namespace ag {

namespace {

std::atomic<uint64_t> temp_counter{0};

// Writes all of `bytes` to fd, retrying short writes; false (errno set) on failure.
bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

const char* file_kind(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

InputFile::InputFile(const std::string& path, const std::string& what) : path_(path), what_(what) {
  // O_NONBLOCK: a FIFO opens at once instead of waiting for a writer (and is refused below); on a
  // regular file it changes nothing.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    const int error = errno;
    ::close(fd_);
    fail(std::string("cannot stat: ") + std::strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    fail(std::string("not a regular file (") + file_kind(info.st_mode) + ")");
  }
  size_ = static_cast<uint64_t>(info.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::fail(const std::string& problem) const {
  throw IoError(what_ + " " + path_ + ": " + problem);
}

std::string InputFile::read(uint64_t offset, uint64_t count) const {
  if (offset > size_ || count > size_ - offset)
    fail("bytes [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
         ") are past the end of the file (" + std::to_string(size_) + " bytes)");
  std::string bytes(static_cast<std::size_t>(count), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pread(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(std::string("read failed: ") + std::strerror(errno));
    if (n == 0) fail("the file shrank while it was read");
    done += static_cast<std::size_t>(n);
  }
  return bytes;
}

std::string read_whole_file(const std::string& path, const std::string& what) {
  const InputFile file(path, what);
  return file.read(0, file.size());
}

std::vector<std::string> remove_stale_temp_files(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp-";
  // "PID-N", both decimal: the PID, or 0 when the name has another form.
  auto pid_of = [](std::string_view rest) -> pid_t {
    const std::size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string_view::npos || dash + 1 == rest.size()) return 0;
    if (rest.find_first_not_of("0123456789", dash + 1) != std::string_view::npos) return 0;
    pid_t pid = 0;
    const auto [end, error] = std::from_chars(rest.data(), rest.data() + dash, pid);
    return error == std::errc() && end == rest.data() + dash ? pid : 0;
  };
  std::vector<std::string> removed;
  std::error_code error;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const pid_t pid = pid_of(std::string_view(name).substr(prefix.size()));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to signal)
    if (::unlink(it->path().c_str()) == 0) removed.push_back(it->path().string());
  }
  return removed;
}

std::string atomic_write_target(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  auto fail = [&](const std::string& problem) -> void {
    throw IoError(what + " " + path + ": " + problem);
  };
  fs::path target(path);
  for (int links = 0;; ++links) {
    struct stat info {};
    // Missing (or unreachable: the write's own open says why), or a regular file: written there.
    if (::lstat(target.c_str(), &info) != 0 || S_ISREG(info.st_mode)) return target.string();
    if (S_ISDIR(info.st_mode)) fail(target.string() + " is a directory");
    if (!S_ISLNK(info.st_mode))
      fail(target.string() + " is " + file_kind(info.st_mode) +
           ", not a regular file (the new file is written beside it and renamed over it, which "
           "would replace it)");
    if (links == 40) fail("more than 40 symbolic links to follow (a loop?)");
    std::error_code error;
    const fs::path next = fs::read_symlink(target, error);
    if (error) fail("cannot read the link " + target.string() + ": " + error.message());
    target = next.is_absolute() ? next : target.parent_path() / next;  // relative to its folder
  }
}

WriteResult write_file_atomically(const std::string& path_given, std::string_view bytes,
    const std::string& what, const std::function<void(WritePhase)>& on_phase) {
  auto fail = [&](const std::string& problem) -> void {
    throw IoError(what + " " + path_given + ": " + problem);
  };
  // A symbolic link is followed: its target is the file replaced, the link stays.
  const std::string path = atomic_write_target(path_given, what);
  auto phase = [&](WritePhase p) {
    if (on_phase) on_phase(p);
  };
  WriteResult result;
  result.removed_temp_files = remove_stale_temp_files(path);
  // The temporary file lives in the target's folder, so rename() is atomic (same filesystem).
  const std::string temp =
      path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(temp_counter++);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create the temporary file " + temp + ": " + std::strerror(errno));
  try {
    phase(WritePhase::temp_file_opened);
    const std::size_t half = bytes.size() / 2;
    if (!write_all(fd, bytes.substr(0, half)))
      fail(std::string("write failed: ") + std::strerror(errno));
    phase(WritePhase::half_written);
    if (!write_all(fd, bytes.substr(half)))
      fail(std::string("write failed: ") + std::strerror(errno));
    phase(WritePhase::written);
    if (::fsync(fd) != 0) fail(std::string("fsync failed: ") + std::strerror(errno));
    phase(WritePhase::synced);
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(temp.c_str());
    fail(std::string("close failed: ") + std::strerror(errno));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    fail(std::string("rename failed: ") + std::strerror(error));
  }
  // Make the rename itself durable: fsync the folder that holds the new name.
  const std::size_t slash = path.rfind('/');
  const std::string folder =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  phase(WritePhase::renamed);
  return result;
}

}  // namespace ag
