#include "models/lm_file.h"

#include <algorithm>
#include <set>
#include <utility>

#include "io/model_file_format.h"

namespace ag::lm {

namespace {

using Config = nn::LanguageModelConfig;

// The whole-number settings of a model file, each named once: save_model_config writes them,
// load_model_config reads them back in this order (bounded: a size up to 2^20, a flag 0 or 1), and
// read_model_file types them in a safetensors file's metadata.
struct SizeSetting {
  const char* key;
  int64_t Config::*size;
};
struct FlagSetting {
  const char* key;
  bool Config::*flag;
};
const SizeSetting kSizes[] = {{"config.vocab_size", &Config::vocab_size},
    {"config.num_hiddens", &Config::num_hiddens}, {"config.num_heads", &Config::num_heads},
    {"config.num_layers", &Config::num_layers},
    {"config.ffn_num_hiddens", &Config::ffn_num_hiddens},
    {"config.block_size", &Config::block_size}};
const FlagSetting kFlags[] = {
    {"config.pre_norm", &Config::pre_norm}, {"config.tie_weights", &Config::tie_weights}};

// The settings of the position schemes and the modern block (RoPE, grouped-query heads, RMSNorm,
// SwiGLU). Files written before them have none of these and hold config.learned_positions (0 or
// 1) instead of config.positions: such a file is a sinusoidal or learned model with LayerNorm,
// ReLU FFNs and as many key/value heads as heads, which the defaults below describe.
constexpr const char* kPositions = "config.positions";  // string: sinusoidal, learned, …
constexpr const char* kLearnedPositions = "config.learned_positions";  // 0 | 1, older files
constexpr const char* kRopePairs = "config.rope_pairs";  // string: interleaved | halves
constexpr const char* kRopeBase = "config.rope_base";    // real
constexpr const char* kKvHeads = "config.num_kv_heads";  // integer, 0: num_heads
constexpr const char* kNorm = "config.norm";             // string: layer | rms
constexpr const char* kFeedForward = "config.ffn";       // string: relu | swiglu

std::set<std::string> integer_settings() {
  std::set<std::string> keys{kLearnedPositions, kKvHeads};
  for (const auto& [key, size] : kSizes) keys.insert(key);
  for (const auto& [key, flag] : kFlags) keys.insert(key);
  return keys;
}

}  // namespace

void save_model_config(Checkpoint& c, const nn::LanguageModelConfig& config, Tokenizer tokenizer,
    const data::Vocab& vocab) {
  c.strings["config.task"] = "lm";
  for (const auto& [key, size] : kSizes) c.integers[key] = static_cast<uint64_t>(config.*size);
  for (const auto& [key, flag] : kFlags) c.integers[key] = config.*flag;
  c.reals["config.dropout"] = config.dropout;
  c.strings[kPositions] = nn::position_scheme_name(config.positions);
  c.strings[kRopePairs] = nn::rotary_pairs_name(config.rope_pairs);
  c.reals[kRopeBase] = config.rope_base;
  c.integers[kKvHeads] = static_cast<uint64_t>(config.num_kv_heads);
  c.strings[kNorm] = nn::normalization_name(config.norm);
  c.strings[kFeedForward] = nn::feed_forward_name(config.ffn);
  c.strings["tokenizer"] = tokenizer_name(tokenizer);
  c.strings["vocab"] = vocab.serialize();
}

ModelDescription load_model_config(
    const Checkpoint& c, const std::string& source, bool positional_tables) {
  const std::string file = "model file " + source;
  if (!c.strings.count("config.task"))
    throw CheckpointError(file + ": has no config.task: not an ag model file");
  if (c.string("config.task") != "lm")
    throw CheckpointError(file + ": holds a model of task '" + c.string("config.task") +
                          "', not a language model (ag-train --task lm makes those)");
  ModelDescription d;
  // Sizes are u64 in the file: bounded before they become int64 (check_config bounds them again).
  auto size = [&](const char* name) {
    const uint64_t v = c.integer(name);
    if (v > (uint64_t{1} << 20))
      throw CheckpointError(file + ": " + name + " = " + std::to_string(v) + " is too large");
    return static_cast<int64_t>(v);
  };
  auto flag = [&](const char* name) {
    const uint64_t v = c.integer(name);
    if (v > 1)
      throw CheckpointError(file + ": " + name + " = " + std::to_string(v) + " is not 0 or 1");
    return v == 1;
  };
  for (const auto& [key, size_member] : kSizes) d.config.*size_member = size(key);
  for (const auto& [key, flag_member] : kFlags) d.config.*flag_member = flag(key);
  d.config.dropout = c.real("config.dropout");
  // The positions: config.positions, or an older file's config.learned_positions (not both).
  const bool named = c.strings.count(kPositions) > 0,
             older = c.integers.count(kLearnedPositions) > 0;
  if (named && older)
    throw CheckpointError(file + ": has both " + kPositions + " and the older " +
                          kLearnedPositions + " (one says where the positions are)");
  if (!named && !older)
    throw CheckpointError(
        file + ": has no " + kPositions + " (nor an older file's " + kLearnedPositions + ")");
  try {
    if (named) {
      d.config.positions = nn::parse_position_scheme(c.string(kPositions), kPositions);
    } else {
      d.config.positions =
          flag(kLearnedPositions) ? nn::PositionScheme::learned : nn::PositionScheme::sinusoidal;
    }
    // The later settings, where the file has them (an older file is the defaults' model).
    if (c.strings.count(kRopePairs))
      d.config.rope_pairs = nn::parse_rotary_pairs(c.string(kRopePairs), kRopePairs);
    if (c.reals.count(kRopeBase)) d.config.rope_base = c.real(kRopeBase);
    if (c.integers.count(kKvHeads)) d.config.num_kv_heads = size(kKvHeads);
    if (c.strings.count(kNorm)) d.config.norm = nn::parse_normalization(c.string(kNorm), kNorm);
    if (c.strings.count(kFeedForward))
      d.config.ffn = nn::parse_feed_forward(c.string(kFeedForward), kFeedForward);
    check_config(d.config, /*options=*/false);
    d.tokenizer = parse_tokenizer(c.string("tokenizer"), file);
    d.vocab = data::Vocab::deserialize(c.string("vocab"), file + " (vocab)", d.config.vocab_size);
  } catch (const ValueError& e) {
    throw CheckpointError(file + ": " + e.what());
  }
  // The weights must be those the configuration describes, counted before anything is built.
  uint64_t numbers = 0;
  for (const auto& [name, tensor] : c.tensors_under("model"))
    numbers += static_cast<uint64_t>(tensor.numel());
  const uint64_t expected =
      positional_tables ? state_dict_numbers(d.config) : parameter_count(d.config);
  if (numbers != expected)
    throw CheckpointError(file + ": its configuration describes a model of " +
                          std::to_string(expected) + " numbers, but the file holds " +
                          std::to_string(numbers));
  return d;
}

SaveResult save_model(const std::string& path, const nn::LanguageModel& model, Tokenizer tokenizer,
    const data::Vocab& vocab, CheckpointFormat format) {
  Checkpoint c;
  c.kind = "model";
  save_model_config(c, model.config, tokenizer, vocab);
  return save_model_file(path, model, std::move(c), format);
}

namespace {

const std::set<std::string> kRealSettings = {"config.dropout", kRopeBase};
const std::set<std::string> kStringSettings = {
    "config.task", "tokenizer", "vocab", kPositions, kRopePairs, kNorm, kFeedForward};

// load_model and load_model_bytes, once the file is read.
LoadedModel load_model_file(
    const ModelFile& file, const std::string& path, std::optional<uint64_t> max_bytes) {
  const Checkpoint& c = file.entries;
  LoadedModel loaded;
  loaded.description = load_model_config(c, path, /*positional_tables=*/!file.safetensors);
  loaded.memory = estimate_inference_bytes(loaded.description.config);
  try {
    check_memory(loaded.memory, max_bytes ? *max_bytes : available_memory_bytes(),
        "its model (config.num_hiddens = " + std::to_string(loaded.description.config.num_hiddens) +
            ", config.num_layers = " + std::to_string(loaded.description.config.num_layers) + ")",
        max_bytes ? "allowed (--max-memory)" : "available (--max-memory sets another limit)");
  } catch (const ValueError& e) {
    throw CheckpointError("model file " + path + ": " + e.what());
  }
  loaded.model = std::make_shared<nn::LanguageModel>(loaded.description.config);
  load_model_weights(*loaded.model, file, path);
  loaded.model->eval();
  return loaded;
}

}  // namespace

LoadedModel load_model(const std::string& path, std::optional<uint64_t> max_bytes) {
  return load_model_file(
      read_model_file(path, integer_settings(), kRealSettings, kStringSettings), path, max_bytes);
}

LoadedModel load_model_bytes(
    std::string_view bytes, const std::string& source, std::optional<uint64_t> max_bytes) {
  return load_model_file(
      parse_model_file(bytes, source, integer_settings(), kRealSettings, kStringSettings), source,
      max_bytes);
}

// ---- memory -------------------------------------------------------------------------------------

namespace {
// The numbers a training step holds at its peak for N = B·T positions (the header's formula).
double activation_numbers(const nn::LanguageModelConfig& c, double B) {
  const double T = static_cast<double>(c.block_size), D = static_cast<double>(c.num_hiddens);
  const double F = static_cast<double>(c.ffn_num_hiddens), H = static_cast<double>(c.num_heads);
  const double L = static_cast<double>(c.num_layers), V = static_cast<double>(c.vocab_size);
  // SwiGLU keeps three vectors of F per position (w1's, w3's and their product), ReLU's FFN two.
  const double ffn_vectors = c.ffn == nn::FeedForward::swiglu ? 3 : 2;
  return B * T * (L * (12 * D + ffn_vectors * F + 3 * H * T) + 3 * V);
}
}  // namespace

double estimate_text_bytes(uint64_t text_bytes, Tokenizer tokenizer) {
  return static_cast<double>(text_bytes) * (tokenizer == Tokenizer::chars ? 12.0 : 16.0);
}

MemoryEstimate estimate_training_bytes(
    const nn::LanguageModelConfig& c, int64_t batch_size, int64_t eval_batch, bool checkpoints) {
  const double P = static_cast<double>(parameter_count(c));
  MemoryEstimate e;
  e.weights = 4 * static_cast<double>(state_dict_numbers(c));
  e.gradients = 4 * P;
  e.optimizer = 8 * P;
  e.activations = 4 * activation_numbers(c, static_cast<double>(batch_size));
  e.evaluation = 2 * 4 * activation_numbers(c, static_cast<double>(eval_batch));
  e.saving = checkpoints ? 3 * 12 * P : 0;
  return e;
}

double estimate_sampling_bytes(
    const nn::LanguageModelConfig& c, int64_t length, const data::Vocab& vocab) {
  std::size_t longest_token = 0;
  for (const std::string& token : vocab.id_to_token())
    longest_token = std::max(longest_token, token.size());
  const double per_token = 16 + 32 + 2 * (static_cast<double>(longest_token) + 1);
  return 4 * activation_numbers(c, 1) + static_cast<double>(length) * per_token;
}

MemoryEstimate estimate_inference_bytes(const nn::LanguageModelConfig& c) {
  MemoryEstimate e;
  e.weights = 4 * static_cast<double>(state_dict_numbers(c));
  e.activations = 4 * activation_numbers(c, 1);
  return e;
}

}  // namespace ag::lm
