// Text from files, and the batches made from it: plain UTF-8 text files (one, many, or folders),
// Debian's fortunes, d2l's fra.txt sentence pairs; nanoGPT's random language-model windows and
// d2l's padded translation batches.
//
// Files are read as Python's open(path, encoding="utf-8").read() reads them (what d2l and nanoGPT
// do): strict UTF-8, and "\r\n" or a lone "\r" read as "\n" (universal newlines). A file that is
// not text fails with an IoError naming the file, the byte offset and the line: invalid UTF-8, a
// NUL byte (a binary file), or no bytes at all.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/generator.h"
#include "autograd/tensor.h"
#include "data/batch.h"
#include "data/vocab.h"

namespace ag::data {

// The text of some files, concatenated, and the files in the order read.
struct TextCorpus {
  std::string text;
  std::vector<std::string> files;
};

// Reads and concatenates `paths` in the order given. A path that is a folder contributes every
// regular file under it, recursively, in the byte order of their paths (so "a/b" before "a0");
// symbolic links inside a folder (to files or folders) are skipped, while a path named
// explicitly is followed. IoError for a missing path, a folder without files, a special file, and
// a file that is not text (see above); ValueError for no paths.
TextCorpus read_text_files(const std::vector<std::string>& paths);

// Debian's fortunes (apt-get install fortunes; scripts/install-deps.sh installs it): every
// regular file directly in `folder` whose name does not end in ".dat" (those are strfile's binary
// indexes), symbolic links skipped (the "*.u8" links repeat the files), in name order,
// concatenated. IoError when the folder is missing, naming scripts/install-deps.sh.
TextCorpus read_fortunes(const std::string& folder = "/usr/share/games/fortunes");

// d2l's fra.txt: one pair a line, "source<TAB>target" or "source<TAB>target<TAB>anything" (the
// tatoeba files of manythings.org add an attribution). Lines without a tab — empty lines too,
// but not the empty end after the last newline — are skipped and counted.
//
// d2l's tokens exactly: d2l runs preprocess_nmt on the whole file, then tokenize_nmt, so
//   parse_pairs(preprocess_nmt(text), path), then tokenize_words on each side
// gives its tokens (a test checks it against d2l's Python). preprocess_nmt on each side alone
// differs only for a side that starts with , . ! ? (after a tab or newline d2l puts a space
// before it). Unlike tokenize_nmt, a line with a third column is kept, not dropped.
struct SentencePair {
  std::string source, target;
};
struct PairsFile {
  std::vector<SentencePair> pairs;
  int64_t skipped_lines = 0;  // lines without a tab
  std::string path;
};
// The pairs of a file. IoError naming the file (and the byte offset and line) for invalid UTF-8,
// a binary or empty file, and a file without a single usable line.
PairsFile read_pairs(const std::string& path);
// The same from text already in memory; `source` names it in errors (and becomes .path).
PairsFile parse_pairs(std::string_view text, const std::string& source);

// A language-model batch: inputs[b] are block_size ids from a random place, labels[b] the ids
// one step later (the next token at each position). Both (B, T) float32 holding ids.
struct LMBatch {
  Tensor inputs;  // (B, T)
  Tensor labels;  // (B, T)
};
// nanoGPT's get_batch:
//   ix = torch.randint(len(data) - block_size, (batch_size,))
//   x = torch.stack([data[i:i+block_size] for i in ix])
//   y = torch.stack([data[i+1:i+1+block_size] for i in ix])
// with the starts drawn by generator.randint (one Philox block each), so a seed gives the same
// batches everywhere and the generator's state is the position in the stream. ValueError for
// batch_size or block_size < 1, for fewer than block_size + 1 ids, and for an id outside
// [0, 2^24) (float32 holds integers exactly only up to 2^24).
LMBatch sample_lm_batch(
    const std::vector<int64_t>& ids, int64_t batch_size, int64_t block_size, Generator& generator);

// d2l's translation batch (build_array_nmt, then train_seq2seq's decoder input):
//   lines = [vocab[l] + [vocab['<eos>']] for l in lines]
//   array = [truncate_pad(l, num_steps, vocab['<pad>']) for l in lines]
//   valid_len = (array != vocab['<pad>']).sum(1)
//   dec_input = cat([<bos>] * B, Y[:, :-1])
// source and labels are those arrays, source_valid_lens and label_valid_lens their valid
// lengths, decoder_input <bos> then labels without its last step. Tokens not in a vocabulary
// become <unk>. Each Vocab must hold <pad>, <bos> and <eos> (d2l's reserved tokens); ValueError
// otherwise, for lists of different lengths, and for num_steps < 1.
Batch make_translation_batch(const std::vector<std::vector<std::string>>& source_tokens,
    const std::vector<std::vector<std::string>>& target_tokens, const Vocab& source_vocab,
    const Vocab& target_vocab, int64_t num_steps);

}  // namespace ag::data
