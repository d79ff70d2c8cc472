//===- TokenizerTest.cpp - Null, Byte and GPT-2 BPE tokenizers -------------===//

#include "runtime/data/Tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace trainc::rt::data;
namespace fs = std::filesystem;

namespace {

std::string tempFile(const std::string &name, const std::string &text) {
  fs::path dir = fs::temp_directory_path() / ("trainc-tok-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

std::vector<int32_t> ids(const Tokenizer &t, const std::string &text) {
  std::vector<int32_t> out;
  absl::Status s = t.tokenize(text, out);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

/// GPT-2's bytes_to_unicode as the UTF-8 of each byte's printable stand-in.
std::string byteChar(int b) {
  bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int c = 0; c < b; ++c)
      if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)))
        ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

/// A vocab of all 256 byte symbols (id = byte) plus `extra` tokens, and the merges `merges`.
std::unique_ptr<Tokenizer> tinyGpt2(const std::vector<std::string> &extra,
                                    const std::vector<std::string> &merges, const std::string &tag) {
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) {
    std::string c = byteChar(b);
    if (c == "\"" || c == "\\")
      c = "\\" + c;
    vocab += "\"" + c + "\": " + std::to_string(b) + ", ";
  }
  int id = 256;
  for (const std::string &e : extra)
    vocab += "\"" + e + "\": " + std::to_string(id++) + ", ";
  vocab += "\"<|endoftext|>\": " + std::to_string(id) + "}";
  std::string m = "#version: 0.2\n";
  for (const std::string &x : merges)
    m += x + "\n";
  auto t = createTokenizer({"GPT2BPETokenizer", tempFile(tag + "-vocab.json", vocab),
                            tempFile(tag + "-merges.txt", m), 0});
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

} // namespace

TEST(Tokenizer, NullTokenizer) {
  auto t = createTokenizer({"NullTokenizer", "", "", 10});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocabSize(), 11);
  EXPECT_EQ((*t)->eod(), 10);
  EXPECT_EQ(ids(**t, " 1 2  3\n9\t0 "), (std::vector<int32_t>{1, 2, 3, 9, 0}));
  EXPECT_EQ((*t)->detokenize({1, 2, 3}), "1 2 3");
  std::vector<int32_t> out;
  EXPECT_NE((*t)->tokenize("1 x", out).message().find("'x' is not a token id in [0, 10)"),
            std::string::npos);
  EXPECT_NE((*t)->tokenize("10", out).message().find("'10' is not a token id"), std::string::npos);
  EXPECT_NE((*t)->tokenize("-1", out).message().find("'-1' is not a token id"), std::string::npos);
  EXPECT_NE(createTokenizer({"NullTokenizer", "", "", 0}).status().message().find(
                "NullTokenizer needs --vocab-size > 0"),
            std::string::npos);
}

TEST(Tokenizer, ByteTokenizer) {
  auto t = createTokenizer({"ByteTokenizer", "", "", 0});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->vocabSize(), 256);
  EXPECT_EQ((*t)->eod(), 0);
  EXPECT_EQ(ids(**t, std::string("a\0\xff", 3)), (std::vector<int32_t>{97, 255}));
  EXPECT_EQ((*t)->detokenize({104, 105, 0}), "hi");
}

TEST(Tokenizer, UnknownTypeAndPadding) {
  EXPECT_NE(createTokenizer({"BertWordPieceLowerCase", "", "", 0}).status().message().find(
                "unknown --tokenizer-type 'BertWordPieceLowerCase'"),
            std::string::npos);
  EXPECT_EQ(*paddedVocabSize(50257, 128, 1), 50304);
  EXPECT_EQ(*paddedVocabSize(50257, 128, 8), 51200);
  EXPECT_EQ(*paddedVocabSize(256, 128, 1), 256);
  EXPECT_FALSE(paddedVocabSize(0, 128, 1).ok());
  auto t = createTokenizer({"NullTokenizer", "", "", 300});
  EXPECT_TRUE(checkVocabAgainstPlan(**t, 301, 128, 1).ok());
  EXPECT_TRUE(checkVocabAgainstPlan(**t, 384, 128, 1).ok()); // same padded size
  absl::Status s = checkVocabAgainstPlan(**t, 256, 128, 1);
  EXPECT_NE(s.message().find("NullTokenizer's vocabulary of 301 tokens pads to 384 (multiple of "
                             "128), but the plan's vocabulary of 256 pads to 256"),
            std::string::npos)
      << s;
}

// A hand-checkable BPE: "hello" merges h+e, l+l, he+ll; " world" merges Ġ+w.
TEST(Tokenizer, Gpt2BpeTinyVocab) {
  auto t = tinyGpt2({"he", "ll", "hell", "\u0120w", "\u0120\u0120"},
                    {"h e", "l l", "he ll", "\u0120 w", "\u0120 \u0120"}, "tiny");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->vocabSize(), 262);
  EXPECT_EQ(t->eod(), 261);
  // hello -> [hell, o]; " world" -> [Ġw, o, r, l, d].
  EXPECT_EQ(ids(*t, "hello world"),
            (std::vector<int32_t>{258, 'o', 259, 'o', 'r', 'l', 'd'}));
  // Pre-tokenizer: "a  b" is "a", " ", " b" (the spaces never meet), "a  " ends in one "  ".
  EXPECT_EQ(ids(*t, "a  b"), (std::vector<int32_t>{'a', ' ', ' ', 'b'}));
  EXPECT_EQ(ids(*t, "a  "), (std::vector<int32_t>{'a', 260}));
  // Contractions split off; digits and punctuation runs are their own pieces.
  EXPECT_EQ(ids(*t, "I'll"), (std::vector<int32_t>{'I', '\'', 257}));
  EXPECT_EQ(t->detokenize(ids(*t, "hello world")), "hello world");
  // Multi-byte UTF-8 and an invalid byte round-trip through the byte symbols.
  std::string text = "na\xc3\xafve \xe2\x82\xac 42! \xff\n\n";
  EXPECT_EQ(t->detokenize(ids(*t, text)), text);
}

TEST(Tokenizer, Gpt2BpeFileErrors) {
  std::string merges = tempFile("m.txt", "#version: 0.2\n");
  auto err = [&](const std::string &vocab) {
    return createTokenizer({"GPT2BPETokenizer", tempFile("v.json", vocab), merges, 0})
        .status()
        .ToString();
  };
  EXPECT_NE(err("[1, 2]").find("is not a JSON object of token -> id"), std::string::npos);
  EXPECT_NE(err("{\"a\": \"x\", \"<|endoftext|>\": 1}").find("the id of token 'a' is \"x\""),
            std::string::npos);
  EXPECT_NE(err("{\"a\": 0, \"b\": 0}").find("id 0 is used by two tokens"), std::string::npos);
  EXPECT_NE(err("{\"a\": 0}").find("has no \"<|endoftext|>\" token"), std::string::npos);
  EXPECT_NE(createTokenizer({"GPT2BPETokenizer", "", "", 0}).status().message().find(
                "needs --vocab-file (vocab.json) and --merge-file"),
            std::string::npos);
  auto missing = createTokenizer({"GPT2BPETokenizer", "/nonexistent/vocab.json", merges, 0});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  // A merge whose result is missing from the vocabulary.
  auto t = createTokenizer({"GPT2BPETokenizer",
                            tempFile("v2.json", "{\"a\": 0, \"<|endoftext|>\": 1}"),
                            tempFile("m2.txt", "#version: 0.2\na a\n"), 0});
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<int32_t> out;
  EXPECT_NE((*t)->tokenize("aa", out).message().find("the BPE piece 'aa' is not in vocab.json"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// SentencePiece tokenizers against Debian's spm_train / spm_encode (tools of the same library,
// run as separate processes), on a corpus built from /usr/share/common-licenses.
//===----------------------------------------------------------------------===//

namespace {

std::string spmDir() {
  fs::path dir = fs::temp_directory_path() / ("trainc-spm-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir.string();
}

/// Non-blank lines of every license file plus unicode and whitespace edge cases.
std::vector<std::string> licenseLines() {
  std::vector<std::string> lines;
  std::vector<fs::path> files;
  for (const auto &e : fs::directory_iterator("/usr/share/common-licenses"))
    if (e.is_regular_file())
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path &f : files) {
    std::ifstream in(f);
    for (std::string line; std::getline(in, line);)
      if (line.find_first_not_of(" \t\r") != std::string::npos)
        lines.push_back(line);
  }
  for (const char *extra : {"na\xc3\xafve caf\xc3\xa9 \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
                            "  leading and   inner   spaces\tand a tab ", "1234567890 3.14 $5",
                            "emoji \xf0\x9f\x98\x80 and \xef\xbc\xa1 (fullwidth A)"})
    lines.push_back(extra);
  return lines;
}

/// Trains a model with spm_train on the first `trainLines` license lines; returns its path.
std::string trainSpm(const std::string &name, const std::string &extraFlags) {
  std::string dir = spmDir();
  std::vector<std::string> lines = licenseLines();
  std::ofstream corpus(dir + "/corpus.txt", std::ios::trunc);
  for (size_t i = 0; i < lines.size() && i < 1500; ++i)
    corpus << lines[i] << "\n";
  corpus.close();
  std::string cmd = std::string(TRAINC_SPM_TRAIN) + " --input=" + dir + "/corpus.txt" +
                    " --model_prefix=" + dir + "/" + name + " --vocab_size=400 --minloglevel=2 " +
                    extraFlags + " > " + dir + "/" + name + ".log 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir + "/" + name + ".model";
}

/// spm_encode --output_format=id of every line of `lines`.
std::vector<std::vector<int32_t>> spmEncode(const std::string &model,
                                            const std::vector<std::string> &lines) {
  std::string dir = spmDir();
  {
    std::ofstream in(dir + "/lines.txt", std::ios::trunc);
    for (const std::string &l : lines)
      in << l << "\n";
  }
  std::string cmd = std::string(TRAINC_SPM_ENCODE) + " --model=" + model +
                    " --output_format=id < " + dir + "/lines.txt > " + dir + "/ids.txt";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<std::vector<int32_t>> out;
  std::ifstream ids(dir + "/ids.txt");
  for (std::string line; std::getline(ids, line);) {
    std::istringstream ss(line);
    std::vector<int32_t> v;
    for (int32_t x; ss >> x;)
      v.push_back(x);
    out.push_back(v);
  }
  return out;
}

} // namespace

TEST(Tokenizer, SentencePieceMatchesSpmEncode) {
  std::vector<std::string> lines = licenseLines();
  for (const char *flags : {"", "--model_type=bpe"}) {
    std::string model = trainSpm(*flags ? "bpe" : "unigram", flags);
    std::vector<std::vector<int32_t>> want = spmEncode(model, lines);
    ASSERT_EQ(want.size(), lines.size()) << flags;
    for (const char *type : {"SentencePieceTokenizer", "GPTSentencePieceTokenizer"}) {
      TokenizerOptions o;
      o.type = type;
      o.tokenizerModel = model;
      auto t = createTokenizer(o);
      ASSERT_TRUE(t.ok()) << t.status();
      size_t differ = 0;
      for (size_t i = 0; i < lines.size(); ++i)
        if (ids(**t, lines[i]) != want[i] && differ++ < 3)
          ADD_FAILURE() << type << " " << flags << " line " << i << " '" << lines[i] << "'";
      EXPECT_EQ(differ, 0u) << type << " " << flags << " over " << lines.size() << " lines";
    }
  }
}

TEST(Tokenizer, SentencePieceRoundTripAndSpecialTokens) {
  // Identity normalisation and byte fallback: every line (unicode included) round-trips exactly.
  std::string model = trainSpm("exact", "--byte_fallback=true --normalization_rule_name=identity "
                                        "--remove_extra_whitespaces=false --character_coverage=1");
  TokenizerOptions o;
  o.type = "SentencePieceTokenizer";
  o.tokenizerModel = model;
  auto t = createTokenizer(o);
  ASSERT_TRUE(t.ok()) << t.status();
  for (const std::string &line : licenseLines())
    ASSERT_EQ((*t)->detokenize(ids(**t, line)), line);
  // Megatron's special tokens: the model has <unk> 0, <s> 1, </s> 2 and no pad piece, so
  // <CLS> <SEP> <EOD> <MASK> <PAD> are appended as 400..404; BOS/EOS are the model's pieces.
  EXPECT_EQ((*t)->vocabSize(), 405);
  EXPECT_EQ((*t)->eod(), 402);
  std::vector<int32_t> a = ids(**t, "GNU"), b = ids(**t, "License");
  std::vector<int32_t> want = a;
  want.push_back(402);
  want.insert(want.end(), b.begin(), b.end());
  want.push_back(1);
  want.push_back(400);
  EXPECT_EQ(ids(**t, "GNU<EOD>License<s><CLS>"), want);
  EXPECT_EQ((*t)->detokenize(want), "GNULicense");
  // GPTSentencePieceTokenizer: the model's pieces, EOD = </s>; Llama2Tokenizer prepends <s>.
  o.type = "GPTSentencePieceTokenizer";
  auto g = createTokenizer(o);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)->vocabSize(), 400);
  EXPECT_EQ((*g)->eod(), 2);
  o.type = "Llama2Tokenizer";
  auto l = createTokenizer(o);
  ASSERT_TRUE(l.ok());
  std::vector<int32_t> withBos = {1};
  withBos.insert(withBos.end(), a.begin(), a.end());
  EXPECT_EQ(ids(**l, "GNU"), withBos);
  EXPECT_EQ((*l)->detokenize(withBos), "GNU");
}

TEST(Tokenizer, SentencePieceErrors) {
  TokenizerOptions o;
  o.type = "SentencePieceTokenizer";
  EXPECT_NE(createTokenizer(o).status().message().find(
                "SentencePieceTokenizer needs --tokenizer-model (a SentencePiece .model file)"),
            std::string::npos);
  o.tokenizerModel = "/nonexistent/sp.model";
  EXPECT_EQ(createTokenizer(o).status().code(), absl::StatusCode::kNotFound);
  o.tokenizerModel = tempFile("not.model", "this is not a model");
  absl::Status s = createTokenizer(o).status();
  EXPECT_NE(s.message().find("not.model' is not a SentencePiece model"), std::string::npos) << s;
}

//===----------------------------------------------------------------------===//
// HuggingFaceTokenizer (byte-level BPE tokenizer.json); the comparison with an independent
// encoder on a trained vocabulary is tests/lit/data/hf-tokenizer.test.
//===----------------------------------------------------------------------===//

namespace {

/// tokenizer.json with the 256 byte symbols (id = byte), `extra` vocabulary tokens, `merges`
/// (JSON list text), added tokens <|endoftext|> (special) and <sep>, and `more` top-level JSON.
std::string hfJson(const std::vector<std::string> &extra, const std::string &merges,
                   const std::string &more = "", const std::string &modelMore = "") {
  std::string v = "{";
  for (int b = 0; b < 256; ++b) {
    std::string c = byteChar(b);
    if (c == "\"" || c == "\\")
      c = "\\" + c;
    v += "\"" + c + "\": " + std::to_string(b) + ", ";
  }
  int id = 256;
  for (const std::string &e : extra)
    v += "\"" + e + "\": " + std::to_string(id++) + ", ";
  v.resize(v.size() - 2);
  v += "}";
  return "{\"added_tokens\": [{\"id\": " + std::to_string(id) +
         ", \"content\": \"<|endoftext|>\", \"special\": true}, {\"id\": " +
         std::to_string(id + 1) + ", \"content\": \"<sep>\", \"special\": false}], "
         "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
         "\"add_prefix_space\": false, \"use_regex\": true}, " + more +
         "\"model\": {\"type\": \"BPE\", \"dropout\": null, " + modelMore + "\"vocab\": " + v +
         ", \"merges\": " + merges + "}}";
}

absl::StatusOr<std::unique_ptr<Tokenizer>> hf(const std::string &json, const std::string &tag) {
  TokenizerOptions o;
  o.type = "HuggingFaceTokenizer";
  o.tokenizerModel = tempFile(tag + "-tokenizer.json", json);
  return createTokenizer(o);
}

} // namespace

TEST(Tokenizer, HuggingFaceBpe) {
  // The same merges as Gpt2BpeTinyVocab, once as "a b" strings and once as pairs: same ids.
  std::vector<std::string> extra = {"he", "ll", "hell", "\u0120w", "\u0120\u0120"};
  auto a = hf(hfJson(extra, "[\"h e\", \"l l\", \"he ll\", \"\u0120 w\", \"\u0120 \u0120\"]"), "hf1");
  auto b = hf(hfJson(extra, "[[\"h\", \"e\"], [\"l\", \"l\"], [\"he\", \"ll\"], "
                            "[\"\u0120\", \"w\"], [\"\u0120\", \"\u0120\"]]"), "hf2");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  auto g = tinyGpt2(extra, {"h e", "l l", "he ll", "\u0120 w", "\u0120 \u0120"}, "hfg");
  EXPECT_EQ((*a)->vocabSize(), 263); // 256 + 5 + two added tokens
  EXPECT_EQ((*a)->eod(), 261);
  std::string text = "hello world, I'll  na\xc3\xafve \xe2\x82\xac 42!\n\n";
  EXPECT_EQ(ids(**a, text), ids(*g, text));
  EXPECT_EQ(ids(**b, text), ids(*g, text));
  EXPECT_EQ((*a)->detokenize(ids(**a, text)), text);
  // Added tokens split the text; the special one gives no text back, <sep> does.
  std::vector<int32_t> want = {258, 'o', 262, 'w', 'o', 261, 'x'};
  EXPECT_EQ(ids(**a, "hello<sep>wo<|endoftext|>x"), want);
  EXPECT_EQ((*a)->detokenize(want), "hello<sep>wox");
}

TEST(Tokenizer, HuggingFacePrefixSpaceTemplateIgnoreMerges) {
  // Vocabulary: bytes, Ġw 256, wo 257, Ġwo 258; added <|endoftext|> 259, <sep> 260; merges
  // Ġ+w, w+o (no Ġw+o); add_prefix_space; a template that puts <|endoftext|> first.
  std::string pre = "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
                    "[{\"SpecialToken\": {\"id\": \"<|endoftext|>\"}}, {\"Sequence\": {\"id\": "
                    "\"A\"}}], \"special_tokens\": {\"<|endoftext|>\": {\"ids\": [259]}}}, ";
  auto make = [&](bool ignoreMerges, const std::string &tag) {
    std::string json = hfJson({"\u0120w", "wo", "\u0120wo"}, "[\"\u0120 w\", \"w o\"]", pre,
                              ignoreMerges ? "\"ignore_merges\": true, " : "");
    size_t at = json.find("\"add_prefix_space\": false");
    json.replace(at, 25, "\"add_prefix_space\": true");
    auto t = hf(json, tag);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  };
  auto bpe = make(false, "hf3"), whole = make(true, "hf4");
  ASSERT_TRUE(bpe && whole);
  // "wo" becomes " wo": BPE merges Ġ+w first (rank 0) and then has no Ġw+o merge; with
  // ignore_merges the pre-token " wo" is a vocabulary entry and stays whole. Each piece between
  // added tokens gets its own prefix space.
  EXPECT_EQ(ids(*bpe, "wo"), (std::vector<int32_t>{259, 256, 'o'}));
  EXPECT_EQ(ids(*whole, "wo"), (std::vector<int32_t>{259, 258}));
  EXPECT_EQ(ids(*whole, "a<sep>wo"), (std::vector<int32_t>{259, ' ', 'a', 260, 258}));
  EXPECT_EQ(whole->detokenize({259, ' ', 'a', 260, 258}), " a<sep> wo");
}

TEST(Tokenizer, HuggingFaceErrors) {
  auto err = [](const std::string &json, const std::string &tag) {
    return hf(json, tag).status().ToString();
  };
  std::string ok = hfJson({}, "[]");
  auto replace = [&](std::string s, const std::string &from, const std::string &to) {
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  EXPECT_NE(err("[1]", "e1").find("tokenizer.json': not a JSON object"), std::string::npos);
  EXPECT_NE(err(replace(ok, "\"type\": \"BPE\"", "\"type\": \"WordPiece\""), "e2")
                .find("model.type is 'WordPiece'; trainc reads BPE models only"),
            std::string::npos);
  EXPECT_NE(err(replace(ok, "\"dropout\": null", "\"dropout\": 0.1"), "e3")
                .find("model.dropout = 0.1 is not supported yet"),
            std::string::npos);
  EXPECT_NE(err(replace(ok, "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}"), "e4")
                .find("normalizer {\"type\":\"NFC\"} is not supported yet"),
            std::string::npos);
  EXPECT_NE(err(replace(ok, "\"type\": \"ByteLevel\"", "\"type\": \"Metaspace\""), "e5")
                .find("pre_tokenizer {"),
            std::string::npos);
  EXPECT_NE(err(hfJson({}, "[\"a\"]"), "e6").find("merge 0 'a' is not two tokens"),
            std::string::npos);
  EXPECT_NE(err(replace(ok, "\"id\": 256,", "\"id\": 300,"), "e7")
                .find("do not have the ids [0, 258) (largest id 300)"),
            std::string::npos);
  EXPECT_NE(err(replace(ok, "\"content\": \"<|endoftext|>\"", "\"content\": \"<x>\""), "e8")
                .find("no end-of-document token"),
            std::string::npos);
  // Fields of an unexpected JSON type are read as absent, never thrown on.
  auto odd = hf(replace(replace(ok, "\"dropout\": null", "\"dropout\": null, \"ignore_merges\": "
                                                       "null"),
                        "\"add_prefix_space\": false", "\"add_prefix_space\": \"no\""),
                "e9");
  EXPECT_TRUE(odd.ok()) << odd.status();
  EXPECT_NE(err(replace(ok, "\"type\": \"ByteLevel\"", "\"type\": 7"), "e10").find("pre_tokenizer"),
            std::string::npos);
  TokenizerOptions o;
  o.type = "HuggingFaceTokenizer";
  o.tokenizerModel = "/nonexistent/dir";
  EXPECT_EQ(createTokenizer(o).status().code(), absl::StatusCode::kNotFound);
}
