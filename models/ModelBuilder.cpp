//===- ModelBuilder.cpp - GPT and Llama on the model dialect ---------------===//

#include "models/ModelBuilder.h"

#include "dialects/Model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace mlir::trainc;
using ::trainc::config::ModelConfig;

namespace {

class ModelIRBuilder {
public:
  ModelIRBuilder(ModuleOp module, const ModelConfig &cfg, const BuildOptions &o)
      : module(module), cfg(cfg), opts(o), b(module.getContext()),
        loc(FileLineColLoc::get(module.getContext(), cfg.family + ".model", 0, 0)) {
    elt = o.dtype == "fp64" ? Type(b.getF64Type()) : Type(b.getF32Type());
    stats = model::statsElementType(elt);
  }

  LogicalResult build();

private:
  struct Param {
    std::string name;
    SmallVector<int64_t> shape;
    std::string init;
    double std = 0;
    bool noWd = false;
  };
  /// Declares a parameter; returns its index (the block argument index).
  unsigned param(std::string name, SmallVector<int64_t> shape, std::string init, double std = 0,
                 bool noWd = false) {
    params.push_back({std::move(name), std::move(shape), std::move(init), std, noWd});
    return unsigned(params.size() - 1);
  }
  RankedTensorType t(ArrayRef<int64_t> shape, Type e = {}) {
    return RankedTensorType::get(shape, e ? e : elt);
  }
  /// A location naming the layer and op, e.g. llama.model:3:0 "decoder.layers.3.mlp".
  Location at(const std::string &what, int line) {
    return NameLoc::get(b.getStringAttr(what),
                        FileLineColLoc::get(b.getContext(), cfg.family + ".model", line, 0));
  }

  ModuleOp module;
  const ModelConfig &cfg;
  BuildOptions opts;
  OpBuilder b;
  Location loc;
  Type elt, stats;
  std::vector<Param> params;
};

LogicalResult ModelIRBuilder::build() {
  const int64_t B = opts.microBatchSize, S = cfg.seq_length, H = cfg.hidden_size;
  const int64_t NH = cfg.num_attention_heads, NG = cfg.num_query_groups, D = cfg.kv_channels;
  const int64_t F = cfg.ffn_hidden_size, V = cfg.padded_vocab_size, L = cfg.num_layers;
  const bool rope = cfg.position_embedding_type == "rope";
  const bool rms = cfg.normalization == "RMSNorm";
  const bool bias = cfg.add_bias_linear;
  const double std = cfg.init_method_std, outStd = std / std::sqrt(2.0 * double(L));
  if (cfg.attention_dropout > 0)
    return module.emitError() << "not supported yet: --attention-dropout " << cfg.attention_dropout
                              << " (the fused attention kernel has no dropout; pass "
                                 "--attention-dropout 0.0)";
  if (cfg.rotary_percent != 1.0 && rope && int64_t(D * cfg.rotary_percent) % 2)
    return module.emitError() << "--rotary-percent " << cfg.rotary_percent
                              << " gives an odd rotary dimension for head dim " << D;
  const bool dropout = cfg.hidden_dropout > 0;

  // Parameters in Megatron's state-dict order.
  unsigned wte = param("embedding.word_embeddings.weight", {V, H}, "normal", std);
  unsigned wpe = rope ? 0 : param("embedding.position_embeddings.weight",
                                  {cfg.max_position_embeddings, H}, "normal", std);
  struct Layer {
    unsigned ln1, ln1b, wq, wk, wv, bq, bk, bv, wo, bo, ln2, ln2b, w1, b1, w2, b2;
  };
  std::vector<Layer> layers(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) {
    std::string p = "decoder.layers." + std::to_string(l) + ".";
    Layer &y = layers[l];
    y.ln1 = param(p + "input_layernorm.weight", {H}, "ones", 0, true);
    y.ln1b = rms ? 0 : param(p + "input_layernorm.bias", {H}, "zeros", 0, true);
    y.wq = param(p + "self_attention.linear_q.weight", {NH * D, H}, "normal", std);
    y.wk = param(p + "self_attention.linear_k.weight", {NG * D, H}, "normal", std);
    y.wv = param(p + "self_attention.linear_v.weight", {NG * D, H}, "normal", std);
    if (bias) {
      y.bq = param(p + "self_attention.linear_q.bias", {NH * D}, "zeros", 0, true);
      y.bk = param(p + "self_attention.linear_k.bias", {NG * D}, "zeros", 0, true);
      y.bv = param(p + "self_attention.linear_v.bias", {NG * D}, "zeros", 0, true);
    }
    y.wo = param(p + "self_attention.linear_proj.weight", {H, NH * D}, "normal", outStd);
    if (bias)
      y.bo = param(p + "self_attention.linear_proj.bias", {H}, "zeros", 0, true);
    y.ln2 = param(p + "pre_mlp_layernorm.weight", {H}, "ones", 0, true);
    y.ln2b = rms ? 0 : param(p + "pre_mlp_layernorm.bias", {H}, "zeros", 0, true);
    int64_t fc1 = cfg.swiglu ? 2 * F : F;
    y.w1 = param(p + "mlp.linear_fc1.weight", {fc1, H}, "normal", std);
    if (bias)
      y.b1 = param(p + "mlp.linear_fc1.bias", {fc1}, "zeros", 0, true);
    y.w2 = param(p + "mlp.linear_fc2.weight", {H, F}, "normal", outStd);
    if (bias)
      y.b2 = param(p + "mlp.linear_fc2.bias", {H}, "zeros", 0, true);
  }
  unsigned lnf = param("decoder.final_layernorm.weight", {H}, "ones", 0, true);
  unsigned lnfb = rms ? 0 : param("decoder.final_layernorm.bias", {H}, "zeros", 0, true);
  unsigned wout = cfg.untie_embeddings_and_output_weights
                      ? param("output_layer.weight", {V, H}, "normal", std)
                      : wte;

  // The function: parameters, then the microbatch inputs.
  SmallVector<Type> argTypes;
  for (const Param &p : params)
    argTypes.push_back(t(p.shape));
  Type i32 = b.getI32Type();
  std::vector<std::string> inputs = {"tokens", "position_ids", "labels", "loss_mask"};
  argTypes.push_back(t({B, S}, i32));
  argTypes.push_back(t({B, S}, i32));
  argTypes.push_back(t({B, S}, i32));
  argTypes.push_back(t({B, S}, stats));
  if (dropout) {
    inputs.push_back("rng");
    argTypes.push_back(t({3}, b.getI64Type()));
  }
  Type scalar = t({}, stats);
  b.setInsertionPointToEnd(module.getBody());
  auto fn = b.create<func::FuncOp>(loc, opts.functionName,
                                   b.getFunctionType(argTypes, {scalar, scalar}));
  // All argument attributes at once (setArgAttr rebuilds the whole list: quadratic in layers).
  // Each parameter's attributes once, as a module-level declaration; the arguments name it.
  SmallVector<DictionaryAttr> argAttrs;
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(fn);
    for (const Param &p : params) {
      b.create<model::ParameterOp>(loc, b.getStringAttr(p.name), TypeAttr::get(t(p.shape)),
                                   b.getStringAttr(p.init),
                                   p.init == "normal" ? b.getF64FloatAttr(p.std) : FloatAttr(),
                                   p.noWd ? b.getUnitAttr() : UnitAttr());
      argAttrs.push_back(
          b.getDictionaryAttr({b.getNamedAttr("model.param", b.getStringAttr(p.name))}));
    }
  }
  for (const std::string &name : inputs)
    argAttrs.push_back(
        b.getDictionaryAttr({b.getNamedAttr("model.input", b.getStringAttr(name))}));
  fn.setAllArgAttrs(argAttrs);
  Block *body = fn.addEntryBlock();
  b.setInsertionPointToStart(body);
  auto P = [&](unsigned i) -> Value { return body->getArgument(i); };
  unsigned in0 = unsigned(params.size());
  Value tokens = body->getArgument(in0), pos = body->getArgument(in0 + 1);
  Value labels = body->getArgument(in0 + 2), mask = body->getArgument(in0 + 3);
  Value rng = dropout ? body->getArgument(in0 + 4) : Value();
  int64_t opId = 0;
  auto drop = [&](Value x, Location l) -> Value {
    if (!dropout)
      return x;
    return b.create<model::DropoutOp>(l, x.getType(), x, rng, b.getF64FloatAttr(cfg.hidden_dropout),
                                      b.getI64IntegerAttr(++opId));
  };
  auto norm = [&](Value x, unsigned w, unsigned bb, Location l) -> Value {
    Type rows = t({B * S}, stats);
    if (rms)
      return b.create<model::RMSNormOp>(l, TypeRange{x.getType(), rows}, x, P(w),
                                        b.getF64FloatAttr(cfg.norm_epsilon))
          .getResult();
    return b.create<model::LayerNormOp>(l, TypeRange{x.getType(), rows, rows}, x, P(w), P(bb),
                                        b.getF64FloatAttr(cfg.norm_epsilon))
        .getResult();
  };
  auto linear = [&](Value x, unsigned w, std::optional<unsigned> bb, int64_t out, Location l) {
    SmallVector<int64_t> shape(cast<RankedTensorType>(x.getType()).getShape());
    shape.back() = out;
    return b.create<model::LinearOp>(l, t(shape), x, P(w), bb ? P(*bb) : Value()).getResult();
  };
  auto reshape = [&](Value x, ArrayRef<int64_t> shape, Location l) -> Value {
    return b.create<model::ReshapeOp>(l, t(shape, cast<RankedTensorType>(x.getType()).getElementType()), x);
  };

  int line = 1;
  Location embLoc = at("embedding", line++);
  Value x = b.create<model::EmbeddingOp>(embLoc, t({B, S, H}), P(wte), tokens, b.getI64IntegerAttr(0));
  if (!rope) {
    Value pe = b.create<model::EmbeddingOp>(embLoc, t({B, S, H}), P(wpe), pos, b.getI64IntegerAttr(0));
    x = b.create<model::AddOp>(embLoc, x.getType(), x, pe);
  }
  x = drop(x, embLoc);
  int64_t rd = int64_t(double(D) * cfg.rotary_percent);
  for (int64_t l = 0; l < L; ++l) {
    std::string p = "decoder.layers." + std::to_string(l) + ".";
    const Layer &y = layers[l];
    Location la = at(p + "self_attention", line++);
    Value h = norm(x, y.ln1, y.ln1b, at(p + "input_layernorm", line++));
    auto ob = [&](unsigned i) { return bias ? std::optional<unsigned>(i) : std::nullopt; };
    Value q = reshape(linear(h, y.wq, ob(y.bq), NH * D, la), {B, S, NH, D}, la);
    Value k = reshape(linear(h, y.wk, ob(y.bk), NG * D, la), {B, S, NG, D}, la);
    Value v = reshape(linear(h, y.wv, ob(y.bv), NG * D, la), {B, S, NG, D}, la);
    if (rope) {
      q = b.create<model::RopeOp>(la, q.getType(), q, pos, b.getF64FloatAttr(cfg.rotary_base),
                                  b.getI64IntegerAttr(rd == D ? 0 : rd));
      k = b.create<model::RopeOp>(la, k.getType(), k, pos, b.getF64FloatAttr(cfg.rotary_base),
                                  b.getI64IntegerAttr(rd == D ? 0 : rd));
    }
    auto attn = b.create<model::AttentionOp>(la, TypeRange{q.getType(), t({B, NH, S}, stats)}, q,
                                             k, v, b.getBoolAttr(true), b.getF64FloatAttr(0.0));
    Value o = reshape(attn.getResult(), {B, S, NH * D}, la);
    Value a = drop(linear(o, y.wo, ob(y.bo), H, la), la);
    x = b.create<model::AddOp>(la, x.getType(), x, a);
    Location lm = at(p + "mlp", line++);
    Value h2 = norm(x, y.ln2, y.ln2b, at(p + "pre_mlp_layernorm", line++));
    Value u = linear(h2, y.w1, ob(y.b1), cfg.swiglu ? 2 * F : F, lm);
    Value g = cfg.swiglu ? Value(b.create<model::SwigluOp>(lm, t({B, S, F}), u))
                         : Value(b.create<model::GeluOp>(lm, u.getType(), u,
                                                          b.getBoolAttr(cfg.openai_gelu)));
    Value f = drop(linear(g, y.w2, ob(y.b2), H, lm), lm);
    x = b.create<model::AddOp>(lm, x.getType(), x, f);
  }
  Location lo = at("output_layer", line++);
  Value hf = norm(x, lnf, lnfb, at("decoder.final_layernorm", line++));
  Value logits = reshape(linear(hf, wout, std::nullopt, V, lo), {B * S, V}, lo);
  Location lc = at("loss", line++);
  auto ce = b.create<model::CrossEntropyOp>(
      lc, TypeRange{scalar, scalar, t({B * S}, stats)}, logits, reshape(labels, {B * S}, lc),
      reshape(mask, {B * S}, lc), b.getI64IntegerAttr(0),
      b.getI64IntegerAttr(V == cfg.vocab_size ? -1 : cfg.vocab_size));
  b.create<func::ReturnOp>(lc, ValueRange{ce.getLossSum(), ce.getNumTokens()});
  return success();
}

} // namespace

LogicalResult mlir::trainc::buildModel(ModuleOp module, const ModelConfig &cfg,
                                       const BuildOptions &options) {
  if (options.dtype != "fp32" && options.dtype != "fp64")
    return module.emitError() << "model dtype '" << options.dtype << "' is not fp32 or fp64";
  return ModelIRBuilder(module, cfg, options).build();
}
