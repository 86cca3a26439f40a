// docs/ops.md is the one-screen table of every op's gradient; it must list exactly the ops of
// autograd/op_list.h, each in the source file that defines it, and each op's gradient column must
// be the one written beside the op's backward in that file, on a line
//   // docs/ops.md, <op>: <gradient>
// (continued on lines starting "//   "), so that the table cannot drift from the code. Every
// ops_*.cpp file is named in autograd/ops.h's header, and its tags are those of the ops the table
// places in it: no gradient is written in a second, unchecked place of that form.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/op_list.h"

namespace {
// Runs of spaces as one space, no space at either end.
std::string normalize_spaces(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// The gradient written beside `op` in `source` (the tag line and its continuation lines, joined),
// or "" if there is no tag.
std::string gradient_tag(const std::string& source, const std::string& op) {
  const std::string tag = "// docs/ops.md, " + op + ": ";
  const std::size_t at = source.find(tag);
  if (at == std::string::npos) return "";
  std::istringstream rest(source.substr(at + tag.size()));
  std::string line, text;
  std::getline(rest, text);
  while (std::getline(rest, line)) {
    const std::size_t comment = line.find_first_not_of(' ');
    if (comment == std::string::npos || line.compare(comment, 5, "//   ") != 0) break;
    text += ' ';
    text += line.substr(comment + 5);
  }
  return normalize_spaces(text);
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

TEST_CASE("docs/ops.md lists every differentiable op, in the file that defines it", "[docs]") {
  const std::string table = read(AG_SOURCE_DIR "/docs/ops.md");
  // Table rows look like: | `name` | forward | gradient | file.cpp |
  std::set<std::string> documented;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::size_t name_end = line.find('`', 3);
    const std::size_t file_start = line.rfind("| ", line.size() - 3);
    REQUIRE(name_end != std::string::npos);
    const std::string name = line.substr(3, name_end - 3);
    const std::string file = line.substr(file_start + 2, line.size() - file_start - 4);
    INFO("docs/ops.md row for " << name << " names file '" << file << "'");
    CHECK(documented.insert(name).second);  // listed once
    // The op is recorded with Op::name in the file the table names.
    const std::string source = read(AG_SOURCE_DIR "/autograd/" + file);
    CHECK(source.find("Op::" + name + ",") != std::string::npos);
    // Its gradient column (the third cell) is the one tagged beside its backward there.
    std::vector<std::string> cells;
    std::istringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');)
      cells.push_back(normalize_spaces(cell.substr(cell.find_first_not_of(' '))));
    REQUIRE(cells.size() >= 4);
    INFO("the gradient in docs/ops.md: " << cells[2]);
    CHECK(gradient_tag(source, name) == cells[2]);
  }
  std::set<std::string> ops(std::begin(ag::kOpNames), std::end(ag::kOpNames));
  CHECK(documented == ops);
}

TEST_CASE(
    "every ops_*.cpp is named in ops.h, and tags only the ops docs/ops.md places in it", "[docs]") {
  // op -> file, from the table's rows
  std::map<std::string, std::string> file_of;
  std::istringstream lines(read(AG_SOURCE_DIR "/docs/ops.md"));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::size_t file_start = line.rfind("| ", line.size() - 3);
    const std::string op = line.substr(3, line.find('`', 3) - 3);
    file_of[op] = line.substr(file_start + 2, line.size() - file_start - 4);
  }
  const std::string ops_h = read(AG_SOURCE_DIR "/autograd/ops.h");
  const std::string header = ops_h.substr(0, ops_h.find("#pragma once"));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(AG_SOURCE_DIR "/autograd")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ops_", 0) != 0 || entry.path().extension() != ".cpp") continue;
    ++files;
    INFO(name);
    CHECK(header.find(name) != std::string::npos);  // in the list of files at the top of ops.h
    const std::string source = read(entry.path().string());
    const std::string tag = "// docs/ops.md, ";
    int tags = 0;
    for (std::size_t at = source.find(tag); at != std::string::npos;
         at = source.find(tag, at + 1)) {
      const std::size_t name_start = at + tag.size();
      const std::string op = source.substr(name_start, source.find(':', name_start) - name_start);
      INFO("tag for " << op);
      CHECK(file_of.count(op) == 1);
      if (file_of.count(op) == 1) CHECK(file_of.at(op) == name);
      ++tags;
    }
    CHECK(tags > 0);  // an ops file defines ops
  }
  CHECK(files >= 10);
}

TEST_CASE("docs/ops.md's table of saved tensors lists exactly the ops recorded with a saved list",
    "[docs]") {
  // The ops named in the rows of the "Saved tensors" table (| inputs | `mul`, ... |) ...
  const std::string doc = read(AG_SOURCE_DIR "/docs/ops.md");
  const std::size_t section = doc.find("## Saved tensors");
  REQUIRE(section != std::string::npos);
  const std::set<std::string> ops(std::begin(ag::kOpNames), std::end(ag::kOpNames));
  std::set<std::string> documented;
  std::map<std::string, std::string> file_of;  // op -> its file, from the main table
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) == 0) {
      const std::size_t file_start = line.rfind("| ", line.size() - 3);
      file_of[line.substr(3, line.find('`', 3) - 3)] =
          line.substr(file_start + 2, line.size() - file_start - 4);
    }
  }
  std::istringstream saved_rows(
      doc.substr(section, doc.find("\n\n", doc.find("| saved", section)) - section));
  for (std::string line; std::getline(saved_rows, line);) {
    if (line.rfind("| ", 0) != 0 || line.rfind("| saved", 0) == 0 || line.rfind("|---", 0) == 0)
      continue;
    for (std::size_t at = line.find('`'); at != std::string::npos;
         at = line.find('`', line.find('`', at + 1) + 1)) {
      const std::string name = line.substr(at + 1, line.find('`', at + 1) - at - 1);
      if (ops.count(name) == 1) documented.insert(name);
    }
  }
  // ... are those whose record call in their file passes /*saved=*/{...} (the text from
  // "Op::<op>," to the backward lambda's capture list or the end of the statement).
  std::set<std::string> saving;
  for (const auto& [op, file] : file_of) {
    const std::string source = read(AG_SOURCE_DIR "/autograd/" + file);
    const std::size_t at = source.find("Op::" + op + ",");
    if (at == std::string::npos) continue;  // the main table's test reports it
    const std::size_t end = source.find_first_of("[;", at);
    if (source.substr(at, end - at).find("/*saved=*/") != std::string::npos) saving.insert(op);
  }
  CHECK(documented == saving);
  CHECK(saving.count("mul") == 1);  // the parse found the record calls
}
