//===- BlockProgram.cpp - A hand-assembled one-block transformer program -===//

#include "runtime/testing/BlockProgram.h"

#include "runtime/core/Philox.h"
#include "runtime/core/ProgramBuilder.h"

#include <cmath>
#include <string>

namespace trainc::rt::testing {
namespace {

using Op = schema::Operand;
using PB = ProgramBuilder;

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  bool isNorm;
  int value = -1, grad = -1, expAvg = -1, expAvgSq = -1;
};

int64_t numel(const std::vector<int64_t> &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

std::vector<Param> blockParams(const BlockConfig &c) {
  int64_t D = c.hidden / c.heads;
  std::string l = "decoder.layers.0.";
  return {
      {"embedding.word_embeddings.weight", {c.vocab, c.hidden}, false},
      {l + "input_layernorm.weight", {c.hidden}, true},
      {l + "self_attention.linear_qkv.weight", {(c.heads + 2 * c.groups) * D, c.hidden}, false},
      {l + "self_attention.linear_proj.weight", {c.hidden, c.heads * D}, false},
      {l + "pre_mlp_layernorm.weight", {c.hidden}, true},
      {l + "mlp.linear_fc1.weight", {2 * c.ffn, c.hidden}, false},
      {l + "mlp.linear_fc2.weight", {c.hidden, c.ffn}, false},
      {"decoder.final_layernorm.weight", {c.hidden}, true},
      {"output_layer.weight", {c.vocab, c.hidden}, false},
  };
}

enum ParamId { Emb, Ln1, Wqkv, Wo, Ln2, W1, W2, Lnf, Wout };

} // namespace

schema::Program buildBlockProgram(const BlockConfig &c) {
  PB b;
  const DType T = c.dtype;
  const int64_t H = c.hidden, NH = c.heads, NG = c.groups, D = H / NH, F = c.ffn, V = c.vocab;
  const int64_t Bm = c.microBatch, S = c.seq, R = Bm * S;

  std::vector<Param> params = blockParams(c);
  for (Param &p : params) {
    p.value = b.addBuffer(p.name, schema::PARAMETER, T, p.shape);
    p.grad = b.addBuffer(p.name + ".main_grad", schema::MAIN_GRAD, T, p.shape);
    p.expAvg = b.addBuffer(p.name + ".exp_avg", schema::OPTIMIZER_STATE, T, p.shape);
    p.expAvgSq = b.addBuffer(p.name + ".exp_avg_sq", schema::OPTIMIZER_STATE, T, p.shape);
    schema::Parameter *pp = b.proto().add_parameters();
    pp->set_name(p.name);
    for (int64_t d : p.shape) {
      pp->add_global_shape(d);
      pp->add_slice_start(0);
      pp->add_slice_size(d);
    }
    pp->set_buffer(uint32_t(p.value));
    pp->set_no_weight_decay(p.isNorm);
  }
  std::vector<int> tokens, labels, masks;
  for (int64_t m = 0; m < c.numMicrobatches; ++m) {
    tokens.push_back(b.addBuffer("tokens." + std::to_string(m), schema::INPUT, DType::I32, {Bm, S}));
    labels.push_back(b.addBuffer("labels." + std::to_string(m), schema::INPUT, DType::I32, {Bm, S}));
    masks.push_back(b.addBuffer("loss_mask." + std::to_string(m), schema::INPUT, T, {Bm, S}));
  }
  int pos = b.addBuffer("position_ids", schema::INPUT, DType::I32, {Bm, S});
  int lr = b.addBuffer("lr", schema::SCALAR, T, {});
  int wd = b.addBuffer("weight_decay", schema::SCALAR, T, {});
  int step = b.addBuffer("step", schema::SCALAR, T, {});
  int one = b.addBuffer("one", schema::SCALAR, T, {});
  int lossSum = b.addBuffer("loss_sum", schema::OUTPUT, T, {});
  int numTokens = b.addBuffer("num_tokens", schema::OUTPUT, T, {});
  int gradNorm = b.addBuffer("grad_norm", schema::OUTPUT, T, {});
  int update = b.addBuffer("update_successful", schema::OUTPUT, T, {});
  int invTokens = b.addBuffer("inv_num_tokens", schema::WORKSPACE, T, {});
  int sumsq = b.addBuffer("grad_sumsq", schema::WORKSPACE, T, {});
  int gradScale = b.addBuffer("grad_scale", schema::WORKSPACE, T, {});

  auto act = [&](const std::string &n, std::vector<int64_t> shape, DType t = DType::Invalid) {
    return b.addBuffer(n, schema::ACTIVATION, t == DType::Invalid ? T : t, shape);
  };
  // Forward activations (kept for backward) and backward temporaries; one set, reused by every
  // microbatch because each microbatch's backward completes before the next forward.
  int x0 = act("x0", {Bm, S, H}), h1 = act("h1", {Bm, S, H}), rstd1 = act("rstd1", {R});
  int qRaw = act("q_raw", {Bm, S, NH, D}), kRaw = act("k_raw", {Bm, S, NG, D});
  int q = act("q", {Bm, S, NH, D}), k = act("k", {Bm, S, NG, D}), v = act("v", {Bm, S, NG, D});
  int o = act("attn_out", {Bm, S, NH, D}), lse = act("attn_lse", {Bm, NH, S});
  int a = act("proj_out", {R, H}), x1 = act("x1", {Bm, S, H}), h2 = act("h2", {Bm, S, H});
  int rstd2 = act("rstd2", {R}), u = act("fc1_out", {R, 2 * F}), g = act("swiglu_out", {R, F});
  int f = act("fc2_out", {R, H}), x2 = act("x2", {Bm, S, H}), h3 = act("h3", {Bm, S, H});
  int rstd3 = act("rstd3", {R}), logits = act("logits", {R, V}), lseCe = act("ce_lse", {R});
  int ls = act("mb_loss_sum", {}), nt = act("mb_num_tokens", {});
  int dLogits = act("d_logits", {R, V}), dh3 = act("d_h3", {R, H}), dx2 = act("d_x2", {R, H});
  int dNorm = act("d_norm_weight", {H}), dg = act("d_swiglu_out", {R, F});
  int du = act("d_fc1_out", {R, 2 * F}), dh2 = act("d_h2", {R, H}), dx1b = act("d_x1_norm", {R, H});
  int dx1 = act("d_x1", {R, H}), dO = act("d_attn_out", {Bm, S, NH, D});
  int dq = act("d_q", {Bm, S, NH, D}), dk = act("d_k", {Bm, S, NG, D}), dv = act("d_v", {Bm, S, NG, D});
  int dqRaw = act("d_q_raw", {Bm, S, NH, D}), dkRaw = act("d_k_raw", {Bm, S, NG, D});
  int dh1 = act("d_h1", {R, H}), dx0b = act("d_x0_norm", {R, H}), dx0 = act("d_x0", {Bm, S, H});

  int main = b.addFunction("train_step");
  int mb = b.addFunction("microbatch", {{"tokens", DType::I32, {Bm, S}},
                                        {"labels", DType::I32, {Bm, S}},
                                        {"loss_mask", T, {Bm, S}}});
  auto B = [](int i) { return PB::buf(i); };
  auto Vw = [](int i, std::vector<int64_t> shape, uint64_t off = 0) { return PB::buf(i, off, shape); };
  auto W = [&](ParamId id) { return B(params[id].value); };
  auto G = [&](ParamId id) { return B(params[id].grad); };
  auto loc = [&](int line, const std::string &op) {
    b.setCurrentLocation(b.addLocation("block.mlir", uint32_t(line), 1, op));
  };
  std::vector<AttrArg> tb = {AttrArg("trans_b", 1)};
  std::vector<AttrArg> accumT = {AttrArg("trans_a", 1), AttrArg("beta", 1.0)};
  std::vector<AttrArg> accum = {AttrArg("beta", 1.0)};
  int64_t qRows = NH * D, kvRows = NG * D;

  //===--------------------------------------------------------------------===//
  // Forward
  //===--------------------------------------------------------------------===//
  loc(1, "model.embedding");
  b.kernel(mb, "embedding", {W(Emb), PB::arg(0)}, {B(x0)});
  loc(2, "model.rms_norm");
  b.kernel(mb, "rms_norm", {B(x0), W(Ln1)}, {B(h1), B(rstd1)});
  loc(3, "model.linear");
  b.kernel(mb, "matmul", {Vw(h1, {R, H}), Vw(params[Wqkv].value, {qRows, H})}, {Vw(qRaw, {R, qRows})}, tb);
  b.kernel(mb, "matmul", {Vw(h1, {R, H}), Vw(params[Wqkv].value, {kvRows, H}, qRows * H)},
           {Vw(kRaw, {R, kvRows})}, tb);
  b.kernel(mb, "matmul", {Vw(h1, {R, H}), Vw(params[Wqkv].value, {kvRows, H}, (qRows + kvRows) * H)},
           {Vw(v, {R, kvRows})}, tb);
  loc(4, "model.rope");
  b.kernel(mb, "rope", {B(qRaw), B(pos)}, {B(q)}, {AttrArg("base", c.ropeBase)});
  b.kernel(mb, "rope", {B(kRaw), B(pos)}, {B(k)}, {AttrArg("base", c.ropeBase)});
  loc(5, "model.attention");
  b.kernel(mb, "attention", {B(q), B(k), B(v)}, {B(o), B(lse)});
  loc(6, "model.linear");
  b.kernel(mb, "matmul", {Vw(o, {R, qRows}), W(Wo)}, {B(a)}, tb);
  loc(7, "model.add");
  b.kernel(mb, "add", {B(x0), B(a)}, {B(x1)});
  loc(8, "model.rms_norm");
  b.kernel(mb, "rms_norm", {B(x1), W(Ln2)}, {B(h2), B(rstd2)});
  loc(9, "model.linear");
  b.kernel(mb, "matmul", {Vw(h2, {R, H}), W(W1)}, {B(u)}, tb);
  loc(10, "model.swiglu");
  b.kernel(mb, "swiglu", {B(u)}, {B(g)});
  loc(11, "model.linear");
  b.kernel(mb, "matmul", {B(g), W(W2)}, {B(f)}, tb);
  loc(12, "model.add");
  b.kernel(mb, "add", {B(x1), B(f)}, {B(x2)});
  loc(13, "model.rms_norm");
  b.kernel(mb, "rms_norm", {B(x2), W(Lnf)}, {B(h3), B(rstd3)});
  loc(14, "model.linear");
  b.kernel(mb, "matmul", {Vw(h3, {R, H}), W(Wout)}, {B(logits)}, tb);
  loc(15, "model.cross_entropy");
  b.kernel(mb, "cross_entropy", {B(logits), PB::arg(1, 0, {R}), PB::arg(2, 0, {R})},
           {B(ls), B(nt), B(lseCe)});
  b.kernel(mb, "add", {B(lossSum), B(ls)}, {B(lossSum)}, {}, {0});
  b.kernel(mb, "add", {B(numTokens), B(nt)}, {B(numTokens)}, {}, {0});

  //===--------------------------------------------------------------------===//
  // Backward of loss_sum (per-token normalisation happens once, after all microbatches)
  //===--------------------------------------------------------------------===//
  loc(15, "model.cross_entropy_backward");
  b.kernel(mb, "cross_entropy_backward",
           {B(logits), PB::arg(1, 0, {R}), PB::arg(2, 0, {R}), B(lseCe), B(one)}, {B(dLogits)});
  loc(14, "model.linear_backward");
  b.kernel(mb, "matmul", {B(dLogits), Vw(h3, {R, H})}, {G(Wout)}, accumT);
  b.kernel(mb, "matmul", {B(dLogits), W(Wout)}, {B(dh3)});
  loc(13, "model.rms_norm_backward");
  b.kernel(mb, "rms_norm_backward", {B(dh3), Vw(x2, {R, H}), W(Lnf), B(rstd3)}, {B(dx2), B(dNorm)});
  b.kernel(mb, "add", {G(Lnf), B(dNorm)}, {G(Lnf)}, {}, {0});
  loc(11, "model.linear_backward");
  b.kernel(mb, "matmul", {B(dx2), W(W2)}, {B(dg)});
  b.kernel(mb, "matmul", {B(dx2), B(g)}, {G(W2)}, accumT);
  loc(10, "model.swiglu_backward");
  b.kernel(mb, "swiglu_backward", {B(dg), B(u)}, {B(du)});
  loc(9, "model.linear_backward");
  b.kernel(mb, "matmul", {B(du), W(W1)}, {B(dh2)});
  b.kernel(mb, "matmul", {B(du), Vw(h2, {R, H})}, {G(W1)}, accumT);
  loc(8, "model.rms_norm_backward");
  b.kernel(mb, "rms_norm_backward", {B(dh2), Vw(x1, {R, H}), W(Ln2), B(rstd2)}, {B(dx1b), B(dNorm)});
  b.kernel(mb, "add", {G(Ln2), B(dNorm)}, {G(Ln2)}, {}, {0});
  b.kernel(mb, "add", {B(dx2), B(dx1b)}, {B(dx1)});
  loc(6, "model.linear_backward");
  b.kernel(mb, "matmul", {B(dx1), W(Wo)}, {Vw(dO, {R, qRows})});
  b.kernel(mb, "matmul", {B(dx1), Vw(o, {R, qRows})}, {G(Wo)}, accumT);
  loc(5, "model.attention_backward");
  b.kernel(mb, "attention_backward", {B(q), B(k), B(v), B(o), B(lse), B(dO)}, {B(dq), B(dk), B(dv)});
  loc(4, "model.rope_backward");
  b.kernel(mb, "rope_backward", {B(dq), B(pos)}, {B(dqRaw)}, {AttrArg("base", c.ropeBase)});
  b.kernel(mb, "rope_backward", {B(dk), B(pos)}, {B(dkRaw)}, {AttrArg("base", c.ropeBase)});
  loc(3, "model.linear_backward");
  b.kernel(mb, "matmul", {Vw(dqRaw, {R, qRows}), Vw(params[Wqkv].value, {qRows, H})}, {B(dh1)});
  b.kernel(mb, "matmul", {Vw(dkRaw, {R, kvRows}), Vw(params[Wqkv].value, {kvRows, H}, qRows * H)},
           {B(dh1)}, accum);
  b.kernel(mb, "matmul",
           {Vw(dv, {R, kvRows}), Vw(params[Wqkv].value, {kvRows, H}, (qRows + kvRows) * H)},
           {B(dh1)}, accum);
  b.kernel(mb, "matmul", {Vw(dqRaw, {R, qRows}), Vw(h1, {R, H})},
           {Vw(params[Wqkv].grad, {qRows, H})}, accumT);
  b.kernel(mb, "matmul", {Vw(dkRaw, {R, kvRows}), Vw(h1, {R, H})},
           {Vw(params[Wqkv].grad, {kvRows, H}, qRows * H)}, accumT);
  b.kernel(mb, "matmul", {Vw(dv, {R, kvRows}), Vw(h1, {R, H})},
           {Vw(params[Wqkv].grad, {kvRows, H}, (qRows + kvRows) * H)}, accumT);
  loc(2, "model.rms_norm_backward");
  b.kernel(mb, "rms_norm_backward", {B(dh1), Vw(x0, {R, H}), W(Ln1), B(rstd1)}, {B(dx0b), B(dNorm)});
  b.kernel(mb, "add", {G(Ln1), B(dNorm)}, {G(Ln1)}, {}, {0});
  b.kernel(mb, "add", {Vw(dx1, {Bm, S, H}), Vw(dx0b, {Bm, S, H})}, {B(dx0)});
  loc(1, "model.embedding_backward");
  b.kernel(mb, "embedding_backward", {PB::arg(0), B(dx0)}, {G(Emb)}, {AttrArg("beta", 1.0)});

  //===--------------------------------------------------------------------===//
  // The iteration: zero grads, fill inputs, microbatches, finalize, clip, AdamW, read outputs
  //===--------------------------------------------------------------------===//
  loc(20, "sched.iteration");
  for (const Param &p : params)
    b.kernel(main, "fill", {}, {B(p.grad)});
  b.kernel(main, "fill", {}, {B(lossSum)});
  b.kernel(main, "fill", {}, {B(numTokens)});
  b.kernel(main, "fill", {}, {B(one)}, {AttrArg("value", 1.0)});
  b.hostIO(main, schema::FILL_INPUTS, "batch");
  for (int64_t m = 0; m < c.numMicrobatches; ++m)
    b.call(main, mb, {B(tokens[m]), B(labels[m]), B(masks[m])});
  loc(21, "grad.finalize");
  b.kernel(main, "reciprocal", {B(numTokens)}, {B(invTokens)});
  for (const Param &p : params)
    b.kernel(main, "scale_by", {B(p.grad), B(invTokens)}, {B(p.grad)}, {}, {0});
  loc(22, "optimizer.grad_norm");
  for (size_t i = 0; i < params.size(); ++i)
    b.kernel(main, "sum_squares", {B(params[i].grad)}, {B(sumsq)},
             {AttrArg("beta", i == 0 ? 0.0 : 1.0)});
  b.kernel(main, "grad_norm_finalize", {B(sumsq)}, {B(gradNorm), B(gradScale), B(update)},
           {AttrArg("max_norm", c.maxGradNorm)});
  loc(23, "optimizer.adamw");
  for (const Param &p : params)
    b.kernel(main, "adamw",
             {B(p.value), B(p.grad), B(p.expAvg), B(p.expAvgSq), B(lr), B(wd), B(step),
              B(gradScale), B(update)},
             {B(p.value), B(p.expAvg), B(p.expAvgSq)},
             {AttrArg("beta1", c.beta1), AttrArg("beta2", c.beta2), AttrArg("eps", c.eps),
              AttrArg("decay", p.isNorm ? 0 : 1)},
             {0, 2, 3});
  b.hostIO(main, schema::READ_OUTPUTS, "outputs");
  b.setEntry(main);
  return b.finish();
}

namespace {
template <typename T> void writeValues(Executor &ex, int buf, const std::vector<double> &v) {
  std::vector<T> t(v.begin(), v.end());
  (void)ex.writeBuffer(buf, t.data(), t.size() * sizeof(T));
}
void writeAs(Executor &ex, int buf, DType t, const std::vector<double> &v) {
  if (t == DType::F64)
    writeValues<double>(ex, buf, v);
  else
    writeValues<float>(ex, buf, v);
}
double readScalar(Executor &ex, int buf, DType t) {
  if (t == DType::F64) {
    double d;
    (void)ex.readBuffer(buf, &d, 8);
    return d;
  }
  float f;
  (void)ex.readBuffer(buf, &f, 4);
  return f;
}
} // namespace

void initBlockParameters(Executor &ex, const BlockConfig &c, uint64_t seed) {
  std::vector<Param> params = blockParams(c);
  for (size_t i = 0; i < params.size(); ++i) {
    int buf = ex.findBuffer(params[i].name);
    int64_t n = numel(params[i].shape);
    std::vector<double> v(size_t(n), 1.0);
    if (!params[i].isNorm)
      for (int64_t e = 0; e < n; e += 2) {
        double z[2];
        philoxNormal2(seed, uint64_t(i), uint64_t(e / 2), z);
        v[e] = 0.02 * z[0];
        if (e + 1 < n)
          v[e + 1] = 0.02 * z[1];
      }
    writeAs(ex, buf, c.dtype, v);
  }
}

double runBlockIteration(Executor &ex, const BlockConfig &c, int64_t iteration, double lr) {
  const int64_t S = c.seq, Bm = c.microBatch;
  double lossSum = 0, numTokens = 0;
  absl::Status s = ex.run([&](schema::HostIOKind kind, const std::string &) -> absl::Status {
    if (kind == schema::FILL_INPUTS) {
      for (int64_t m = 0; m < c.numMicrobatches; ++m) {
        std::vector<int32_t> tok(size_t(Bm * S)), lab(size_t(Bm * S));
        std::vector<double> mask(size_t(Bm * S), 1.0);
        for (int64_t bi = 0; bi < Bm; ++bi) {
          // A learnable rule: each sample is an arithmetic progression mod vocab with a stride
          // chosen by the sample; the label is the next element.
          uint32_t ctr[4] = {uint32_t(iteration), uint32_t(m), uint32_t(bi), 17};
          philox4x32(0x5eed, 0, ctr);
          int64_t start = ctr[0] % c.vocab, stride = 1 + ctr[1] % 3;
          for (int64_t j = 0; j < S; ++j) {
            tok[bi * S + j] = int32_t((start + j * stride) % c.vocab);
            lab[bi * S + j] = int32_t((start + (j + 1) * stride) % c.vocab);
          }
          mask[bi * S] = 0; // the first position cannot know the stride
        }
        std::string ms = std::to_string(m);
        (void)ex.writeBuffer(ex.findBuffer("tokens." + ms), tok.data(), tok.size() * 4);
        (void)ex.writeBuffer(ex.findBuffer("labels." + ms), lab.data(), lab.size() * 4);
        writeAs(ex, ex.findBuffer("loss_mask." + ms), c.dtype, mask);
      }
      std::vector<int32_t> posv(size_t(Bm * S));
      for (int64_t i = 0; i < Bm * S; ++i)
        posv[i] = int32_t(i % S);
      (void)ex.writeBuffer(ex.findBuffer("position_ids"), posv.data(), posv.size() * 4);
      writeAs(ex, ex.findBuffer("lr"), c.dtype, {lr});
      writeAs(ex, ex.findBuffer("weight_decay"), c.dtype, {0.01});
      writeAs(ex, ex.findBuffer("step"), c.dtype, {double(iteration + 1)});
    } else {
      lossSum = readScalar(ex, ex.findBuffer("loss_sum"), c.dtype);
      numTokens = readScalar(ex, ex.findBuffer("num_tokens"), c.dtype);
    }
    return absl::OkStatus();
  });
  if (!s.ok() || numTokens == 0)
    return std::nan("");
  return lossSum / numTokens;
}

} // namespace trainc::rt::testing
