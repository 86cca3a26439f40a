// ag-fuzz-seeds DIR: writes the seed corpus of each fuzz target into DIR/<target>/ —
//   checkpoint/   a few valid checkpoints in both encodings, as whole files and as payloads behind
//                 the selector byte (see fuzz_input.h)
//   safetensors/  files of every dtype ag reads, with metadata, a scalar and an empty tensor
//   npy/          arrays of every rank and dtype ag reads, and one in Fortran order
//   text/         UTF-8 text, vocabularies and sentence pairs behind their selector byte
//   model-file/   small models of each kind in both formats, behind their selector byte
// Run by tests/fuzz/run.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "autograd/ops.h"
#include "data/text.h"
#include "fuzz_input.h"
#include "io/checkpoint.h"
#include "io/npy.h"
#include "io/optimizer_state.h"
#include "io/safetensors.h"
#include "models/lm_file.h"
#include "models/seq2seq_file.h"
#include "models/seq2seq_translation.h"
#include "nn/language_model.h"

namespace {

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "ag-fuzz-seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

ag::Checkpoint small() {
  ag::Checkpoint c;
  c.kind = "fuzz";
  c.tensors["layer.weight"] =
      ag::tensor({1.5, -0.0, 1e-40, 3.4e38, -2.0, 0.1}, {2, 3}, ag::float32);
  c.tensors["layer.bias"] = ag::tensor({0.1, 1.0 / 3.0, 5e-324, -1e300}, {4}, ag::float64);
  c.tensors["scale"] = ag::scalar_tensor(2.5, ag::float32);
  c.tensors["empty"] = ag::zeros({0, 3}, ag::float64);
  c.tensors["ids"] = ag::tensor(std::vector<int64_t>{(int64_t{1} << 53) + 1, -1, INT64_MAX});
  c.tensors["mask"] = ag::tensor(std::vector<bool>{true, false, true, true}, {2, 2});
  c.integers["step"] = 12345;
  c.integers["seed"] = std::numeric_limits<uint64_t>::max();
  c.reals["lr"] = 1e-3;
  c.reals["inf"] = std::numeric_limits<double>::infinity();
  c.reals["nan"] = std::numeric_limits<double>::quiet_NaN();
  c.strings["name"] = "h\xc3\xa9llo \"[{";
  c.strings["empty"] = "";
  return c;
}

ag::Checkpoint empty() {
  ag::Checkpoint c;
  c.kind = "";
  return c;
}

ag::Checkpoint one_tensor() {
  ag::Checkpoint c;
  c.kind = "model";
  c.tensors["w"] = ag::tensor({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}, ag::float64);
  return c;
}

// AdamW's state in two groups after one step, as ag-train's checkpoints hold it ("optimizer.…").
ag::Checkpoint optimizer_state() {
  ag::Generator g(1);
  const ag::Tensor w = ag::randn({2, 3}, g).requires_grad_();
  const ag::Tensor b = ag::randn({3}, g).requires_grad_();
  ag::optim::AdamW adamw(std::vector<ag::optim::ParamGroup>{{{w}, {}, {}}, {{b}, 0.01, 0.0}}, 0.1);
  w.set_grad(ag::randn({2, 3}, g));
  adamw.step();
  ag::Checkpoint c;
  c.kind = "ag-train";
  ag::put_optimizer_state(c, adamw.state_dict());
  return c;
}

// A safetensors file from its header and data, for the dtypes ag does not write (F16, BF16).
std::string safetensors_of(const std::string& header, const std::string& data) {
  const uint64_t length = header.size();
  return std::string(reinterpret_cast<const char*>(&length), 8) + header + data;
}

int write_safetensors_seeds(const std::string& dir) {
  ag::Generator g(2);
  ag::SafetensorsWriteOptions options;
  options.metadata = {{"format", "pt"}, {"config", "{\"num_hiddens\": 32}"}};
  write(dir + "/mixed.safetensors",
      ag::serialize_safetensors(
          {{"encoder.W_q.weight", ag::randn({3, 4}, g)}, {"b", ag::randn({2}, g, ag::float64)},
              {"ids", ag::tensor(std::vector<int64_t>{1, 2, (int64_t{1} << 53) + 1})},
              {"mask", ag::tensor(std::vector<bool>{true, false, true}, {3, 1})},
              {"scalar", ag::scalar_tensor(1.5, ag::float32)},
              {"empty", ag::zeros({0, 2}, ag::float32)}},
          options));
  write(dir + "/empty.safetensors", ag::serialize_safetensors({}));
  const uint16_t halves[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x3F80, 0xBF00};
  write(dir + "/half.safetensors",
      safetensors_of(R"({"h":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}})",
          std::string(reinterpret_cast<const char*>(halves), sizeof halves)));
  return 3;
}

int write_npy_seeds(const std::string& dir) {
  ag::Generator g(3);
  write(dir + "/f4.npy", ag::serialize_npy(ag::randn({2, 3}, g)));
  write(dir + "/f8-scalar.npy", ag::serialize_npy(ag::scalar_tensor(3.25, ag::float64)));
  write(dir + "/i8.npy", ag::serialize_npy(ag::tensor(std::vector<int64_t>{-1, 0, INT64_MIN})));
  write(dir + "/b1.npy",
      ag::serialize_npy(ag::tensor(std::vector<bool>{false, true, true, false}, {2, 2})));
  write(dir + "/empty.npy", ag::serialize_npy(ag::zeros({2, 0, 1}, ag::float32)));
  // The 2 × 2 array [[1, 2], [3, 4]] in Fortran order, as NumPy writes it.
  std::string fortran = ag::serialize_npy(ag::tensor({1, 3, 2, 4}, {2, 2}, ag::float64));
  fortran.replace(fortran.find("False"), 5, "True ");
  write(dir + "/fortran.npy", fortran);
  return 6;
}

// Each seed is its selector byte (fuzz_input.h) and the text.
int write_text_seeds(const std::string& dir) {
  using namespace ag_fuzz::text;
  const auto seed = [&](const std::string& name, unsigned char selector, const std::string& text) {
    write(dir + "/" + name, std::string(1, static_cast<char>(selector)) + text);
  };
  seed("ascii.utf8", kUtf8, "Go.\tVa !\nHi, there!\n");
  seed("french.utf8", kUtf8,
      "\xC3\x89T\xC3\x89, \xC5\x92UVRE\xE2\x80\xAF! \xC3\x80 l'aide\xC2\xA0?");
  seed("greek.utf8", kUtf8, "\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3. \xC4\xB0 \xF0\x9F\x98\x80");
  const ag::data::Vocab words(std::vector<std::string>{"go", ".", "go", "", "a b", "\\n\n"}, 0,
      {"<pad>", "<bos>", "<eos>"});
  seed("words.vocab", kVocab, words.serialize());
  seed("chars.vocab", kVocab,
      ag::data::Vocab(ag::data::tokenize_chars("h\xC3\xA9 l\nlo\\")).serialize());
  seed("fra.pairs", kPairs, "Go.\tVa !\nno tab\n\nHi.\tSalut !\tCC-BY 2.0\r\n");
  seed("one.pairs", kPairs, "a\tb");
  return 7;
}

// Small models of each kind, saved by the library's own writers in both formats, read back as
// bytes behind their selector byte (fuzz_input.h): a toy task's, a translation model with its two
// vocabularies, and language models with each tokenizer.
int write_model_file_seeds(const std::string& dir) {
  using namespace ag_fuzz::model_file;
  int written = 0;
  const auto seed = [&](const std::string& name, unsigned char kind, const auto& save) {
    for (const bool safetensors : {false, true}) {
      const std::string path = dir + "/" + name + (safetensors ? ".safetensors" : ".agm");
      save(path);
      std::ifstream in(path, std::ios::binary);
      const std::string bytes(
          (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto selector = static_cast<char>(kind | (safetensors ? kSafetensors : 0));
      write(path, selector + bytes);
      ++written;
    }
  };
  ag::manual_seed(0);
  ag::seq2seq::ModelConfig toy;
  toy.vocab_size = 20;
  toy.num_hiddens = toy.ffn_num_hiddens = 8;
  toy.num_heads = 2;
  toy.num_layers = 1;
  toy.dropout = 0.0;
  seed("reverse", 0, [&](const std::string& path) {
    ag::seq2seq::save_model(path, *ag::seq2seq::make_transformer(toy), "reverse", toy);
  });
  const ag::seq2seq::TranslationVocabs vocabs{
      ag::data::Vocab(std::vector<std::string>{"go", ".", "hi"}, 0, {"<pad>", "<bos>", "<eos>"}),
      ag::data::Vocab(std::vector<std::string>{"va", "!", "salut"}, 0, {"<pad>", "<bos>", "<eos>"}),
      6};
  ag::seq2seq::ModelConfig translation = toy;
  translation.vocab_size = vocabs.source.size();
  translation.target_vocab_size = vocabs.target.size();
  seed("translate", 0, [&](const std::string& path) {
    ag::seq2seq::save_model(path, *ag::seq2seq::make_transformer(translation),
        ag::seq2seq::kTranslateTask, translation, ag::CheckpointFormat::binary, &vocabs);
  });
  for (const auto tokenizer : {ag::lm::Tokenizer::chars, ag::lm::Tokenizer::words}) {
    const ag::data::Vocab vocab(tokenizer == ag::lm::Tokenizer::chars
                                    ? ag::data::tokenize_chars("hello, world\n")
                                    : std::vector<std::string>{"hello", ",", "world", "\n"});
    ag::nn::LanguageModelConfig config;
    config.vocab_size = vocab.size();
    config.num_hiddens = 8;
    config.num_heads = 2;
    config.num_layers = 1;
    config.ffn_num_hiddens = 8;
    config.block_size = 8;
    config.dropout = 0.0;
    config.tie_weights = tokenizer == ag::lm::Tokenizer::words;
    if (tokenizer == ag::lm::Tokenizer::words) {  // the Llama-style block's settings
      config.pre_norm = true;
      config.positions = ag::nn::PositionScheme::rope;
      config.rope_pairs = ag::RotaryPairs::halves;
      config.num_kv_heads = 1;
      config.norm = ag::nn::Normalization::rms;
      config.ffn = ag::nn::FeedForward::swiglu;
    }
    seed(std::string("lm-") + ag::lm::tokenizer_name(tokenizer), kLanguageModel,
        [&](const std::string& path) {
          ag::lm::save_model(path, ag::nn::LanguageModel(config), tokenizer, vocab);
        });
  }
  return written;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ag-fuzz-seeds DIR\n");
    return 2;
  }
  const std::string root = argv[1];
  for (const char* target : {"checkpoint", "safetensors", "npy", "text", "model-file"})
    std::filesystem::create_directories(root + "/" + target);
  const std::string dir = root + "/checkpoint";
  const std::pair<const char*, ag::Checkpoint> checkpoints[] = {{"small", small()},
      {"empty", empty()}, {"one-tensor", one_tensor()}, {"optimizer", optimizer_state()}};
  int written = 0;
  for (const auto& [name, c] : checkpoints) {
    for (ag::CheckpointFormat format : {ag::CheckpointFormat::binary, ag::CheckpointFormat::json}) {
      const bool json = format == ag::CheckpointFormat::json;
      const std::string file = ag::serialize_checkpoint(c, format);
      const std::string stem = dir + "/" + name + (json ? "-json" : "-binary");
      write(stem + ".agc", file);  // starts with 0x89: read as a whole file
      const char selector =
          static_cast<char>(json ? ag_fuzz::kJsonPayload : ag_fuzz::kBinaryPayload);
      write(stem + ".payload", selector + file.substr(28));
      written += 2;
    }
  }
  written += write_safetensors_seeds(root + "/safetensors");
  written += write_npy_seeds(root + "/npy");
  written += write_text_seeds(root + "/text");
  written += write_model_file_seeds(root + "/model-file");
  std::printf("ag-fuzz-seeds: wrote %d seeds to %s/{checkpoint,safetensors,npy,text,model-file}\n",
      written, root.c_str());
  return 0;
}
