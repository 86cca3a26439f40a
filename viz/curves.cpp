#include "viz/curves.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/file.h"

extern char** environ;

namespace ag::viz {

namespace fs = std::filesystem;

void write_csv(const std::string& path, const std::vector<std::string>& header,
    const std::vector<std::vector<double>>& columns) {
  if (header.size() != columns.size() || columns.empty())
    fail<ShapeError>("write_csv: ", header.size(), " header names for ", columns.size(),
        " columns ('", path, "')");
  for (const auto& column : columns)
    if (column.size() != columns[0].size())
      fail<ShapeError>("write_csv: columns of ", columns[0].size(), " and ", column.size(),
          " rows ('", path, "')");
  std::ostringstream out;  // written whole and atomically below (io/file.h)
  for (std::size_t c = 0; c < header.size(); ++c) out << (c ? "," : "") << header[c];
  out << '\n';
  char buffer[32];
  for (std::size_t r = 0; r < columns[0].size(); ++r) {
    for (std::size_t c = 0; c < columns.size(); ++c) {
      std::snprintf(buffer, sizeof buffer, "%.9g", columns[c][r]);
      out << (c ? "," : "") << buffer;
    }
    out << '\n';
  }
  write_file_atomically(path, out.str(), "write_csv:");
}

namespace {

// A gnuplot single-quoted string: nothing is special inside except '' for a quote.
std::string quoted(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> csv_header(const std::string& csv_path) {
  std::ifstream in(csv_path);
  std::string line;
  if (!in || !std::getline(in, line))
    throw IoError("plot_csv: cannot read the header line of '" + csv_path + "'");
  std::vector<std::string> names;
  std::stringstream fields(line);
  for (std::string name; std::getline(fields, name, ',');) names.push_back(name);
  return names;
}

// Runs program with arguments, its stdout and stderr collected; returns the wait status.
int run_program(const std::vector<std::string>& argv, std::string& output) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    throw ExternalProgramError(
        "plot_csv: cannot create a pipe for '" + argv[0] + "': " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned =
      ::posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    throw ExternalProgramError(
        "plot_csv: cannot run '" + argv[0] + "': " + std::strerror(spawned) +
        " (gnuplot draws the line plots; install it with scripts/install-deps.sh, Debian package "
        "gnuplot-nox)");
  }
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    output.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      throw ExternalProgramError(
          "plot_csv: waiting for '" + argv[0] + "' failed: " + std::strerror(errno));
  return status;
}

}  // namespace

void plot_csv(const std::string& csv_path, const std::string& png_path, const LineFigure& figure) {
  if (figure.panels.empty())
    fail<ValueError>("plot_csv: the figure for '", png_path, "' has no panels");
  const int64_t panels = static_cast<int64_t>(figure.panels.size());
  const int64_t height = figure.height > 0 ? figure.height : 360 * panels;
  if (figure.width < 100 || height < 100 || figure.width > 10000 || height > 10000)
    fail<ValueError>(
        "plot_csv: size ", figure.width, "x", height, " is not in 100…10000 x 100…10000");
  const std::vector<std::string> header = csv_header(csv_path);
  if (header.size() < 2) throw IoError("plot_csv: '" + csv_path + "' has fewer than two columns");
  auto column_index = [&](const std::string& name) {  // 1-based, as gnuplot counts
    auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) {
      std::string known;
      for (const std::string& h : header) known += (known.empty() ? "" : ", ") + h;
      throw IoError(
          "plot_csv: '" + csv_path + "' has no column '" + name + "' (it has: " + known + ")");
    }
    return (it - header.begin()) + 1;
  };

  // Absolute paths, so that the script works from any directory.
  const fs::path csv = fs::absolute(csv_path), png = fs::absolute(png_path);
  const fs::path script_path = fs::path(png).replace_extension(".gp");
  std::ostringstream gp;
  gp << "# Drawn by ag (viz/curves.cpp); redraw with: gnuplot " << quoted(script_path.string())
     << "\n"
     << "set terminal png noenhanced size " << figure.width << "," << height << "\n"
     << "set output " << quoted(png.string()) << "\n"
     << "set datafile separator ','\n"
     << "set grid\n";
  if (panels > 1 || !figure.title.empty()) {
    gp << "set multiplot layout " << panels << ",1";
    if (!figure.title.empty()) gp << " title " << quoted(figure.title);
    gp << "\n";
  }
  for (const LinePanel& p : figure.panels) {
    if (p.curves.empty())
      fail<ValueError>("plot_csv: panel '", p.title, "' of '", png_path, "' has no curves");
    gp << "set title " << quoted(p.title) << "\n"
       << "set xlabel " << quoted(p.xlabel.empty() ? header[0] : p.xlabel) << "\n"
       << "set ylabel " << quoted(p.ylabel) << "\n"
       << "set key " << p.key << "\n"
       << "set yrange [" << (p.ymin ? std::to_string(*p.ymin) : "*") << ":"
       << (p.ymax ? std::to_string(*p.ymax) : "*") << "]\n"
       << "plot ";
    for (std::size_t i = 0; i < p.curves.size(); ++i)
      gp << (i ? ", \\\n     " : "") << quoted(csv.string())
         << " skip 1 using 1:" << column_index(p.curves[i].column) << " with "
         << (figure.points ? "linespoints" : "lines") << " linewidth 2 title "
         << quoted(p.curves[i].title);
    gp << "\n";
  }
  if (panels > 1 || !figure.title.empty()) gp << "unset multiplot\n";
  write_file_atomically(script_path.string(), gp.str(), "plot_csv: the gnuplot script");
  // A picture left by an earlier run must not pass for this one's.
  std::error_code error;
  fs::remove(png, error);
  std::string output;
  const int status = run_program({figure.gnuplot, script_path.string()}, output);
  const std::string command = figure.gnuplot + " " + script_path.string();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string how = WIFEXITED(status)
                                ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                : "was killed by signal " + std::to_string(WTERMSIG(status));
    throw ExternalProgramError(
        "plot_csv: '" + command + "' " + how + (output.empty() ? "" : ":\n" + output));
  }
  // gnuplot reports some problems (an unwritable output file) as warnings with status 0.
  if (!fs::exists(png, error) || fs::file_size(png, error) == 0)
    throw ExternalProgramError("plot_csv: '" + command + "' did not write '" + png.string() + "'" +
                               (output.empty() ? "" : ":\n" + output));
}

std::string gnuplot_problem(const std::string& gnuplot) {
  if (gnuplot.find('/') != std::string::npos)
    return ::access(gnuplot.c_str(), X_OK) == 0 ? "" : gnuplot + " is not an executable file";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + gnuplot;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return "";
  }
  return gnuplot + " is not on PATH (apt-get install gnuplot-nox; scripts/install-deps.sh does)";
}

}  // namespace ag::viz
