#include "data/text_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "autograd/error.h"
#include "data/utf8.h"

namespace ag::data {

namespace fs = std::filesystem;

namespace {

// Python's universal newlines: "\r\n" and a lone "\r" become "\n".
void universal_newlines(std::string& text) {
  if (text.find('\r') == std::string::npos) return;
  std::size_t out = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      text[out++] = '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      text[out++] = text[i];
    }
  }
  text.resize(out);
}

// Checks that `bytes` are text: not empty, valid UTF-8 without NUL bytes.
void check_text_file(std::string_view bytes, const std::string& path, const char* op) {
  if (bytes.empty()) fail<IoError>(op, ": ", path, " is an empty file");
  const std::string problem = utf8_problem(bytes, path);
  if (!problem.empty()) fail<IoError>(op, ": ", problem);
}

// The whole file as text, checked and with universal newlines.
std::string read_text_file(const std::string& path, const char* op) {
  std::error_code error;
  if (!fs::is_regular_file(path, error))
    fail<IoError>(
        op, ": ", path, fs::exists(path, error) ? " is not a regular file" : " does not exist");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail<IoError>(op, ": cannot open ", path);
  std::string bytes;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size < 0) fail<IoError>(op, ": cannot read ", path);
  bytes.resize(static_cast<std::size_t>(size));
  in.read(bytes.data(), size);
  if (in.gcount() != size) fail<IoError>(op, ": cannot read ", path, " (it changed while read?)");
  check_text_file(bytes, path, op);
  universal_newlines(bytes);
  return bytes;
}

// The regular files under `folder`, recursively, symbolic links skipped, in path byte order.
std::vector<std::string> files_under(const std::string& folder) {
  std::vector<std::string> files;
  std::error_code error;
  fs::recursive_directory_iterator it(folder, fs::directory_options::none, error), end;
  if (error) fail<IoError>("read_text_files: cannot list ", folder, ": ", error.message());
  for (; it != end; it.increment(error)) {
    if (error) fail<IoError>("read_text_files: cannot list ", folder, ": ", error.message());
    const fs::file_status status = it->symlink_status();
    if (fs::is_regular_file(status)) files.push_back(it->path().string());
    // (a symbolic link's status is a symlink: neither kept nor followed)
  }
  if (error) fail<IoError>("read_text_files: cannot list ", folder, ": ", error.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TextCorpus read_text_files(const std::vector<std::string>& paths) {
  if (paths.empty()) fail<ValueError>("read_text_files: no paths given");
  TextCorpus corpus;
  for (const std::string& path : paths) {
    std::error_code error;
    if (fs::is_directory(path, error)) {
      const std::vector<std::string> files = files_under(path);
      if (files.empty())
        fail<IoError>("read_text_files: the folder ", path,
            " holds no regular files (symbolic links are skipped)");
      corpus.files.insert(corpus.files.end(), files.begin(), files.end());
    } else {
      corpus.files.push_back(path);
    }
  }
  for (const std::string& file : corpus.files)
    corpus.text += read_text_file(file, "read_text_files");
  return corpus;
}

TextCorpus read_fortunes(const std::string& folder) {
  std::error_code error;
  if (!fs::is_directory(folder, error))
    fail<IoError>("read_fortunes: ", folder,
        " does not exist: install Debian's fortunes package (scripts/install-deps.sh does, or "
        "apt-get install fortunes), or give text files instead");
  TextCorpus corpus;
  fs::directory_iterator it(folder, error), end;
  if (error) fail<IoError>("read_fortunes: cannot list ", folder, ": ", error.message());
  for (; it != end; it.increment(error)) {
    if (error) fail<IoError>("read_fortunes: cannot list ", folder, ": ", error.message());
    const std::string name = it->path().filename().string();
    const bool index = name.size() >= 4 && name.compare(name.size() - 4, 4, ".dat") == 0;
    if (fs::is_regular_file(it->symlink_status()) && !index)
      corpus.files.push_back(it->path().string());
  }
  if (error) fail<IoError>("read_fortunes: cannot list ", folder, ": ", error.message());
  if (corpus.files.empty())
    fail<IoError>("read_fortunes: ", folder,
        " holds no fortune files: install Debian's fortunes package (scripts/install-deps.sh)");
  std::sort(corpus.files.begin(), corpus.files.end());
  for (const std::string& file : corpus.files) corpus.text += read_text_file(file, "read_fortunes");
  return corpus;
}

PairsFile parse_pairs(std::string_view text, const std::string& source) {
  check_text_file(text, source, "read_pairs");
  PairsFile file;
  file.path = source;
  int64_t lines = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++lines;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // a Windows line end
    const std::size_t tab = line.find('\t');
    if (tab == std::string_view::npos) {
      ++file.skipped_lines;
      continue;
    }
    const std::size_t second_tab = line.find('\t', tab + 1);
    const std::size_t target_end = second_tab == std::string_view::npos ? line.size() : second_tab;
    file.pairs.push_back({std::string(line.substr(0, tab)),
        std::string(line.substr(tab + 1, target_end - tab - 1))});
  }
  if (file.pairs.empty())
    fail<IoError>("read_pairs: ", source, " has no usable line: none of its ", lines,
        " lines holds a tab (\"source<TAB>target\", as d2l's fra.txt)");
  // A side that is blank in every pair leaves nothing to translate from, or to.
  auto blank = [](const std::string& text) {
    return text.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
  };
  for (const auto& [side, of] :
      {std::pair{"source", &SentencePair::source}, std::pair{"target", &SentencePair::target}})
    if (std::all_of(file.pairs.begin(), file.pairs.end(),
            [&, of = of](const SentencePair& pair) { return blank(pair.*of); }))
      fail<IoError>("read_pairs: ", source, ": the ", side, " of every one of its ",
          file.pairs.size(), " pairs is empty: nothing to learn to translate");
  return file;
}

PairsFile read_pairs(const std::string& path) {
  std::error_code error;
  if (!fs::is_regular_file(path, error))
    fail<IoError>("read_pairs: ", path,
        fs::exists(path, error) ? " is not a regular file" : " does not exist");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail<IoError>("read_pairs: cannot open ", path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail<IoError>("read_pairs: cannot read ", path);
  return parse_pairs(bytes, path);
}

LMBatch sample_lm_batch(
    const std::vector<int64_t>& ids, int64_t batch_size, int64_t block_size, Generator& generator) {
  if (batch_size < 1 || block_size < 1)
    fail<ValueError>("sample_lm_batch: batch_size and block_size must be >= 1, got ", batch_size,
        " and ", block_size);
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n < block_size + 1)
    fail<ValueError>("sample_lm_batch: ", n,
        " ids are too few for a window of block_size + 1 = ", block_size + 1,
        " (the inputs and the next token after them)");
  const int64_t B = batch_size, T = block_size;
  std::vector<float> inputs(static_cast<std::size_t>(B * T)), labels(inputs.size());
  constexpr int64_t kExactInFloat = int64_t{1} << 24;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = generator.randint(0, n - T);  // window ids[start .. start + T]
    for (int64_t t = 0; t <= T; ++t) {
      const int64_t id = ids[static_cast<std::size_t>(start + t)];
      if (id < 0 || id >= kExactInFloat)
        fail<ValueError>("sample_lm_batch: id ", id, " at position ", start + t,
            " is outside [0, 2^24), which float32 holds exactly");
      if (t < T) inputs[static_cast<std::size_t>(b * T + t)] = static_cast<float>(id);
      if (t > 0) labels[static_cast<std::size_t>(b * T + t - 1)] = static_cast<float>(id);
    }
  }
  return {tensor(inputs, {B, T}), tensor(labels, {B, T})};
}

namespace {

// A reserved token's id, which the vocabulary must hold.
int64_t reserved_id(const Vocab& vocab, const std::string& token, const char* which) {
  if (!vocab.contains(token))
    fail<ValueError>("make_translation_batch: the ", which, " vocabulary has no ", token,
        " (build it with reserved_tokens {\"<pad>\", \"<bos>\", \"<eos>\"}, as d2l does)");
  return vocab.id(token);
}

// d2l's build_array_nmt for one line: ids + <eos>, truncated or padded to num_steps; and its
// valid length, the steps that are not <pad>.
int64_t padded_line(const std::vector<std::string>& tokens, const Vocab& vocab, int64_t eos,
    int64_t pad, int64_t num_steps, float* out) {
  std::vector<int64_t> ids = vocab.ids(tokens);
  ids.push_back(eos);
  ids = truncate_pad(std::move(ids), num_steps, pad);
  int64_t valid = 0;
  for (int64_t t = 0; t < num_steps; ++t) {
    out[t] = static_cast<float>(ids[static_cast<std::size_t>(t)]);
    valid += ids[static_cast<std::size_t>(t)] != pad;
  }
  return valid;
}

}  // namespace

Batch make_translation_batch(const std::vector<std::vector<std::string>>& source_tokens,
    const std::vector<std::vector<std::string>>& target_tokens, const Vocab& source_vocab,
    const Vocab& target_vocab, int64_t num_steps) {
  if (source_tokens.size() != target_tokens.size())
    fail<ValueError>("make_translation_batch: ", source_tokens.size(), " sources but ",
        target_tokens.size(), " targets");
  if (num_steps < 1)
    fail<ValueError>("make_translation_batch: num_steps must be >= 1, got ", num_steps);
  const int64_t source_pad = reserved_id(source_vocab, "<pad>", "source"),
                source_eos = reserved_id(source_vocab, "<eos>", "source"),
                target_pad = reserved_id(target_vocab, "<pad>", "target"),
                target_bos = reserved_id(target_vocab, "<bos>", "target"),
                target_eos = reserved_id(target_vocab, "<eos>", "target");
  const int64_t B = static_cast<int64_t>(source_tokens.size()), T = num_steps;
  std::vector<float> source(static_cast<std::size_t>(B * T)), labels(source.size()),
      decoder_input(source.size()), source_lens(static_cast<std::size_t>(B)),
      label_lens(source_lens.size());
  for (int64_t b = 0; b < B; ++b) {
    const auto i = static_cast<std::size_t>(b);
    source_lens[i] = static_cast<float>(
        padded_line(source_tokens[i], source_vocab, source_eos, source_pad, T, &source[i * T]));
    label_lens[i] = static_cast<float>(
        padded_line(target_tokens[i], target_vocab, target_eos, target_pad, T, &labels[i * T]));
    // Teacher forcing: the decoder reads <bos>, then the labels shifted one step right.
    decoder_input[i * T] = static_cast<float>(target_bos);
    for (int64_t t = 1; t < T; ++t) decoder_input[i * T + t] = labels[i * T + t - 1];
  }
  return {tensor(source, {B, T}), tensor(source_lens, {B}), tensor(decoder_input, {B, T}),
      tensor(labels, {B, T}), tensor(label_lens, {B})};
}

}  // namespace ag::data
