// ag-generate — continues a prompt with a language model trained by ag-train --task lm.
//
//   ag-train --task lm --save-model fortunes.agm
//   ag-generate --model fortunes.agm --prompt "The meaning of life" --max-new 300
//   ag-generate --model fortunes.agm --prompt "Q:" --temperature 0 --max-new 80   # greedy
//
// The model file carries the configuration, the tokenizer (char or word) and the vocabulary, so
// the prompt is tokenized as the training text was; a prompt token the vocabulary lacks becomes
// <unk>, with a warning on stderr. Generation runs with the key/value cache (models/lm.h: each
// new token computes only its own query, key and value; past the block the cache of a model with
// relative positions — rope, alibi, none — slides, that of an absolute one is rebuilt each step);
// --no-cache recomputes the whole context at every step instead, for comparison — the same tokens
// while the context fits in the block.
// The text goes to stdout, the speed (tokens/s) to stderr.
// Exit codes (docs/training.md): 0 done; 1 the file cannot be loaded (or is not a language model,
// or would need more memory than is available or than --max-memory); 2 a bad option (an empty
// prompt, --max-new outside 0–10^6, a temperature < 0 or NaN, --top-k < 0 or above the vocabulary's size).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "autograd/parallel.h"
#include "models/lm.h"
#include "models/lm_file.h"
#include "models/memory_budget.h"
#include "training/cli.h"

// The most tokens one call generates: every token is kept until the text is printed, so an
// unbounded --max-new would be an unbounded allocation (and hours of work).
constexpr int64_t kMaxNewTokens = 1000000;

int main(int argc, char** argv) {
  std::string model_path, prompt, max_memory;
  int64_t max_new = 200, top_k = 0;
  double temperature = 0.8;
  uint64_t seed = 0;
  int threads = 1;
  bool no_cache = false;
  CLI::App app{"ag-generate: continues a prompt with a language model saved by ag-train --task lm"};
  app.add_option("--model", model_path,
         "a model file (ag-train --task lm --save-model, ag's format or .safetensors) or an "
         "ag-train --task lm checkpoint")
      ->required();
  app.add_option("--prompt", prompt, "the text to continue (UTF-8)")->required();
  ag::training::add_whole_number(app, "--max-new", max_new, "tokens to generate");
  app.add_option("--temperature", temperature,
         "divides the logits before sampling; 0: greedy (the most likely token)")
      ->capture_default_str();
  ag::training::add_whole_number(
      app, "--top-k", top_k, "sample among the k most likely tokens only (0: all)");
  ag::training::add_whole_number(app, "--seed", seed, "seeds the sampling");
  ag::training::add_whole_number(app, "--threads", threads, "threads of ag's pool");
  app.add_flag("--no-cache", no_cache,
      "recompute the whole context at each step instead of using the key/value cache");
  ag::training::add_max_memory(app, max_memory, "model");
  return ag::training::run_main("ag-generate", app, argc, argv, [&] {
    std::string problem;
    if (prompt.empty())
      problem = "--prompt is empty (generation continues a text of at least one token)";
    else if (max_new < 0 || max_new > kMaxNewTokens)
      problem =
          "--max-new " + std::to_string(max_new) + " is outside 0-" + std::to_string(kMaxNewTokens);
    else if (!(temperature >= 0) || !std::isfinite(temperature))
      problem = "--temperature " + std::to_string(temperature) + " must be a number >= 0";
    else if (top_k < 0)
      problem = "--top-k " + std::to_string(top_k) + " is negative";
    else if (threads < 1 || threads > ag::max_num_threads())
      problem = "--threads " + std::to_string(threads) + " is outside 1-" +
                std::to_string(ag::max_num_threads());
    else if (const std::string bad = ag::data::utf8_problem(prompt, "--prompt"); !bad.empty())
      problem = bad;
    std::optional<uint64_t> memory_limit;
    try {
      if (problem.empty() && !max_memory.empty()) memory_limit = ag::parse_byte_size(max_memory);
    } catch (const ag::ValueError& e) {
      problem = std::string("--max-memory: ") + e.what();
    }
    if (!problem.empty()) throw ag::training::UsageError(problem);
    ag::set_num_threads(threads);

    // The configuration, vocabulary and memory are checked before the model is built (exit 1).
    const ag::lm::LoadedModel loaded = ag::lm::load_model(model_path, memory_limit);
    const ag::data::Vocab& vocab = loaded.description.vocab;
    // And the memory of the generation itself, before it starts (exit 2).
    ag::MemoryEstimate need = loaded.memory;
    need.evaluation = ag::lm::estimate_sampling_bytes(loaded.description.config, max_new, vocab);
    const uint64_t limit = memory_limit.value_or(ag::available_memory_bytes());
    try {
      ag::check_memory(need, limit, "generating --max-new " + std::to_string(max_new) + " tokens",
          memory_limit ? "allowed (--max-memory)" : "available (--max-memory sets another limit)");
    } catch (const ag::ValueError& e) {
      throw ag::training::UsageError(e.what());
    }
    ag::limit_cache_to_headroom(need, limit);
    const ag::lm::Tokenizer tokenizer = loaded.description.tokenizer;
    if (top_k > vocab.size())
      throw ag::training::UsageError("--top-k " + std::to_string(top_k) +
                                     " is above the vocabulary's " + std::to_string(vocab.size()) +
                                     " tokens");
    const std::vector<std::string> tokens = ag::lm::tokenize(prompt, tokenizer).tokens;
    if (tokens.empty())
      throw ag::training::UsageError(
          "--prompt \"" + prompt + "\" holds no " + ag::lm::tokenizer_name(tokenizer) + " token");
    std::string unknown;
    int64_t unknown_count = 0;
    for (const std::string& token : tokens)
      if (!vocab.contains(token)) unknown += (unknown_count++ == 0 ? "'" : ", '") + token + "'";
    if (unknown_count > 0)
      std::cerr << "ag-generate: warning: " << unknown_count << " prompt token"
                << (unknown_count == 1 ? " is" : "s are") << " not in the model's vocabulary and "
                << (unknown_count == 1 ? "becomes" : "become") << " <unk>: " << unknown << "\n";

    ag::Generator generator(seed);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int64_t> generated = ag::lm::generate(
        *loaded.model, vocab.ids(tokens), max_new, {temperature, top_k}, generator, !no_cache);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::vector<std::string> text = tokens;
    for (const std::string& token : vocab.tokens(generated)) text.push_back(token);
    std::printf("%s\n", ag::lm::detokenize(text, tokenizer).c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "ag-generate: %lld tokens in %.3f s (%.1f tokens/s, %s)\n",
        static_cast<long long>(generated.size()), seconds,
        seconds > 0 ? static_cast<double>(generated.size()) / seconds : 0.0,
        no_cache ? "no cache" : "key/value cache");
    return 0;
  });
}
