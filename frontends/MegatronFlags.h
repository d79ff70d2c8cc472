//===- MegatronFlags.h - Megatron-LM command-line frontend ---------------===//
//
// Reads a Megatron-LM pretrain_gpt.py command line into a PlanConfig, with Megatron's flag
// names, meanings and defaults (megatron/training/arguments.py).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_FRONTENDS_MEGATRONFLAGS_H
#define TRAINC_FRONTENDS_MEGATRONFLAGS_H

#include "frontends/ModelConfig.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace trainc::config {

struct FlagParseOptions {
  /// A whole configuration to start from (a .mlir input's own sched.plan); flags then override
  /// single fields. base_model and base_micro_batch_size apply on top of it.
  const PlanConfig *base_plan = nullptr;
  /// Model values to start from (a preset or a parsed config.json, not finalized); model
  /// flags then override single fields and are no longer required.
  const ModelConfig *base_model = nullptr;
  /// A micro-batch size the input already fixes (a .mlir model's tokens shape): the default of
  /// --micro-batch-size, which is then not required.
  std::optional<int64_t> base_micro_batch_size;
  /// Run checkSupported() on the result. Only tools that inspect a configuration without
  /// compiling it turn this off.
  bool check_supported = true;
};

/// Parses `args` (the flags without the program name), then PlanConfig::finalize() and, by
/// default, checkSupported().
///
/// Syntax: `--flag value` or `--flag=value`; booleans take no value; --data-path takes one or
/// more values (up to the next `--` token). A repeated flag's last value wins.
///
/// Required: --num-layers, --hidden-size, --num-attention-heads, --seq-length, --vocab-size
/// (trainc reads no tokenizer files at compile time, so the vocabulary size always comes from
/// the command line, as with Megatron's NullTokenizer) and --micro-batch-size. With a base
/// model only --micro-batch-size. --max-position-embeddings defaults to --seq-length.
///
/// trainc's own flags: --data-parallel-size N (Megatron derives it from the world size) and
/// --no-calculate-per-token-loss (Megatron's legacy loss: the mean of per-microbatch token
/// means; trainc's default is --calculate-per-token-loss, the exact global per-token mean).
///
/// Run-time values (--lr, --train-iters, --tensorboard-dir, --timing-log-level, --log-params-norm,
/// --start-weight-decay, ...) are recorded in PlanConfig::runtime as trainrun's defaults.
/// Accepted and only recorded in PlanConfig::ignoredFlags: profiling and wandb flags (--profile,
/// --wandb-project, ...) and Megatron implementation switches (--use-mcore-models,
/// --transformer-impl, --use-flash-attn, --no-*-fusion except --no-bias-gelu-fusion, which
/// selects the erf GELU as in Megatron). megatronFlagTable() lists them all (trainc compile
/// --help).
///
/// Errors: "unknown flag --foo", "unexpected argument 'foo'", "--num-layers expects a value",
/// "--bf16 does not take a value", "--num-layers expects a positive integer, got 'abc'",
/// "--lr expects a number, got 'x'", "--normalization expects one of LayerNorm, RMSNorm, got
/// 'BatchNorm'", "missing required flag --num-layers", "--bf16 and --fp16 are mutually
/// exclusive", any PlanConfig::finalize() error, and checkSupported()'s "not supported yet: ...".
llvm::Expected<PlanConfig> parseMegatronFlags(llvm::ArrayRef<std::string> args,
                                              const FlagParseOptions &options = {});

/// What a flag of the table sets: the compiled program (compile-time), a run-time value whose
/// default the plan records and trainrun's flags override, or nothing (accepted, recorded in
/// PlanConfig::ignoredFlags).
enum class FlagKind { CompileTime, RunTimeDefault, Ignored };

/// One accepted flag as --help shows it, read from the parser's own table (the same entries
/// parseMegatronFlags dispatches on, in table order).
struct FlagInfo {
  std::string name;         // "--num-layers"
  std::string group;        // "model shape"
  FlagKind kind;
  std::string value;        // value placeholder: "N", "X", "{a,b}", "PATH..."; "" for a switch
  std::string defaultValue; // Megatron's default as a default PlanConfig holds it ("on"/"off"
                            // for switches, "derived/none" when finalize() derives it)
};
std::vector<FlagInfo> megatronFlagTable();

/// The flag table as help text: one block per group, one line per flag
/// "  --name VALUE   default: D   [compile-time|run-time|ignored]".
std::string megatronFlagHelp();

/// The accepted flag nearest to `name` by edit distance when it is near enough to be a typo
/// (at most max(2, |name| / 5) edits), else "".
std::string nearestMegatronFlag(llvm::StringRef name);

} // namespace trainc::config

#endif // TRAINC_FRONTENDS_MEGATRONFLAGS_H
