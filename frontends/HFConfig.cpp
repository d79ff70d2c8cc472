//===- HFConfig.cpp - Hugging Face config.json frontend ------------------===//
//
// Defaults are transformers' LlamaConfig / GPT2Config defaults, so a config.json that omits a
// field means what it means to transformers.
//
//===----------------------------------------------------------------------===//

#include "frontends/HFConfig.h"
#include "frontends/Support.h"
#include "frontends/TextLimits.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <optional>

using llvm::Error;
using llvm::StringRef;
using llvm::Twine;
namespace json = llvm::json;

namespace trainc::config {

using detail::formatNumber;
using detail::makeError;

namespace {

/// Reads typed fields of one JSON object. The first error sticks: later reads return their
/// default, and error() reports it.
class FieldReader {
public:
  /// `prefix` qualifies field names in messages ("rope_scaling.").
  FieldReader(const json::Object &object, std::string prefix = "")
      : object(object), prefix(std::move(prefix)) {}

  /// A required positive integer.
  int64_t positive(StringRef key) {
    const json::Value *v = get(key);
    if (!v) {
      fail(Twine("missing field '") + prefix + key + "'");
      return 0;
    }
    return positiveValue(key, *v);
  }

  /// An optional positive integer; absent or null gives std::nullopt.
  std::optional<int64_t> optionalPositive(StringRef key) {
    if (const json::Value *v = get(key))
      return positiveValue(key, *v);
    return std::nullopt;
  }

  double number(StringRef key, double defaultValue) {
    const json::Value *v = get(key);
    if (!v)
      return defaultValue;
    if (std::optional<double> d = v->getAsNumber())
      return *d;
    fail(Twine("field '") + prefix + key + "' must be a number, got " + llvm::formatv("{0}", *v));
    return defaultValue;
  }

  bool boolean(StringRef key, bool defaultValue) {
    const json::Value *v = get(key);
    if (!v)
      return defaultValue;
    if (std::optional<bool> b = v->getAsBoolean())
      return *b;
    fail(Twine("field '") + prefix + key + "' must be true or false, got " +
         llvm::formatv("{0}", *v));
    return defaultValue;
  }

  std::string string(StringRef key, StringRef defaultValue) {
    const json::Value *v = get(key);
    if (!v)
      return defaultValue.str();
    if (std::optional<StringRef> s = v->getAsString())
      return s->str();
    fail(Twine("field '") + prefix + key + "' must be a string, got " + llvm::formatv("{0}", *v));
    return defaultValue.str();
  }

  /// The first error, or "" when there was none.
  const std::string &error() const { return firstError; }
  void fail(const Twine &message) {
    if (firstError.empty())
      firstError = message.str();
  }

private:
  /// The field, or null when absent or JSON null (transformers then uses its default).
  const json::Value *get(StringRef key) const {
    const json::Value *v = object.get(key);
    return v && v->kind() != json::Value::Null ? v : nullptr;
  }

  int64_t positiveValue(StringRef key, const json::Value &v) {
    std::optional<int64_t> i = v.getAsInteger();
    if (!i || *i <= 0) {
      fail(Twine("field '") + prefix + key + "' must be a positive integer, got " +
           llvm::formatv("{0}", v));
      return 0;
    }
    return *i;
  }

  const json::Object &object;
  std::string prefix;
  std::string firstError;
};

/// LlamaConfig (transformers/models/llama/configuration_llama.py).
void readLlama(FieldReader &r, const json::Object &object, ModelConfig &m) {
  m.hidden_size = r.positive("hidden_size");
  m.ffn_hidden_size = r.positive("intermediate_size");
  m.num_layers = r.positive("num_hidden_layers");
  m.num_attention_heads = r.positive("num_attention_heads");
  m.vocab_size = r.positive("vocab_size");
  int64_t kvHeads = r.optionalPositive("num_key_value_heads").value_or(m.num_attention_heads);
  m.group_query_attention = kvHeads != m.num_attention_heads;
  m.num_query_groups = m.group_query_attention ? kvHeads : 0;
  m.kv_channels = r.optionalPositive("head_dim").value_or(0);
  m.max_position_embeddings = r.optionalPositive("max_position_embeddings").value_or(2048);
  m.seq_length = m.max_position_embeddings;
  m.position_embedding_type = "rope";
  m.rotary_base = r.number("rope_theta", 10000.0);
  m.normalization = "RMSNorm";
  m.norm_epsilon = r.number("rms_norm_eps", 1e-6);
  m.swiglu = true;
  m.untie_embeddings_and_output_weights = !r.boolean("tie_word_embeddings", false);
  m.init_method_std = r.number("initializer_range", 0.02);
  m.attention_dropout = r.number("attention_dropout", 0.0);
  m.hidden_dropout = 0.0;

  bool attentionBias = r.boolean("attention_bias", false);
  bool mlpBias = r.boolean("mlp_bias", false);
  if (attentionBias != mlpBias)
    r.fail(Twine("attention_bias ") + (attentionBias ? "true" : "false") + " and mlp_bias " +
           (mlpBias ? "true" : "false") +
           " differ; Megatron's add_bias_linear sets the biases of all linear layers");
  m.add_bias_linear = attentionBias;

  std::string act = r.string("hidden_act", "silu");
  if (act != "silu")
    r.fail("unsupported hidden_act '" + act + "' (expected silu)");

  // rope_scaling: Megatron implements only Llama 3.1's scheme with fixed factors.
  const json::Value *scaling = object.get("rope_scaling");
  if (!scaling || scaling->kind() == json::Value::Null)
    return;
  const json::Object *s = scaling->getAsObject();
  if (!s) {
    r.fail("field 'rope_scaling' must be an object or null");
    return;
  }
  FieldReader sr(*s, "rope_scaling.");
  std::string type = sr.string("rope_type", sr.string("type", ""));
  if (type != "llama3") {
    r.fail("unsupported rope_scaling type '" + type + "' (expected llama3)");
    return;
  }
  m.use_rope_scaling = true;
  m.rope_scaling_factor = sr.number("factor", 8.0);
  for (auto [key, expected] : {std::pair<StringRef, double>{"low_freq_factor", 1.0},
                               {"high_freq_factor", 4.0},
                               {"original_max_position_embeddings", 8192.0}}) {
    double value = sr.number(key, expected);
    if (sr.error().empty() && value != expected)
      sr.fail("rope_scaling." + key + " " + formatNumber(value) +
              " is not supported (Megatron's llama3 scaling uses " + formatNumber(expected) + ")");
  }
  if (!sr.error().empty())
    r.fail(sr.error());
}

/// GPT2Config (transformers/models/gpt2/configuration_gpt2.py).
void readGPT2(FieldReader &r, ModelConfig &m) {
  m.hidden_size = r.positive("n_embd");
  m.num_layers = r.positive("n_layer");
  m.num_attention_heads = r.positive("n_head");
  m.max_position_embeddings = r.positive("n_positions");
  m.seq_length = m.max_position_embeddings;
  m.vocab_size = r.positive("vocab_size");
  m.ffn_hidden_size = r.optionalPositive("n_inner").value_or(0); // 0: 4 * n_embd
  m.position_embedding_type = "learned_absolute";
  m.normalization = "LayerNorm";
  m.norm_epsilon = r.number("layer_norm_epsilon", 1e-5);
  m.swiglu = false;
  m.add_bias_linear = true;
  m.untie_embeddings_and_output_weights = !r.boolean("tie_word_embeddings", true);
  m.init_method_std = r.number("initializer_range", 0.02);

  std::string act = r.string("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    m.openai_gelu = true;
  else if (act == "gelu")
    m.bias_gelu_fusion = false; // HF's exact GELU: Megatron computes it without the fusion
  else
    r.fail("unsupported activation_function '" + act +
           "' (expected gelu_new, gelu_pytorch_tanh or gelu)");

  m.attention_dropout = r.number("attn_pdrop", 0.1);
  m.hidden_dropout = r.number("resid_pdrop", 0.1);
  double embeddingDropout = r.number("embd_pdrop", 0.1);
  if (r.error().empty() && embeddingDropout != m.hidden_dropout)
    r.fail("embd_pdrop " + formatNumber(embeddingDropout) + " differs from resid_pdrop " +
           formatNumber(m.hidden_dropout) + "; Megatron has one hidden_dropout for both");
  if (!r.boolean("scale_attn_weights", true))
    r.fail("scale_attn_weights false is not supported (attention scores are scaled by "
           "1/sqrt(head size))");
  if (r.boolean("scale_attn_by_inverse_layer_idx", false))
    r.fail("scale_attn_by_inverse_layer_idx true is not supported");
}

} // namespace

llvm::Expected<ModelConfig> parseHFConfig(StringRef jsonText, StringRef sourceName) {
  auto fail = [&](const Twine &message) { return makeError(sourceName + ": " + message); };
  if (llvm::Error e = checkJsonDepth(jsonText, sourceName))
    return std::move(e);
  llvm::Expected<json::Value> root = json::parse(jsonText);
  if (!root)
    return fail("invalid JSON: " + llvm::toString(root.takeError()));
  const json::Object *object = root->getAsObject();
  if (!object)
    return fail("expected a JSON object at the top level");

  FieldReader r(*object);
  ModelConfig m;
  std::string modelType = r.string("model_type", "");
  if (!r.error().empty())
    return fail(r.error());
  if (modelType.empty())
    return fail("missing field 'model_type'");
  if (modelType == "llama")
    readLlama(r, *object, m);
  else if (modelType == "gpt2")
    readGPT2(r, m);
  else
    return fail("unsupported model_type '" + modelType + "' (expected llama or gpt2)");
  if (!r.error().empty())
    return fail(r.error());

  ModelConfig check = m;
  if (Error e = check.finalize())
    return fail(llvm::toString(std::move(e)));
  return m;
}

llvm::Expected<ModelConfig> readHFConfigFile(StringRef path) {
  if (Error e = checkRegularFile(path, "--hf-config"))
    return std::move(e);
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return makeError("cannot read '" + path + "': " + buffer.getError().message());
  return parseHFConfig((*buffer)->getBuffer(), path);
}

} // namespace trainc::config
