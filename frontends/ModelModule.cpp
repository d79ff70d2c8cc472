//===- ModelModule.cpp - The .mlir model frontend -------------------------===//

#include "frontends/ModelModule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "frontends/TextLimits.h"
#include "dialects/Model/ModelDialect.h"
#include "dialects/Sched/SchedDialect.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace trainc::config {

static std::string typeString(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return os.str();
}

/// When `text` ends inside a `#sched.plan<...>` (a file cut short), the plan parser's message for
/// its complete fields, naming the first field missing, and the last complete one; otherwise
/// nothing (MLIR's own parse error then stands alone).
static std::optional<std::string> truncatedPlan(MLIRContext &ctx, StringRef text) {
  constexpr llvm::StringLiteral head = "#sched.plan<";
  size_t start = text.find(head);
  if (start == StringRef::npos)
    return std::nullopt;
  int depth = 0;
  bool inString = false;
  size_t lastComma = StringRef::npos, prevComma = start + head.size() - 1;
  for (size_t i = start + head.size() - 1; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '<' || c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if (c == '>' || c == ')' || c == ']' || c == '}') {
      if (--depth == 0)
        return std::nullopt; // the plan is complete
    } else if (c == ',' && depth == 1) {
      prevComma = lastComma == StringRef::npos ? prevComma : lastComma;
      lastComma = i;
    }
  }
  const size_t end = lastComma == StringRef::npos ? start + head.size() : lastComma;
  std::string message;
  {
    ScopedDiagnosticHandler capture(&ctx, [&](Diagnostic &d) {
      if (message.empty())
        message = d.str();
      return success();
    });
    (void)parseAttribute((text.slice(start, end) + ">").str(), &ctx);
  }
  if (message.empty())
    return std::nullopt;
  std::string out = "the file ends inside its #sched.plan attribute";
  if (lastComma != StringRef::npos)
    out += ", after field '" +
           text.slice(prevComma + 1, lastComma).split('=').first.trim().str() + "'";
  return out + ": " + message;
}

std::vector<IRShapeField> modelShapeOfIR(ModuleOp module) {
  std::vector<IRShapeField> out;
  auto fwd = module.lookupSymbol<func::FuncOp>("forward");
  if (!fwd)
    return out;
  Value tokens;
  for (unsigned i = 0; i < fwd.getNumArguments(); ++i) {
    auto n = fwd.getArgAttrOfType<StringAttr>(i, "model.input");
    if (n && n.getValue() == "tokens")
      tokens = fwd.getArgument(i);
  }
  auto tt = tokens ? llvm::dyn_cast<RankedTensorType>(tokens.getType()) : RankedTensorType();
  if (!tt || tt.getRank() != 2)
    return out;
  out.push_back({"micro_batch_size", tt.getDimSize(0),
                 "the rows of the tokens input " + typeString(tt)});
  out.push_back({"seq_length", tt.getDimSize(1),
                 "the columns of the tokens input " + typeString(tt)});
  // The token embedding (not a position embedding): the model.embedding of the tokens input.
  RankedTensorType table;
  fwd.walk([&](mlir::trainc::model::EmbeddingOp op) {
    if (op.getIds() != tokens)
      return WalkResult::advance();
    table = llvm::dyn_cast<RankedTensorType>(op.getTable().getType());
    return WalkResult::interrupt();
  });
  if (table && table.getRank() == 2) {
    out.push_back({"padded_vocab_size", table.getDimSize(0),
                   "the rows of the tokens' model.embedding table " + typeString(table)});
    out.push_back({"hidden_size", table.getDimSize(1),
                   "the columns of the tokens' model.embedding table " + typeString(table)});
  }
  // Layers: the distinct <i> of @forward's decoder.layers.<i>.* parameters (layer calls or a
  // flat model alike); the FFN size from a linear_fc2 weight [hidden, ffn].
  llvm::StringSet<> layers;
  std::optional<IRShapeField> ffn;
  constexpr llvm::StringLiteral prefix = "decoder.layers.";
  for (unsigned i = 0; i < fwd.getNumArguments(); ++i) {
    auto p = fwd.getArgAttrOfType<FlatSymbolRefAttr>(i, mlir::trainc::model::kParamAttr);
    if (!p || !p.getValue().starts_with(prefix))
      continue;
    StringRef rest = p.getValue().drop_front(prefix.size());
    StringRef index = rest.take_until([](char c) { return c == '.'; });
    unsigned l;
    if (index.getAsInteger(10, l))
      continue;
    layers.insert(index);
    auto w = llvm::dyn_cast<RankedTensorType>(fwd.getArgument(i).getType());
    if (!ffn && rest.ends_with(".mlp.linear_fc2.weight") && w && w.getRank() == 2)
      ffn = IRShapeField{"ffn_hidden_size", w.getDimSize(1),
                         "the columns of " + p.getValue().str() + " " + typeString(w)};
  }
  if (!layers.empty())
    out.push_back({"num_layers", int64_t(layers.size()),
                   "@forward's parameters of " + std::to_string(layers.size()) +
                       " distinct decoder layers (decoder.layers.<i>.*)"});
  mlir::trainc::model::AttentionOp attention;
  module.walk([&](mlir::trainc::model::AttentionOp op) {
    attention = op;
    return WalkResult::interrupt();
  });
  if (attention) {
    auto q = llvm::dyn_cast<RankedTensorType>(attention.getQuery().getType());
    auto k = llvm::dyn_cast<RankedTensorType>(attention.getKey().getType());
    if (q && k && q.getRank() == 4 && k.getRank() == 4) {
      out.push_back({"num_attention_heads", q.getDimSize(2),
                     "dim 2 of the first model.attention's query " + typeString(q)});
      out.push_back({"num_query_groups", k.getDimSize(2),
                     "dim 2 of the first model.attention's key " + typeString(k)});
    }
  }
  if (ffn)
    out.push_back(*ffn);
  return out;
}

llvm::Error adoptModelShapeOfIR(ModuleOp module, llvm::StringRef path,
                                llvm::ArrayRef<std::string> flags, PlanConfig &config) {
  ModelConfig &m = config.model;
  std::vector<IRShapeField> shape = modelShapeOfIR(module);
  // The vocabulary: the loss's valid columns (the padded rows are not tokens).
  if (auto fwd = module.lookupSymbol<func::FuncOp>("forward")) {
    auto it = llvm::find_if(shape, [](const IRShapeField &f) { return f.field == "padded_vocab_size"; });
    if (it != shape.end()) {
      IRShapeField vocab{"vocab_size", it->value, it->source};
      fwd.walk([&](mlir::trainc::model::CrossEntropyOp op) {
        if (int64_t(op.getValidVocab()) > 0)
          vocab = {"vocab_size", int64_t(op.getValidVocab()),
                   "the valid_vocab of @forward's model.cross_entropy"};
        return WalkResult::interrupt();
      });
      shape.push_back(vocab);
    }
  }
  struct Field {
    const char *name, *flag;
    int64_t *value;
  };
  const Field fields[] = {{"num_layers", "--num-layers", &m.num_layers},
                          {"hidden_size", "--hidden-size", &m.hidden_size},
                          {"num_attention_heads", "--num-attention-heads", &m.num_attention_heads},
                          {"num_query_groups", "--num-query-groups", &m.num_query_groups},
                          {"ffn_hidden_size", "--ffn-hidden-size", &m.ffn_hidden_size},
                          {"seq_length", "--seq-length", &m.seq_length},
                          {"vocab_size", "--vocab-size", &m.vocab_size},
                          {"padded_vocab_size", nullptr, &m.padded_vocab_size}};
  auto given = [&](llvm::StringRef flag) {
    return llvm::any_of(flags, [&](const std::string &a) {
      return a == flag || llvm::StringRef(a).starts_with((flag + "=").str());
    });
  };
  for (const IRShapeField &f : shape)
    for (const Field &d : fields) {
      if (f.field != d.name)
        continue;
      if (d.flag && given(d.flag) && *d.value != f.value)
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            llvm::Twine(d.flag) + " " + llvm::Twine(*d.value) + " differs from the model of '" +
                path + "' (" + d.name + " " + llvm::Twine(f.value) + ": " + f.source + ")");
      *d.value = f.value;
    }
  m.group_query_attention = m.num_query_groups != m.num_attention_heads;
  if (m.num_attention_heads > 0)
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  mlir::trainc::model::AttentionOp attention;
  module.walk([&](mlir::trainc::model::AttentionOp op) {
    attention = op;
    return WalkResult::interrupt();
  });
  if (attention)
    if (auto q = llvm::dyn_cast<RankedTensorType>(attention.getQuery().getType());
        q && q.getRank() == 4)
      m.kv_channels = q.getDimSize(3);
  m.max_position_embeddings = std::max(m.max_position_embeddings, m.seq_length);
  return llvm::Error::success();
}

llvm::Expected<ModelModule> readModelModule(MLIRContext &ctx, llvm::StringRef path) {
  auto error = [&](const llvm::Twine &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
  };
  if (llvm::Error e = ::trainc::config::checkRegularFile(path, "model"))
    return std::move(e);
  auto file = llvm::MemoryBuffer::getFile(path);
  if (!file)
    return error("cannot read '" + path + "': " + file.getError().message());
  if (llvm::Error e = ::trainc::config::checkMlirDepth((*file)->getBuffer(), path))
    return std::move(e);
  llvm::SourceMgr sm;
  sm.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
  ModelModule out;
  {
    // Parse errors quote the offending line of the file.
    SourceMgrDiagnosticHandler handler(sm, &ctx, llvm::errs());
    out.module = parseSourceFile<ModuleOp>(sm, &ctx);
  }
  if (!out.module) {
    if (std::optional<std::string> cut =
            truncatedPlan(ctx, sm.getMemoryBuffer(sm.getMainFileID())->getBuffer()))
      return error("cannot parse '" + path + "': " + *cut);
    return error("cannot parse '" + path + "'");
  }
  auto fwd = out.module->lookupSymbol<func::FuncOp>("forward");
  if (!fwd)
    return error("'" + path + "' has no func.func @forward");
  for (unsigned i = 0; i < fwd.getNumArguments(); ++i) {
    auto n = fwd.getArgAttrOfType<StringAttr>(i, "model.input");
    if (!n || n.getValue() != "tokens")
      continue;
    auto t = llvm::dyn_cast<RankedTensorType>(fwd.getArgument(i).getType());
    if (!t || t.getRank() != 2)
      return error("@forward's tokens input must be a rank-2 tensor [micro batch, seq]");
    std::optional<ModelConfig> base = findPreset("tiny-gpt");
    out.base = *base;
    out.base.seq_length = t.getDimSize(1);
    out.base.max_position_embeddings = t.getDimSize(1);
    out.micro_batch_size = t.getDimSize(0);
    if (Attribute a = out.module->getOperation()->getAttr(mlir::trainc::sched::kPlanAttrName)) {
      auto plan = llvm::dyn_cast<mlir::trainc::sched::PlanAttr>(a);
      if (!plan)
        return error("'" + path + "': the module attribute sched.plan is not a #sched.plan<...>");
      // The plan's model shape must be the module's own model (the plan is recorded as it is
      // and the passes read it).
      llvm::StringMap<Attribute> fields;
      for (auto [name, value] : plan.getFields())
        fields[name] = value;
      for (const IRShapeField &f : modelShapeOfIR(*out.module)) {
        auto v = llvm::dyn_cast_or_null<IntegerAttr>(fields.lookup(f.field));
        if (!v)
          return error("internal error: #sched.plan has no integer field '" + f.field + "'");
        if (v.getInt() != f.value)
          return error("'" + path + "': the module's sched.plan has " + f.field + " = " +
                       std::to_string(v.getInt()) + ", but its model IR has " +
                       std::to_string(f.value) + " (" + f.source + ")");
      }
      // The module's plan is where the configuration starts; the command line's flags override
      // single fields (the model-shape fields describe the module's own model).
      PlanConfig c;
      c.model = out.base;
      c.parallel.tensor_model_parallel_size = plan.getTp();
      c.parallel.data_parallel_size = plan.getDp();
      c.parallel.pipeline_model_parallel_size = plan.getPp();
      c.parallel.virtual_pipeline_model_parallel_size =
          plan.getVirtualStages() > 1 ? plan.getVirtualStages() : 0;
      c.parallel.ddp_bucket_size = plan.getBucketSize();
      c.parallel.use_distributed_optimizer = plan.getDistributedOptimizer().getValue();
      c.parallel.overlap_param_gather = plan.getOverlapParamGather().getValue();
      c.training.micro_batch_size = plan.getMicroBatchSize();
      c.training.global_batch_size = plan.getGlobalBatchSize();
      c.training.params_dtype = plan.getParamsDtype().str();
      c.training.optimizer = plan.getOptimizer().str();
      c.training.adam_beta1 = plan.getAdamBeta1().getValueAsDouble();
      c.training.adam_beta2 = plan.getAdamBeta2().getValueAsDouble();
      c.training.adam_eps = plan.getAdamEps().getValueAsDouble();
      c.training.clip_grad = plan.getClipGrad().getValueAsDouble();
      c.training.weight_decay = plan.getWeightDecay().getValueAsDouble();
      c.training.calculate_per_token_loss = plan.getLossMode() == "per_token";
      out.plan = std::move(c);
    }
    return out;
  }
  return error("@forward in '" + path + "' has no argument tagged model.input = \"tokens\"");
}

} // namespace trainc::config
