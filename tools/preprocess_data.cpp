//===- preprocess_data.cpp - jsonl -> Megatron .bin/.idx ------------------===//
//
// Megatron-LM's tools/preprocess_data.py in C++: reads a jsonl file (one JSON object per line),
// tokenizes the --json-keys fields of every line with --tokenizer-type (runtime/data/Tokenizer.h)
// on --workers threads, and writes <output-prefix>_<key>_document.bin/.idx per key
// (runtime/data/IndexedDataset.h) in input order. A field that is a list of strings is one
// document of several sequences, as in Megatron; --append-eod appends the tokenizer's EOD to every
// non-empty document.
//
//   preprocess_data --input corpus.jsonl --output-prefix out/corpus --tokenizer-type
//       GPT2BPETokenizer --vocab-file vocab.json --merge-file merges.txt --append-eod --workers 2
//
// A line that is not a JSON object with the keys as strings stops the run with its line number
// (exit 1), or with --skip-bad-lines is reported and skipped. A progress line (documents, MB/s,
// elapsed) goes to stderr every --log-interval documents, and a summary at the end.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/IndexedDataset.h"
#include "runtime/data/Tokenizer.h"

#include "absl/strings/str_cat.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace trainc::rt::data;

namespace {

const char *kUsage =
    "usage: preprocess_data --input FILE.jsonl --output-prefix PREFIX --tokenizer-type TYPE\n"
    "         [--json-keys KEY...] [--vocab-file vocab.json] [--merge-file merges.txt]\n"
    "         [--tokenizer-model FILE] [--vocab-size N] [--append-eod] [--workers N]\n"
    "         [--log-interval N] [--skip-bad-lines]\n"
    "  TYPE: GPT2BPETokenizer (--vocab-file, --merge-file), NullTokenizer (--vocab-size),\n"
    "        ByteTokenizer, SentencePieceTokenizer / GPTSentencePieceTokenizer / Llama2Tokenizer\n"
    "        (--tokenizer-model a SentencePiece .model), HuggingFaceTokenizer (--tokenizer-model\n"
    "        tokenizer.json or its directory). Writes PREFIX_<key>_document.bin/.idx for each key\n"
    "        (default: text).\n";

struct Options {
  std::string input, outputPrefix;
  std::vector<std::string> jsonKeys;
  TokenizerOptions tokenizer;
  bool appendEod = false, skipBadLines = false;
  int64_t workers = 1, logInterval = 10000;
};

int usageError(const std::string &msg) {
  std::cerr << "preprocess_data: " << msg << "\n" << kUsage;
  return 2;
}

/// One line's result: per key, the document's tokens and sequence lengths; or an error.
struct Encoded {
  std::vector<std::vector<int32_t>> tokens, lengths;
  std::string error;
};

void encodeLine(const Options &o, const Tokenizer &tok, const std::string &line, Encoded &out) {
  out.tokens.assign(o.jsonKeys.size(), {});
  out.lengths.assign(o.jsonKeys.size(), {});
  out.error.clear();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception &e) {
    out.error = absl::StrCat("invalid JSON: ", e.what());
    return;
  }
  if (!j.is_object()) {
    out.error = absl::StrCat("expected a JSON object, got ", j.type_name());
    return;
  }
  for (size_t k = 0; k < o.jsonKeys.size(); ++k) {
    auto it = j.find(o.jsonKeys[k]);
    if (it == j.end()) {
      out.error = absl::StrCat("no key \"", o.jsonKeys[k], "\" (--json-keys)");
      return;
    }
    std::vector<const std::string *> sentences;
    if (it->is_string()) {
      sentences.push_back(it->get_ptr<const std::string *>());
    } else if (it->is_array()) {
      for (const auto &s : *it) {
        if (!s.is_string()) {
          out.error = absl::StrCat("key \"", o.jsonKeys[k], "\" is a list with a ", s.type_name(),
                                   ", expected strings");
          return;
        }
        sentences.push_back(s.get_ptr<const std::string *>());
      }
    } else {
      out.error = absl::StrCat("key \"", o.jsonKeys[k], "\" is a ", it->type_name(),
                               ", expected a string or a list of strings");
      return;
    }
    std::vector<int32_t> &ids = out.tokens[k];
    for (const std::string *s : sentences) {
      size_t before = ids.size();
      if (absl::Status st = tok.tokenize(*s, ids); !st.ok()) {
        out.error = std::string(st.message());
        return;
      }
      if (ids.size() > before)
        out.lengths[k].push_back(int32_t(ids.size() - before));
    }
    if (!ids.empty() && o.appendEod) {
      ids.push_back(tok.eod());
      out.lengths[k].back() += 1;
    }
  }
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    auto value = [&](std::string &out) -> bool {
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)
        return false;
      out = args[++i];
      return true;
    };
    auto intValue = [&](int64_t &out, int64_t min) -> bool {
      std::string v;
      if (!value(v))
        return false;
      char *end = nullptr;
      long long x = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || x < min)
        return false;
      out = x;
      return true;
    };
    bool ok = true;
    if (a == "--input") ok = value(o.input);
    else if (a == "--output-prefix") ok = value(o.outputPrefix);
    else if (a == "--tokenizer-type") ok = value(o.tokenizer.type);
    else if (a == "--vocab-file") ok = value(o.tokenizer.vocabFile);
    else if (a == "--merge-file") ok = value(o.tokenizer.mergeFile);
    else if (a == "--tokenizer-model") ok = value(o.tokenizer.tokenizerModel);
    else if (a == "--vocab-size") ok = intValue(o.tokenizer.vocabSize, 1);
    else if (a == "--workers") ok = intValue(o.workers, 1);
    else if (a == "--log-interval") ok = intValue(o.logInterval, 1);
    else if (a == "--append-eod") o.appendEod = true;
    else if (a == "--skip-bad-lines") o.skipBadLines = true;
    else if (a == "--json-keys") {
      o.jsonKeys.clear();
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0)
        o.jsonKeys.push_back(args[++i]);
      ok = !o.jsonKeys.empty();
    } else if (a == "--split-sentences" || a == "--partitions" || a == "--keep-newlines") {
      return usageError(absl::StrCat(a, " is not supported yet (sentence splitting and "
                                        "partitions land in a later issue)"));
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else {
      return usageError(absl::StrCat("unknown flag '", a, "'"));
    }
    if (!ok)
      return usageError(absl::StrCat(a, " expects a value",
                                     a == "--workers" || a == "--vocab-size" ||
                                             a == "--log-interval"
                                         ? " (a positive integer)"
                                         : ""));
  }
  if (o.jsonKeys.empty())
    o.jsonKeys = {"text"};
  if (o.input.empty() || o.outputPrefix.empty() || o.tokenizer.type.empty())
    return usageError("--input, --output-prefix and --tokenizer-type are required");

  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = createTokenizer(o.tokenizer);
  if (!tok.ok()) {
    std::cerr << "preprocess_data: " << tok.status().message() << "\n";
    return 1;
  }
  std::ifstream in(o.input, std::ios::binary);
  if (!in) {
    std::cerr << "preprocess_data: cannot read --input '" << o.input << "'\n";
    return 1;
  }
  const int code = optimalDtypeCode((*tok)->vocabSize());
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  for (const std::string &key : o.jsonKeys) {
    auto b = IndexedDatasetBuilder::create(absl::StrCat(o.outputPrefix, "_", key, "_document"), code);
    if (!b.ok()) {
      std::cerr << "preprocess_data: " << b.status().message() << "\n";
      return 1;
    }
    builders.push_back(std::move(*b));
  }

  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  int64_t lineNo = 0, docs = 0, bad = 0, tokens = 0, bytes = 0, nextLog = o.logInterval;
  constexpr size_t kChunkLines = 4096;
  std::vector<std::string> lines(kChunkLines);
  std::vector<Encoded> encoded(kChunkLines);
  bool eof = false;
  while (!eof) {
    size_t n = 0;
    while (n < kChunkLines && std::getline(in, lines[n])) {
      bytes += int64_t(lines[n].size()) + 1;
      ++n;
    }
    eof = n < kChunkLines;
    if (in.bad()) {
      std::cerr << "preprocess_data: error reading '" << o.input << "'\n";
      return 1;
    }
    const size_t workers = size_t(std::min<int64_t>(o.workers, int64_t(n)));
    auto work = [&](size_t w) {
      for (size_t i = w; i < n; i += workers)
        encodeLine(o, **tok, lines[i], encoded[i]);
    };
    if (workers <= 1) {
      if (n > 0)
        work(0);
    } else {
      std::vector<std::thread> pool;
      for (size_t w = 0; w < workers; ++w)
        pool.emplace_back(work, w);
      for (std::thread &t : pool)
        t.join();
    }
    for (size_t i = 0; i < n; ++i) {
      ++lineNo;
      if (!encoded[i].error.empty()) {
        std::cerr << "preprocess_data: '" << o.input << "' line " << lineNo << ": "
                  << encoded[i].error << (o.skipBadLines ? " (skipped)" : "") << "\n";
        if (!o.skipBadLines) {
          std::cerr << "preprocess_data: stopped (--skip-bad-lines skips such lines)\n";
          return 1;
        }
        ++bad;
        continue;
      }
      for (size_t k = 0; k < builders.size(); ++k) {
        tokens += int64_t(encoded[i].tokens[k].size());
        if (absl::Status s = builders[k]->addDocument(encoded[i].tokens[k], encoded[i].lengths[k]);
            !s.ok()) {
          std::cerr << "preprocess_data: line " << lineNo << ": " << s.message() << "\n";
          return 1;
        }
      }
      if (++docs >= nextLog) {
        double t = elapsed();
        std::fprintf(stderr, "Processed %lld documents (%.1f docs/s, %.2f MB/s), elapsed %.1f s\n",
                     (long long)docs, double(docs) / t, double(bytes) / t / 1e6, t);
        nextLog += o.logInterval;
      }
    }
  }
  for (auto &b : builders)
    if (absl::Status s = b->finalize(); !s.ok()) {
      std::cerr << "preprocess_data: " << s.message() << "\n";
      return 1;
    }
  double t = elapsed();
  std::fprintf(stderr,
               "preprocess_data: %lld documents, %lld tokens, %lld input bytes in %.2f s "
               "(%.2f MB/s, %.0f docs/s, %lld workers, %s, %lld bad lines skipped)\n",
               (long long)docs, (long long)tokens, (long long)bytes, t, double(bytes) / t / 1e6,
               double(docs) / t, (long long)o.workers, dtypeCodeName(code), (long long)bad);
  for (const std::string &key : o.jsonKeys)
    std::printf("%s_%s_document\n", o.outputPrefix.c_str(), key.c_str());
  return 0;
}
