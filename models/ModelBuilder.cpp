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
    elt = o.dtype == "fp64"   ? Type(b.getF64Type())
          : o.dtype == "bf16" ? Type(b.getBF16Type())
          : o.dtype == "fp16" ? Type(b.getF16Type())
                              : Type(b.getF32Type());
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
  if (cfg.rotary_percent != 1.0 && rope && int64_t(D * cfg.rotary_percent) % 2)
    return module.emitError() << "--rotary-percent " << cfg.rotary_percent
                              << " gives an odd rotary dimension for head dim " << D;
  // The rng input exists when either dropout is on; attention dropout is a site of its own in
  // each layer (its op id follows the layer's hidden-dropout ids, counted only when it is on, so
  // the hidden-dropout masks of a model without attention dropout are unchanged).
  const bool hiddenDropout = cfg.hidden_dropout > 0, attnDropout = cfg.attention_dropout > 0;
  const bool dropout = hiddenDropout || attnDropout;

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
  // --reset-attention-mask: each token's document start (the runtime's DOC_START input).
  const bool docMask = cfg.reset_attention_mask;
  if (docMask) {
    inputs.push_back("doc_start");
    argTypes.push_back(t({B, S}, i32));
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
          b.getDictionaryAttr({b.getNamedAttr(model::kParamAttr, FlatSymbolRefAttr::get(b.getContext(), p.name))}));
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
  Value docStart = docMask ? body->getArgument(in0 + (dropout ? 5 : 4)) : Value();
  int64_t opId = 0;
  // The op builders take the parameter values: @forward's arguments or @decoder_layer's.
  auto dropWith = [&](Value x, Value key, int64_t id, Location l) -> Value {
    if (!hiddenDropout)
      return x;
    return b.create<model::DropoutOp>(l, x.getType(), x, key, b.getF64FloatAttr(cfg.hidden_dropout),
                                      b.getI64IntegerAttr(id));
  };
  auto drop = [&](Value x, Location l) { return dropWith(x, rng, ++opId, l); };
  // `bias` is ignored for RMSNorm.
  auto norm = [&](Value x, Value w, Value bias, Location l) -> Value {
    Type rows = t({B * S}, stats);
    if (rms)
      return b.create<model::RMSNormOp>(l, TypeRange{x.getType(), rows}, x, w,
                                        b.getF64FloatAttr(cfg.norm_epsilon))
          .getResult();
    return b.create<model::LayerNormOp>(l, TypeRange{x.getType(), rows, rows}, x, w, bias,
                                        b.getF64FloatAttr(cfg.norm_epsilon))
        .getResult();
  };
  // `bias` may be null (no bias).
  auto linear = [&](Value x, Value w, Value bias, int64_t out, Location l) {
    SmallVector<int64_t> shape(cast<RankedTensorType>(x.getType()).getShape());
    shape.back() = out;
    return b.create<model::LinearOp>(l, t(shape), x, w, bias).getResult();
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

  // The decoder layer once, as @decoder_layer(x, its parameters, [position_ids], [key]) -> x,
  // and one call per layer. Layer l's dropout sites keep the op ids of a flat model: its key is
  // the microbatch's rng shifted by the sites of the layers before it (model.rng_offset).
  const Layer &y0 = layers[0];
  SmallVector<unsigned> slots; // layer 0's parameter indices, in argument order
  for (unsigned i : {y0.ln1, y0.ln1b, y0.wq, y0.wk, y0.wv, y0.bq, y0.bk, y0.bv, y0.wo, y0.bo,
                     y0.ln2, y0.ln2b, y0.w1, y0.b1, y0.w2, y0.b2})
    if (i != 0)
      slots.push_back(i);
  const std::string prefix0 = "decoder.layers.0.";
  SmallVector<Type> layerArgs = {x.getType()};
  SmallVector<DictionaryAttr> layerArgAttrs = {b.getDictionaryAttr({})};
  for (unsigned i : slots) {
    layerArgs.push_back(t(params[i].shape));
    layerArgAttrs.push_back(b.getDictionaryAttr({b.getNamedAttr(
        "model.layer_param", b.getStringAttr(params[i].name.substr(prefix0.size())))}));
  }
  if (rope) {
    layerArgs.push_back(pos.getType());
    layerArgAttrs.push_back(b.getDictionaryAttr({}));
  }
  if (docMask) {
    layerArgs.push_back(docStart.getType());
    layerArgAttrs.push_back(b.getDictionaryAttr({}));
  }
  Type keyType = t({4}, b.getI64Type());
  if (dropout) {
    layerArgs.push_back(keyType);
    layerArgAttrs.push_back(b.getDictionaryAttr({}));
  }
  const int64_t firstLayerOpId = opId;
  func::FuncOp layerFn;
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(fn);
    layerFn = b.create<func::FuncOp>(at("decoder.layers", 0), "decoder_layer",
                                     b.getFunctionType(layerArgs, {x.getType()}));
    layerFn.setPrivate();
    layerFn->setAttr("model.layer", b.getStringAttr("decoder.layers"));
    layerFn.setAllArgAttrs(layerArgAttrs);
    Block *lb = layerFn.addEntryBlock();
    b.setInsertionPointToStart(lb);
    llvm::DenseMap<unsigned, Value> local; // parameter index (of layer 0) -> argument
    for (auto [k, i] : llvm::enumerate(slots))
      local[i] = lb->getArgument(unsigned(k) + 1);
    auto LP = [&](unsigned i) { return local.lookup(i); }; // null for an absent parameter
    Value lpos = rope ? lb->getArgument(unsigned(slots.size()) + 1) : Value();
    Value ldoc = docMask ? lb->getArgument(unsigned(slots.size()) + (rope ? 2 : 1)) : Value();
    Value key = dropout ? lb->getArgument(lb->getNumArguments() - 1) : Value();
    opId = 0;
    auto ldrop = [&](Value v, Location l) { return dropWith(v, key, firstLayerOpId + ++opId, l); };
    auto lnorm = [&](Value v, unsigned w, unsigned bb, Location l) {
      return norm(v, LP(w), LP(bb), l);
    };
    auto llinear = [&](Value v, unsigned w, std::optional<unsigned> bb, int64_t out, Location l) {
      return linear(v, LP(w), bb ? LP(*bb) : Value(), out, l);
    };
    int64_t rd = int64_t(double(D) * cfg.rotary_percent);
    const Layer &y = y0;
    std::string p = "decoder.layers.";
    Value lx = lb->getArgument(0);
    Location la = at(p + "self_attention", 1);
    Value h = lnorm(lx, y.ln1, y.ln1b, at(p + "input_layernorm", 2));
    auto ob = [&](unsigned i) { return bias ? std::optional<unsigned>(i) : std::nullopt; };
    Value q = reshape(llinear(h, y.wq, ob(y.bq), NH * D, la), {B, S, NH, D}, la);
    Value k = reshape(llinear(h, y.wk, ob(y.bk), NG * D, la), {B, S, NG, D}, la);
    Value v = reshape(llinear(h, y.wv, ob(y.bv), NG * D, la), {B, S, NG, D}, la);
    if (rope) {
      q = b.create<model::RopeOp>(la, q.getType(), q, lpos, b.getF64FloatAttr(cfg.rotary_base),
                                  b.getI64IntegerAttr(rd == D ? 0 : rd));
      k = b.create<model::RopeOp>(la, k.getType(), k, lpos, b.getF64FloatAttr(cfg.rotary_base),
                                  b.getI64IntegerAttr(rd == D ? 0 : rd));
    }
    // Attention dropout's op id is taken after the layer's two hidden-dropout sites (below).
    const int64_t attnOpId = attnDropout ? firstLayerOpId + opId + 3 : 0;
    auto attn = b.create<model::AttentionOp>(
        la, TypeRange{q.getType(), t({B, NH, S}, stats)}, q, k, v,
        attnDropout ? key : Value(), ldoc, b.getBoolAttr(true), b.getF64FloatAttr(0.0),
        b.getF64FloatAttr(attnDropout ? cfg.attention_dropout : 0.0),
        b.getI64IntegerAttr(attnOpId));
    Value o = reshape(attn.getResult(), {B, S, NH * D}, la);
    Value a = ldrop(llinear(o, y.wo, ob(y.bo), H, la), la);
    lx = b.create<model::AddOp>(la, lx.getType(), lx, a);
    Location lm = at(p + "mlp", 3);
    Value h2 = lnorm(lx, y.ln2, y.ln2b, at(p + "pre_mlp_layernorm", 4));
    Value u = llinear(h2, y.w1, ob(y.b1), cfg.swiglu ? 2 * F : F, lm);
    Value gate = cfg.swiglu ? Value(b.create<model::SwigluOp>(lm, t({B, S, F}), u))
                            : Value(b.create<model::GeluOp>(lm, u.getType(), u,
                                                             b.getBoolAttr(cfg.gelu_tanh)));
    Value f = ldrop(llinear(gate, y.w2, ob(y.b2), H, lm), lm);
    lx = b.create<model::AddOp>(lm, lx.getType(), lx, f);
    b.create<func::ReturnOp>(lm, lx);
    if (attnDropout)
      ++opId; // the attention site: firstLayerOpId + 3 (after the two hidden-dropout sites)
  }
  const int64_t sitesPerLayer = opId;
  opId = firstLayerOpId + sitesPerLayer * L;

  for (int64_t l = 0; l < L; ++l) {
    Location lc = at("decoder.layers." + std::to_string(l), line++);
    const Layer &y = layers[l];
    SmallVector<Value> args = {x};
    for (unsigned i : {y.ln1, y.ln1b, y.wq, y.wk, y.wv, y.bq, y.bk, y.bv, y.wo, y.bo, y.ln2,
                       y.ln2b, y.w1, y.b1, y.w2, y.b2})
      if (i != 0)
        args.push_back(P(i));
    if (rope)
      args.push_back(pos);
    if (docMask)
      args.push_back(docStart);
    if (dropout)
      args.push_back(b.create<model::RngOffsetOp>(lc, keyType, rng,
                                                  b.getI64IntegerAttr(sitesPerLayer * l)));
    auto call = b.create<func::CallOp>(lc, layerFn, args);
    call->setAttr("model.layer_index", b.getI64IntegerAttr(l));
    x = call.getResult(0);
  }
  Location lo = at("output_layer", line++);
  Value hf = norm(x, P(lnf), rms ? Value() : P(lnfb), at("decoder.final_layernorm", line++));
  Value logits = reshape(linear(hf, P(wout), Value(), V, lo), {B * S, V}, lo);
  Location lc = at("loss", line++);
  // bf16: the loss on fp32 logits (Megatron's output.float() before the cross entropy).
  if (elt != stats)
    logits = b.create<model::CastOp>(lc, t({B * S, V}, stats), logits);
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
  if (options.dtype != "fp32" && options.dtype != "fp64" && options.dtype != "bf16" &&
      options.dtype != "fp16")
    return module.emitError() << "model dtype '" << options.dtype
                              << "' is not fp32, fp64, bf16 or fp16";
  return ModelIRBuilder(module, cfg, options).build();
}
