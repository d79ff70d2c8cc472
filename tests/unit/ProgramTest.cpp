//===- ProgramTest.cpp - Program file format, validator, executor --------===//

#include "runtime/comm/Communicator.h"
#include "runtime/core/Crc32c.h"
#include "runtime/core/Executor.h"
#include "runtime/core/Init.h"
#include "runtime/core/Philox.h"
#include "runtime/core/Program.h"
#include "runtime/core/ProgramBuilder.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <tuple>

using namespace trainc::rt;
using trainc::schema::Program;
namespace schema = trainc::schema;

namespace {

/// y = a @ b + bias (f32), one function; a valid baseline that each refusal test breaks once.
struct Baseline {
  ProgramBuilder b;
  int a, w, y, bias, fn;
  Baseline() {
    a = b.addBuffer("a", schema::ACTIVATION, DType::F32, {4, 3});
    w = b.addBuffer("w", schema::PARAMETER, DType::F32, {3, 5});
    bias = b.addBuffer("bias", schema::PARAMETER, DType::F32, {5});
    y = b.addBuffer("y", schema::ACTIVATION, DType::F32, {4, 5});
    fn = b.addFunction("main");
    b.setCurrentLocation(b.addLocation("model.mlir", 7, 3, "model.linear"));
    b.kernel(fn, "matmul", {ProgramBuilder::buf(a), ProgramBuilder::buf(w)},
             {ProgramBuilder::buf(y)});
    b.kernel(fn, "add_bias", {ProgramBuilder::buf(y), ProgramBuilder::buf(bias)},
             {ProgramBuilder::buf(y)}, {}, {0});
  }
};

std::string validateMessage(const Program &p) {
  absl::Status s = validateProgram(p);
  return s.ok() ? "" : std::string(s.message());
}

TEST(Validator, AcceptsBaseline) {
  Baseline base;
  EXPECT_EQ(validateMessage(base.b.finish()), "");
}

TEST(Validator, RefusesOffsetOutsideArena) {
  Baseline base;
  Program p = base.b.finish();
  p.mutable_buffers(base.y)->set_offset(p.arena_bytes());
  std::string m = validateMessage(p);
  EXPECT_NE(m.find("buffer 3 'y': offset"), std::string::npos) << m;
  EXPECT_NE(m.find("outside the arena"), std::string::npos) << m;
}

TEST(Validator, RefusesOperandViewOutsideItsBuffer) {
  Baseline base;
  Program p = base.b.finish();
  auto *in = p.mutable_functions(0)->mutable_body(0)->mutable_kernel()->mutable_inputs(0);
  *in = ProgramBuilder::buf(base.a, 5, {4, 3});
  std::string m = validateMessage(p);
  EXPECT_NE(m.find("function 'main' instruction 0 (loc model.mlir:7:3 model.linear)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("input 0: offset 5 + 12 elements"), std::string::npos) << m;
}

TEST(Validator, RefusesUndeclaredOverlap) {
  Baseline base;
  Program p = base.b.finish();
  p.mutable_functions(0)->mutable_body(1)->mutable_kernel()->clear_in_place();
  std::string m = validateMessage(p);
  EXPECT_NE(m.find("instruction 1"), std::string::npos) << m;
  EXPECT_NE(m.find("output 0 overlaps input 0 without an in_place declaration"),
            std::string::npos)
      << m;
}

TEST(Validator, RefusesPartialInPlace) {
  Baseline base;
  Program p = base.b.finish();
  *p.mutable_functions(0)->mutable_body(1)->mutable_kernel()->mutable_outputs(0) =
      ProgramBuilder::buf(base.y, 5, {3, 5});
  *p.mutable_functions(0)->mutable_body(1)->mutable_kernel()->mutable_inputs(0) =
      ProgramBuilder::buf(base.y, 0, {3, 5});
  std::string m = validateMessage(p);
  EXPECT_NE(m.find("declared in place of input 0 but covers a different range"), std::string::npos)
      << m;
}

TEST(Validator, RefusesDTypeMismatch) {
  Baseline base;
  Program p = base.b.finish();
  p.mutable_buffers(base.w)->set_dtype(schema::F64);
  p.mutable_buffers(base.w)->set_byte_size(15 * 8);
  p.set_arena_bytes(p.arena_bytes() + 1024);
  p.mutable_buffers(base.w)->set_offset(p.arena_bytes() - 512);
  std::string m = validateMessage(p);
  EXPECT_NE(m.find("kernel 'matmul' input 1: dtype f64, expected f32"), std::string::npos) << m;
}

TEST(Validator, RefusesShapeMismatch) {
  Baseline base;
  Program p = base.b.finish();
  *p.mutable_functions(0)->mutable_body(0)->mutable_kernel()->mutable_inputs(1) =
      ProgramBuilder::buf(base.w, 0, {5, 3});
  std::string m = validateMessage(p);
  EXPECT_NE(m.find("kernel 'matmul' input 1: shape [5, 3], expected contraction dim 3"),
            std::string::npos)
      << m;
}

TEST(Validator, RefusesWrongOperandCount) {
  Baseline base;
  Program p = base.b.finish();
  p.mutable_functions(0)->mutable_body(0)->mutable_kernel()->mutable_inputs()->RemoveLast();
  std::string m = validateMessage(p);
  EXPECT_NE(m.find("kernel 'matmul' takes 2 inputs and 1 outputs, got 1 inputs and 1 outputs"),
            std::string::npos)
      << m;
}

TEST(Validator, RefusesUnknownKernel) {
  Baseline base;
  Program p = base.b.finish();
  p.mutable_functions(0)->mutable_body(0)->mutable_kernel()->set_kernel("conv3d");
  std::string m = validateMessage(p);
  EXPECT_NE(m.find("function 'main' instruction 0"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown kernel 'conv3d'"), std::string::npos) << m;
}

TEST(Validator, RefusesUnknownAttribute) {
  Baseline base;
  Program p = base.b.finish();
  auto *a = p.mutable_functions(0)->mutable_body(0)->mutable_kernel()->add_attrs();
  a->set_name("transpose");
  a->mutable_value()->set_i(1);
  std::string m = validateMessage(p);
  EXPECT_NE(m.find("unknown attribute 'transpose' (kernel 'matmul' takes: trans_a, trans_b, "
                   "alpha, beta)"),
            std::string::npos)
      << m;
}

TEST(Validator, RefusesGroupRankOutsideMesh) {
  Baseline base;
  base.b.addGroup("dp", {0, 3});
  std::string m = validateMessage(base.b.finish());
  EXPECT_NE(m.find("communicator group 0 'dp' names rank 3, outside the mesh of 1 ranks"),
            std::string::npos)
      << m;
}

TEST(Validator, RefusesNewerFormatVersion) {
  Baseline base;
  Program p = base.b.finish();
  p.set_format_version(kFormatVersion + 1);
  std::string m = validateMessage(p);
  const std::string newer = std::to_string(kFormatVersion + 1);
  EXPECT_NE(m.find("format_version " + newer + " is not supported"), std::string::npos) << m;
  // And at file level, before parsing the payload.
  std::string bytes = serializeProgram(p);
  auto parsed = parseProgram(bytes);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("program format version " + newer + " is not supported"),
            std::string::npos)
      << parsed.status();
}

TEST(Validator, RefusesTruncatedFile) {
  Baseline base;
  std::string bytes = serializeProgram(base.b.finish());
  ASSERT_TRUE(parseProgram(bytes).ok());
  for (size_t cut : {size_t(0), size_t(10), kProgramHeaderSize, bytes.size() - 1}) {
    auto parsed = parseProgram(std::string_view(bytes).substr(0, cut));
    ASSERT_FALSE(parsed.ok()) << cut;
    EXPECT_NE(parsed.status().message().find("truncated"), std::string::npos) << parsed.status();
  }
}

TEST(Crc32c, MatchesTheCheckValue) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  // 32 zero bytes and 32 0xff bytes (RFC 3720, B.4).
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  // In pieces, across the 8-byte blocks.
  std::string s = "The quick brown fox jumps over the lazy dog, twice over: 0123456789";
  for (size_t cut = 0; cut <= s.size(); ++cut)
    EXPECT_EQ(crc32c(std::string_view(s).substr(cut), crc32c(std::string_view(s).substr(0, cut))),
              crc32c(s))
        << cut;
}

namespace {
std::string hex(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", unsigned(v));
  return buf;
}
uint32_t headerCrc(const std::string &bytes) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= uint32_t(uint8_t(bytes[12 + i])) << (8 * i);
  return v;
}
} // namespace

TEST(Validator, WritesThePayloadChecksum) {
  Baseline base;
  std::string bytes = serializeProgram(base.b.finish());
  EXPECT_EQ(uint8_t(bytes[8]), kFormatVersion);
  EXPECT_EQ(headerCrc(bytes), crc32c(std::string_view(bytes).substr(kProgramHeaderSize)));
  EXPECT_NE(headerCrc(bytes), 0u);
}

TEST(Validator, RefusesAFlippedPayloadByte) {
  Baseline base;
  std::string bytes = serializeProgram(base.b.finish());
  ASSERT_TRUE(parseProgram(bytes).ok());
  const uint32_t stored = headerCrc(bytes);
  for (size_t at : {kProgramHeaderSize, kProgramHeaderSize + 7, bytes.size() / 2, bytes.size() - 1}) {
    std::string bad = bytes;
    bad[at] ^= 0x10;
    const uint32_t computed = crc32c(std::string_view(bad).substr(kProgramHeaderSize));
    auto parsed = parseProgram(bad);
    ASSERT_FALSE(parsed.ok()) << at;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(parsed.status().message(), "payload checksum " + hex(computed) +
                                             " does not match the header's " + hex(stored) +
                                             " (the file is corrupted)")
        << at;
  }
  // The file's name leads the message.
  std::string bad = bytes;
  bad[bytes.size() / 2] ^= 0x01;
  const std::string path = ::testing::TempDir() + "/flipped-rank0.pb";
  std::ofstream(path, std::ios::binary) << bad;
  auto parsed = readProgramFile(path);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message().rfind(path + ": payload checksum 0x", 0), 0u)
      << parsed.status();
  std::remove(path.c_str());
}

TEST(Validator, RefusesAFlippedHeaderByte) {
  Baseline base;
  std::string bytes = serializeProgram(base.b.finish());
  for (size_t at = 0; at < kProgramHeaderSize; ++at)
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[at] ^= char(1 << bit);
      EXPECT_FALSE(parseProgram(bad).ok()) << "byte " << at << " bit " << bit;
    }
  // A changed checksum byte is named as such.
  std::string bad = bytes;
  bad[13] ^= 0x40;
  auto parsed = parseProgram(bad);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find(" does not match the header's " + hex(headerCrc(bad))),
            std::string::npos)
      << parsed.status();
}

TEST(Validator, RefusesFilesWithoutAChecksum) {
  // Versions 1 and 2 wrote 0 where the checksum now is: recompile them.
  Baseline base;
  for (uint32_t v : {1u, 2u}) {
    Program p = base.b.finish();
    p.set_format_version(v);
    auto parsed = parseProgram(serializeProgram(p));
    ASSERT_FALSE(parsed.ok()) << v;
    EXPECT_NE(parsed.status().message().find(
                  "program format version " + std::to_string(v) +
                  " is not supported: this runtime reads version 3, and files before version 3 "
                  "have no payload checksum (recompile the plan with trainc compile)"),
              std::string::npos)
        << parsed.status();
  }
}

TEST(Validator, RefusesBadMagicAndGarbage) {
  auto parsed = parseProgram(std::string(64, 'x'));
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("not a trainc program"), std::string::npos);
}

TEST(Validator, RefusesMissingFile) {
  auto parsed = readProgramFile("/nonexistent/rank0.pb");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("cannot read program file '/nonexistent/rank0.pb': No such file or directory"),
            std::string::npos);
}

TEST(Validator, RefusesByteSizeMismatch) {
  Baseline base;
  Program p = base.b.finish();
  p.mutable_buffers(base.a)->set_byte_size(40);
  std::string m = validateMessage(p);
  EXPECT_NE(m.find("buffer 0 'a': byte_size 40 differs from 48"), std::string::npos) << m;
}

TEST(Validator, RefusesRecursionAndBadCallBinding) {
  ProgramBuilder b;
  int x = b.addBuffer("x", schema::ACTIVATION, DType::F32, {8});
  int main = b.addFunction("main");
  int f = b.addFunction("f", {{"v", DType::F32, {8}}});
  b.call(main, f, {ProgramBuilder::buf(x)});
  b.call(f, f, {ProgramBuilder::arg(0)});
  std::string m = validateMessage(b.finish());
  EXPECT_NE(m.find("makes the call graph recursive"), std::string::npos) << m;

  ProgramBuilder b2;
  x = b2.addBuffer("x", schema::ACTIVATION, DType::F32, {4});
  main = b2.addFunction("main");
  f = b2.addFunction("f", {{"v", DType::F32, {8}}});
  b2.call(main, f, {ProgramBuilder::buf(x)});
  m = validateMessage(b2.finish());
  EXPECT_NE(m.find("call of 'f' argument 0 'v': got f32 [4], expected f32 [8]"),
            std::string::npos)
      << m;
}

TEST(Validator, RefusesUnbalancedTokensAndRegions) {
  ProgramBuilder b;
  int x = b.addBuffer("x", schema::MAIN_GRAD, DType::F32, {8});
  int dp = b.addGroup("dp", {0});
  int main = b.addFunction("main");
  b.collective(main, schema::ALL_REDUCE, dp, ProgramBuilder::buf(x), ProgramBuilder::buf(x),
               schema::SUM, /*async=*/true, 0);
  std::string m = validateMessage(b.finish());
  EXPECT_NE(m.find("async token 0 is still pending at the end of 'main' (missing wait)"),
            std::string::npos)
      << m;
  b.wait(main, 0);
  EXPECT_EQ(validateMessage(b.finish()), "");
  b.wait(main, 0);
  m = validateMessage(b.finish());
  EXPECT_NE(m.find("wait on token 0 that no async operation started"), std::string::npos) << m;

  ProgramBuilder r;
  main = r.addFunction("main");
  r.region(main, schema::GRAPH_CAPTURE_BEGIN, "iteration");
  r.hostIO(main, schema::FILL_INPUTS, "batch");
  r.region(main, schema::GRAPH_CAPTURE_END, "iteration");
  m = validateMessage(r.finish());
  EXPECT_NE(m.find("host_io 'batch' inside a graph-capture region"), std::string::npos) << m;
}

TEST(Validator, CarriedTokensCrossRunsAndAsyncCollectivesAvoidHostBuffers) {
  // A carried token may be pending at the end of an entry, and must be waited before it is
  // started again (it may still be in flight from the previous run).
  ProgramBuilder b;
  int x = b.addBuffer("x", schema::PARAMETER, DType::F32, {8});
  int dp = b.addGroup("dp", {0});
  int main = b.addFunction("main");
  b.wait(main, 0);
  b.collective(main, schema::ALL_REDUCE, dp, ProgramBuilder::buf(x), ProgramBuilder::buf(x),
               schema::SUM, /*async=*/true, 0);
  Program p = b.finish();
  // Not carried: the wait has nothing to wait for.
  EXPECT_NE(validateMessage(p).find("wait on token 0 that no async operation started"),
            std::string::npos)
      << validateMessage(p);
  p.add_carried_tokens(0);
  EXPECT_EQ(validateMessage(p), "");
  // Started again without the wait first: refused.
  ProgramBuilder b2;
  x = b2.addBuffer("x", schema::PARAMETER, DType::F32, {8});
  dp = b2.addGroup("dp", {0});
  main = b2.addFunction("main");
  b2.collective(main, schema::ALL_REDUCE, dp, ProgramBuilder::buf(x), ProgramBuilder::buf(x),
                schema::SUM, /*async=*/true, 0);
  Program p2 = b2.finish();
  p2.add_carried_tokens(0);
  std::string m = validateMessage(p2);
  EXPECT_NE(m.find("async token 0 is started again before its wait"), std::string::npos) << m;
  p2.clear_carried_tokens();
  p2.add_carried_tokens(5);
  m = validateMessage(p2);
  EXPECT_NE(m.find("carried token 5 is outside num_tokens 1"), std::string::npos) << m;

  // The host touches INPUT, SCALAR and OUTPUT buffers while collectives run: no async
  // collective on them.
  ProgramBuilder h;
  int out = h.addBuffer("loss_sum", schema::OUTPUT, DType::F32, {1});
  dp = h.addGroup("dp", {0});
  main = h.addFunction("main");
  h.collective(main, schema::ALL_REDUCE, dp, ProgramBuilder::buf(out), ProgramBuilder::buf(out),
               schema::SUM, /*async=*/true, 0);
  h.wait(main, 0);
  m = validateMessage(h.finish());
  EXPECT_NE(m.find("async collective on buffer 'loss_sum' of kind OUTPUT, which the host "
                   "accesses while collectives run (use a sync collective)"),
            std::string::npos)
      << m;
}

TEST(Executor, RunsFunctionsWithBindingsAndTracksHighWaterMark) {
  // main: fill a, b; call axpy(a, b -> c) twice on different views.
  ProgramBuilder b;
  int a = b.addBuffer("a", schema::ACTIVATION, DType::F32, {2, 4});
  int c = b.addBuffer("c", schema::ACTIVATION, DType::F32, {2, 4});
  int unused = b.addBuffer("unused", schema::WORKSPACE, DType::F32, {1024});
  (void)unused;
  int main = b.addFunction("main");
  int axpy = b.addFunction("axpy", {{"x", DType::F32, {4}}, {"y", DType::F32, {4}}});
  b.kernel(axpy, "add", {ProgramBuilder::arg(1), ProgramBuilder::arg(0)}, {ProgramBuilder::arg(1)},
           {AttrArg("alpha", 2.0)}, {0});
  b.kernel(main, "fill", {}, {ProgramBuilder::buf(a, 0, {4})}, {AttrArg("value", 1.0)});
  b.kernel(main, "fill", {}, {ProgramBuilder::buf(a, 4, {4})}, {AttrArg("value", 3.0)});
  b.kernel(main, "fill", {}, {ProgramBuilder::buf(c)}, {AttrArg("value", 0.5)});
  b.call(main, axpy, {ProgramBuilder::buf(a, 0, {4}), ProgramBuilder::buf(c, 0, {4})});
  b.call(main, axpy, {ProgramBuilder::buf(a, 4, {4}), ProgramBuilder::buf(c, 4, {4})});
  Program p = b.finish();
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  auto ex = Executor::create(p, *backend, *comm);
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_TRUE((*ex)->run().ok());
  std::vector<float> out(8);
  ASSERT_TRUE((*ex)->readBuffer(c, out.data(), 32).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i], 0.5f + 2.0f * 1.0f);
    EXPECT_EQ(out[4 + i], 0.5f + 2.0f * 3.0f);
  }
  EXPECT_EQ((*ex)->lastInstructionCount(), 7u);
  // The workspace buffer is never touched: the high-water mark ends at c.
  EXPECT_EQ((*ex)->highWaterMark(), p.buffers(c).offset() + p.buffers(c).byte_size());
  EXPECT_GT(p.arena_bytes(), (*ex)->highWaterMark());
}

TEST(Executor, AsyncCollectiveAndHostIO) {
  ProgramBuilder b;
  int g = b.addBuffer("grad", schema::MAIN_GRAD, DType::F32, {16});
  int out = b.addBuffer("out", schema::OUTPUT, DType::F32, {16});
  int in = b.addBuffer("in", schema::INPUT, DType::F32, {16});
  int dp = b.addGroup("dp", {0});
  int main = b.addFunction("main");
  b.hostIO(main, schema::FILL_INPUTS, "inputs");
  b.kernel(main, "scale", {ProgramBuilder::buf(in)}, {ProgramBuilder::buf(g)},
           {AttrArg("alpha", 2.0)});
  b.collective(main, schema::ALL_REDUCE, dp, ProgramBuilder::buf(g), ProgramBuilder::buf(g),
               schema::SUM, true, 3);
  b.wait(main, 3);
  b.kernel(main, "copy", {ProgramBuilder::buf(g)}, {ProgramBuilder::buf(out)});
  b.hostIO(main, schema::READ_OUTPUTS, "outputs");
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  auto ex = Executor::create(b.finish(), *backend, *comm, {.timing = true});
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::vector<float> result(16);
  int calls = 0;
  absl::Status s = (*ex)->run([&](schema::HostIOKind k, const std::string &name) {
    ++calls;
    if (k == schema::FILL_INPUTS) {
      std::vector<float> v(16);
      for (int i = 0; i < 16; ++i)
        v[i] = float(i);
      return (*ex)->writeBuffer(in, v.data(), 64);
    }
    return (*ex)->readBuffer(out, result.data(), 64);
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, 2);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(result[i], 2.0f * i);
  auto t = (*ex)->timings();
  EXPECT_EQ(t.size(), 6u);
  bool sawComm = false;
  for (const InstrTiming &x : t)
    sawComm |= x.stream == kCommStream;
  EXPECT_TRUE(sawComm);
}

TEST(Executor, RefusesProgramForAnotherRank) {
  ProgramBuilder b;
  b.setMesh({"dp"}, {2}, 1);
  b.addFunction("main");
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  auto ex = Executor::create(b.finish(), *backend, *comm);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("program is for rank 1 of 2"), std::string::npos)
      << ex.status();
}

} // namespace

namespace {

// The threaded initialisation (chunks of 16384 elements) gives initialValue's values bit for bit,
// on 1 and 2 threads, for a slice whose rows do not start at an even global index.
TEST(Init, ThreadedEqualsInitialValueOn1And2Threads) {
  ProgramBuilder b;
  int w = b.addBuffer("w", schema::PARAMETER, DType::F32, {301, 257});
  int ones = b.addBuffer("o", schema::PARAMETER, DType::BF16, {40000});
  b.addFunction("main");
  schema::Program p = b.finish();
  schema::Parameter *q = p.add_parameters();
  q->set_name("big.weight");
  for (int64_t d : {603, 513})
    q->add_global_shape(d);
  for (int64_t d : {301, 255})
    q->add_slice_start(d);
  for (int64_t d : {301, 257})
    q->add_slice_size(d);
  q->set_buffer(uint32_t(w));
  q->set_init("normal");
  q->set_init_std(0.02);
  schema::Parameter *o = p.add_parameters();
  o->set_name("norm.weight");
  o->add_global_shape(40000);
  o->add_slice_start(0);
  o->add_slice_size(40000);
  o->set_buffer(uint32_t(ones));
  o->set_init("ones");
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  std::vector<float> got[2];
  for (int k = 0; k < 2; ++k) {
    auto ex = Executor::create(p, *backend, *comm);
    ASSERT_TRUE(ex.ok()) << ex.status();
    int saved = omp_get_max_threads();
    omp_set_num_threads(k + 1);
    ASSERT_TRUE(initializeParameters(**ex, 99).ok());
    omp_set_num_threads(saved);
    got[k].resize(301 * 257);
    ASSERT_TRUE((*ex)->readBuffer(w, got[k].data(), got[k].size() * 4).ok());
    std::vector<bf16> h(40000);
    ASSERT_TRUE((*ex)->readBuffer(ones, h.data(), h.size() * 2).ok());
    for (size_t i = 0; i < h.size(); ++i)
      ASSERT_EQ(float(h[i]), 1.0f) << i;
  }
  EXPECT_EQ(got[0], got[1]);
  for (int64_t r = 0; r < 301; ++r)
    for (int64_t c = 0; c < 257; ++c) {
      uint64_t g = uint64_t(301 + r) * 513 + uint64_t(255 + c);
      float ref = float(initialValue(*q, 99, g));
      ASSERT_EQ(got[0][size_t(r * 257 + c)], ref) << r << " " << c;
    }
}

// The batched Philox path (runs along the last dimension, 128 pairs per batch) against
// initialValue (one philoxNormal2 call per element, the scalar reference) in every stored dtype:
// an f64 rank-3 slice with odd starts in every dimension, a bf16 rank-1 slice starting at an odd
// global index with a length that is not a multiple of the batch, and an f32 [1, n] row longer
// than a chunk; on 1 and 2 threads.
TEST(Init, BatchedPathEqualsInitialValueInEveryDtypeOn1And2Threads) {
  struct Spec {
    const char *name;
    DType t;
    std::vector<int64_t> global, start, size;
  };
  std::vector<Spec> specs = {
      {"a.f64", DType::F64, {7, 33, 65}, {1, 3, 5}, {5, 29, 57}},
      {"b.bf16", DType::BF16, {100003}, {7}, {99991}},
      {"c.f32", DType::F32, {1, 40001}, {0, 1}, {1, 40000}},
  };
  ProgramBuilder b;
  std::vector<int> bufs;
  for (const Spec &sp : specs) {
    int64_t n = 1;
    for (int64_t d : sp.size)
      n *= d;
    bufs.push_back(b.addBuffer(std::string(sp.name) + ".buf", schema::PARAMETER, sp.t, {n}));
  }
  b.addFunction("main");
  schema::Program p = b.finish();
  std::vector<schema::Parameter *> params;
  for (size_t i = 0; i < specs.size(); ++i) {
    schema::Parameter *q = p.add_parameters();
    q->set_name(specs[i].name);
    for (size_t d = 0; d < specs[i].global.size(); ++d) {
      q->add_global_shape(specs[i].global[d]);
      q->add_slice_start(specs[i].start[d]);
      q->add_slice_size(specs[i].size[d]);
    }
    q->set_buffer(uint32_t(bufs[i]));
    q->set_init("normal");
    q->set_init_std(0.5);
    params.push_back(q);
  }
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  // got[threads - 1][parameter] = the values read back, widened to double.
  std::vector<std::vector<double>> got[2];
  for (int k = 0; k < 2; ++k) {
    auto ex = Executor::create(p, *backend, *comm);
    ASSERT_TRUE(ex.ok()) << ex.status();
    int saved = omp_get_max_threads();
    omp_set_num_threads(k + 1);
    ASSERT_TRUE(initializeParameters(**ex, 0x123456789abcdefull).ok());
    omp_set_num_threads(saved);
    for (size_t i = 0; i < specs.size(); ++i) {
      int64_t n = 1;
      for (int64_t d : specs[i].size)
        n *= d;
      std::vector<double> vals(static_cast<size_t>(n));
      std::vector<char> raw(size_t(n) * dtypeSize(specs[i].t));
      ASSERT_TRUE((*ex)->readBuffer(bufs[i], raw.data(), raw.size()).ok());
      for (int64_t e = 0; e < n; ++e) {
        if (specs[i].t == DType::F64) {
          std::memcpy(&vals[size_t(e)], raw.data() + e * 8, 8);
        } else if (specs[i].t == DType::F32) {
          float f;
          std::memcpy(&f, raw.data() + e * 4, 4);
          vals[size_t(e)] = f;
        } else {
          bf16 h;
          std::memcpy(&h, raw.data() + e * 2, 2);
          vals[size_t(e)] = float(h);
        }
      }
      got[k].push_back(std::move(vals));
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_EQ(got[0][i], got[1][i]) << specs[i].name;
    const Spec &sp = specs[i];
    int rank = int(sp.size.size());
    std::vector<int64_t> idx(size_t(rank), 0);
    double sum2 = 0;
    for (size_t e = 0; e < got[0][i].size(); ++e) {
      uint64_t g = 0;
      for (int d = 0; d < rank; ++d)
        g = g * uint64_t(sp.global[size_t(d)]) + uint64_t(sp.start[size_t(d)] + idx[size_t(d)]);
      double ref = initialValue(*params[i], 0x123456789abcdefull, g);
      double want = sp.t == DType::F64   ? ref
                    : sp.t == DType::F32 ? double(float(ref))
                                         : double(float(bf16(float(ref))));
      ASSERT_EQ(got[0][i][e], want) << sp.name << " element " << e;
      sum2 += want * want;
      for (int d = rank - 1; d >= 0; --d) {
        if (++idx[size_t(d)] < sp.size[size_t(d)])
          break;
        idx[size_t(d)] = 0;
      }
    }
    // The draws are N(0, 0.25): the mean square is near 0.25 (a loose bound; not a fixed value).
    double ms = sum2 / double(got[0][i].size());
    EXPECT_GT(ms, 0.2) << sp.name;
    EXPECT_LT(ms, 0.3) << sp.name;
  }
}

// Initialisation's own log (initmath::logUnit) against the long-double libm log (x87, 64-bit
// mantissa: its own error is ~1e-19, negligible here): u = 2^-53, 1, the fold point sqrt(1/2) and
// its neighbours, powers of two, and 10^6 uniforms of the Box-Muller form (k + 1) 2^-53 drawn
// from Philox. Bound: 4 ulp of the result (the reduction and the series round ~5 times;
// measured max 1.97 ulp).
TEST(Init, OwnLogIsWithinFourUlpOfLibm) {
  auto check = [](double u) {
    double got = initmath::logUnit(u);
    long double ref = logl((long double)u);
    double ulp = std::nextafter(std::fabs(double(ref)), INFINITY) - std::fabs(double(ref));
    if (ref == 0.0L) {
      EXPECT_EQ(got, 0.0) << u;
      return 0.0;
    }
    double err = double(std::fabs((long double)got - ref)) / ulp;
    EXPECT_LE(err, 4.0) << "u = " << u << " got " << got << " ref " << double(ref);
    return err;
  };
  double maxErr = 0;
  std::vector<double> special = {1.0, 0x1p-53, 0x1p-1, 0x1p-52, 0.5 + 0x1p-53, 1.0 - 0x1p-53,
                                 0.7071067811865475, 0.7071067811865476, 0.70710678118654757,
                                 1.0 - 0x1p-30, 0x1.6a09e667f3bcdp-1, 0x1.6a09e667f3bccp-1};
  for (double u : special)
    maxErr = std::max(maxErr, check(u));
  for (uint64_t i = 0; i < 500000; ++i) {
    uint32_t c[4] = {uint32_t(i), 0, 7, 9};
    philox4x32(1, 2, c);
    for (int h = 0; h < 2; ++h) {
      uint64_t k = (uint64_t(c[2 * h]) << 21) | (c[2 * h + 1] >> 11);
      // Also the small u (deep exponents) by shifting k down: (k >> s) + 1 for s = i % 53.
      uint64_t kk = h ? (k >> (i % 53)) : k;
      maxErr = std::max(maxErr, check(double(kk + 1) * 0x1p-53));
    }
  }
  EXPECT_LT(maxErr, 4.0);
  std::printf("logUnit: max error %.2f ulp\n", maxErr);
}

// initmath::sinCosTurns against long-double sinl / cosl of 2 pi x 2^-53 (the long-double angle's
// own error is ~1e-19 absolute): the quarter-turn boundaries and their neighbours, and 10^6 53-bit
// Philox integers. Bound: 4e-16 absolute (2 ulp of 1; measured max 1.85e-16).
TEST(Init, OwnSinCosIsWithinTwoUlpOfOne) {
  const long double twoPi = 6.283185307179586476925286766559L;
  double maxErr = 0;
  auto check = [&](uint64_t x) {
    double s, c;
    initmath::sinCosTurns(x, &s, &c);
    long double a = twoPi * ((long double)x * 0x1p-53L);
    double es = double(std::fabs((long double)s - sinl(a)));
    double ec = double(std::fabs((long double)c - cosl(a)));
    EXPECT_LE(es, 4e-16) << "x = " << x;
    EXPECT_LE(ec, 4e-16) << "x = " << x;
    maxErr = std::max({maxErr, es, ec});
  };
  for (uint64_t q = 0; q <= 4; ++q)
    for (int64_t d : {-3, -2, -1, 0, 1, 2, 3})
      for (int64_t half : {0, 1}) {
        int64_t x = int64_t(q << 51) + d + (half ? int64_t(1) << 50 : 0);
        if (x >= 0 && x < (int64_t(1) << 53))
          check(uint64_t(x));
      }
  for (uint64_t i = 0; i < 500000; ++i) {
    uint32_t c[4] = {uint32_t(i), 3, 5, 8};
    philox4x32(11, 12, c);
    check((uint64_t(c[0]) << 21) | (c[1] >> 11));
    check((uint64_t(c[2]) << 21) | (c[3] >> 11));
  }
  std::printf("sinCosTurns: max error %.3g\n", maxErr);
}

// The independent reference for the init values: Box-Muller with glibc's log, cos and sin
// (philoxNormal2, the definition before issue 17; same Philox counters and uniforms). The only
// differences are the two functions' errors and the old angle's rounding: 6.283185307179586 * u2
// was rounded to double (up to 4.4e-16 absolute for angles near 2 pi), which moves r cos, r sin
// by up to r * 4.4e-16, r <= sqrt(2 * 53 ln 2) = 8.6. Bound: 6e-15 absolute plus 4e-16 relative;
// measured max 3.1e-15. Rounded to f32 the values are the old ones except when the double lies
// within ~1e-15 of a rounding boundary (measured: 0 of 2 * 10^6).
TEST(Init, NormalPairsMatchLibmBoxMuller) {
  const uint64_t seed = 0x0123456789abcdefull, key = parameterKey("decoder.layers.0.mlp.w");
  double maxDiff = 0, sum = 0, sum2 = 0;
  int floatDiffer = 0;
  const int n = 1000000;
  for (uint64_t pair = 0; pair < uint64_t(n); ++pair) {
    double got[2], ref[2];
    initNormalPair(seed, key, pair * 7919, got);
    philoxNormal2(seed, key, pair * 7919, ref);
    for (int h = 0; h < 2; ++h) {
      double d = std::fabs(got[h] - ref[h]);
      ASSERT_LE(d, 6e-15 + 4e-16 * std::fabs(ref[h])) << pair << " " << h;
      maxDiff = std::max(maxDiff, d);
      floatDiffer += float(got[h]) != float(ref[h]);
      sum += got[h];
      sum2 += got[h] * got[h];
    }
  }
  // 2e6 standard normals: mean within 5 sigma (5/sqrt(2e6) = 3.5e-3), variance within 5 sigma
  // (5 sqrt(2/2e6) = 5e-3).
  EXPECT_LT(std::fabs(sum / (2.0 * n)), 3.5e-3);
  EXPECT_LT(std::fabs(sum2 / (2.0 * n) - 1.0), 5e-3);
  EXPECT_LE(floatDiffer, 20);
  std::printf("initNormalPair vs libm Box-Muller: max |diff| %.3g, f32 values differing %d of %d\n",
              maxDiff, floatDiffer, 2 * n);
}

// Global indices around 2^33, where the Box-Muller pair index (the Philox counter's low word)
// wraps past 2^32: 4096 elements of a [2^34] parameter from 2^33 - 251, so the first batch starts
// at pair 2^32 - 126 and the wrap falls inside a vector of the Philox batch (lane 14 of a
// 16-counter AVX-512 vector, lane 6 of an 8-counter AVX2 one), not at a batch edge. Every element
// equals initialValue (scalar Philox with the 64-bit counter), with each Philox batch path the CPU
// has (AVX-512F, AVX2, portable).
TEST(Init, PairCounterCarryIntoTheHighWordMatchesInitialValue) {
  const int64_t n = 4096, start = (int64_t(1) << 33) - 251;
  ProgramBuilder b;
  int w = b.addBuffer("w", schema::PARAMETER, DType::F32, {n});
  b.addFunction("main");
  schema::Program p = b.finish();
  schema::Parameter *q = p.add_parameters();
  q->set_name("huge.weight");
  q->add_global_shape(int64_t(1) << 34);
  q->add_slice_start(start);
  q->add_slice_size(n);
  q->set_buffer(uint32_t(w));
  q->set_init("normal");
  q->set_init_std(1.0);
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  auto ex = Executor::create(p, *backend, *comm);
  ASSERT_TRUE(ex.ok()) << ex.status();
  // Every Philox batch path the CPU has: AVX-512F and AVX2 intrinsics, the portable loop.
  for (int isa : {2, 1, 0}) {
    int was = setPhiloxIsaForTesting(isa);
    ASSERT_TRUE(initializeParameters(**ex, 77).ok());
    setPhiloxIsaForTesting(was);
    std::vector<float> got(static_cast<size_t>(n));
    ASSERT_TRUE((*ex)->readBuffer(w, got.data(), got.size() * 4).ok());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[size_t(i)], float(initialValue(*q, 77, uint64_t(start + i))))
          << i << " isa " << isa;
  }
}

// Bytes outside every parameter keep their values (buffer a's last 3 elements), a buffer visited
// twice (a, then b, then a again) keeps the first visit's values, and a fully covered buffer (b)
// is written whole: written in place in the CPU arena, and through the host staging copy of a
// device backend (read from the buffer only when the run of consecutive parameters in it does not
// cover it; forced here with setInitStagingForTesting).
TEST(Init, KeepsBytesOutsideParametersAndRevisitedBuffers) {
  for (bool staged : {false, true}) {
  SCOPED_TRACE(staged ? "staged" : "in place");
  ProgramBuilder b;
  int a = b.addBuffer("a", schema::PARAMETER, DType::F32, {23});
  int bb = b.addBuffer("b", schema::PARAMETER, DType::F32, {8});
  b.addFunction("main");
  schema::Program p = b.finish();
  auto param = [&](const char *name, int buffer, int64_t n, uint64_t offset, const char *init) {
    schema::Parameter *q = p.add_parameters();
    q->set_name(name);
    q->add_global_shape(n);
    q->add_slice_start(0);
    q->add_slice_size(n);
    q->set_buffer(uint32_t(buffer));
    q->set_buffer_offset(offset);
    q->set_init(init);
    q->set_init_std(1.0);
  };
  param("a.first", a, 10, 0, "normal");
  param("b.whole", bb, 8, 0, "ones");
  param("a.second", a, 10, 10, "ones");
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  auto ex = Executor::create(p, *backend, *comm);
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::vector<float> sentinel(23, -7.0f), sentinelB(8, -7.0f);
  ASSERT_TRUE((*ex)->writeBuffer(a, sentinel.data(), 23 * 4).ok());
  ASSERT_TRUE((*ex)->writeBuffer(bb, sentinelB.data(), 8 * 4).ok());
  const bool was = setInitStagingForTesting(staged);
  ASSERT_TRUE(initializeParameters(**ex, 5).ok());
  setInitStagingForTesting(was);
  std::vector<float> got(23), gotB(8);
  ASSERT_TRUE((*ex)->readBuffer(a, got.data(), 23 * 4).ok());
  ASSERT_TRUE((*ex)->readBuffer(bb, gotB.data(), 8 * 4).ok());
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(got[size_t(i)], float(initialValue(p.parameters(0), 5, uint64_t(i)))) << i;
  for (int i = 10; i < 20; ++i)
    EXPECT_EQ(got[size_t(i)], 1.0f) << i;
  for (int i = 20; i < 23; ++i)
    EXPECT_EQ(got[size_t(i)], -7.0f) << i;
  for (float v : gotB)
    EXPECT_EQ(v, 1.0f);
  }
}

TEST(Init, SlicesGetTheirPartOfTheGlobalTensorAndF16IsInitialised) {
  // One [4, 6] parameter held whole in buffer w, and its rows [1, 3) held by buffer s at element
  // offset 2: the slice must equal those rows of the whole tensor (Init draws at the global index).
  ProgramBuilder b;
  int w = b.addBuffer("w", schema::PARAMETER, DType::F32, {4, 6});
  int s = b.addBuffer("s", schema::PARAMETER, DType::F32, {14});
  b.addFunction("main");
  schema::Program p = b.finish();
  auto param = [&](int buffer, std::vector<int64_t> start, std::vector<int64_t> size,
                   uint64_t offset) {
    schema::Parameter *q = p.add_parameters();
    q->set_name("layer.weight");
    for (int64_t d : {4, 6})
      q->add_global_shape(d);
    for (int64_t d : start)
      q->add_slice_start(d);
    for (int64_t d : size)
      q->add_slice_size(d);
    q->set_buffer(uint32_t(buffer));
    q->set_buffer_offset(offset);
    q->set_init("normal");
    q->set_init_std(0.02);
  };
  param(w, {0, 0}, {4, 6}, 0);
  param(s, {1, 0}, {2, 6}, 2);
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  auto ex = Executor::create(p, *backend, *comm);
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_TRUE(initializeParameters(**ex, 42).ok());
  std::vector<float> whole(24), slice(14);
  ASSERT_TRUE((*ex)->readBuffer(w, whole.data(), 96).ok());
  ASSERT_TRUE((*ex)->readBuffer(s, slice.data(), 56).ok());
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(slice[size_t(2 + i)], whole[size_t(6 + i)]) << i;
  double sum2 = 0;
  for (float x : whole)
    sum2 += double(x) * x;
  EXPECT_GT(sum2, 0);

  ProgramBuilder h;
  int hb = h.addBuffer("h", schema::PARAMETER, DType::F16, {4});
  h.addFunction("main");
  schema::Program ph = h.finish();
  schema::Parameter *q = ph.add_parameters();
  q->set_name("h");
  q->add_global_shape(4);
  q->add_slice_start(0);
  q->add_slice_size(4);
  q->set_buffer(uint32_t(hb));
  q->set_init("ones");
  auto exh = Executor::create(ph, *backend, *comm);
  ASSERT_TRUE(exh.ok()) << exh.status();
  absl::Status st = initializeParameters(**exh, 1);
  ASSERT_TRUE(st.ok()) << st; // f16 (--fp16) parameters are initialised as the others
  uint16_t hbits[4];
  ASSERT_TRUE((*exh)->readBuffer(hb, hbits, sizeof(hbits)).ok());
  for (uint16_t v : hbits)
    EXPECT_EQ(v, 0x3c00); // 1.0 in IEEE binary16
}

/// A training plan on a dp 2 mesh: micro batch 2, 2 microbatches, seq 3 (global batch 8) and the
/// host inputs tokens.<m> (i32 [2, 3]), loss_mask.<m> (f32 [2, 3]) and rng.<m> (i64 [3]):
/// buffers 0..2 are microbatch 0's, 3..5 microbatch 1's.
Program plannedProgram() {
  ProgramBuilder b;
  b.setMesh({"dp"}, {2}, 0);
  for (uint32_t m = 0; m < 2; ++m) {
    std::string sfx = "." + std::to_string(m);
    b.setHostInput(b.addBuffer("tokens" + sfx, schema::INPUT, DType::I32, {2, 3}), schema::TOKENS,
                   m);
    b.setHostInput(b.addBuffer("loss_mask" + sfx, schema::INPUT, DType::F32, {2, 3}),
                   schema::LOSS_MASK, m);
    b.setHostInput(b.addBuffer("rng" + sfx, schema::INPUT, DType::I64, {3}), schema::RNG, m);
  }
  b.setPlan(2, 2, 3, 16);
  b.addFunction("main");
  return b.finish();
}

/// Sets buffer `i`'s shape (and byte size) to `shape`.
void reshapeBuffer(Program &p, int i, std::vector<int64_t> shape) {
  schema::Buffer &buf = *p.mutable_buffers(i);
  buf.clear_shape();
  int64_t n = 1;
  for (int64_t d : shape) {
    buf.add_shape(d);
    n *= d;
  }
  buf.set_byte_size(uint64_t(n) * dtypeSize(DType(int(buf.dtype()))));
}

TEST(Validator, RefusesAScalarRoleOnTheWrongKind) {
  Program p = plannedProgram();
  p.mutable_buffers(2)->set_scalar_role(schema::LOSS_SUM);
  EXPECT_EQ(validateMessage(p), "buffer 2 'rng.0': scalar_role LOSS_SUM is set on a buffer of kind "
                                "INPUT, expected OUTPUT");
}

TEST(Validator, RefusesAScalarRoleTwiceOrOnATensor) {
  ProgramBuilder b;
  b.setMesh({"dp"}, {1}, 0);
  b.setHostInput(b.addBuffer("tokens.0", schema::INPUT, DType::I32, {2, 3}), schema::TOKENS, 0);
  b.addBuffer("lr", schema::SCALAR, DType::F32, {});
  int twin = b.addBuffer("lr2", schema::SCALAR, DType::F32, {});
  b.proto().mutable_buffers(twin)->set_scalar_role(schema::LR);
  b.setPlan(2, 1, 3, 16);
  b.addFunction("main");
  Program p = b.finish();
  EXPECT_EQ(validateMessage(p), "buffer 2 'lr2': scalar_role LR is also buffer 1 'lr'");
  p.mutable_buffers(2)->set_scalar_role(schema::STEP);
  reshapeBuffer(p, 2, {2});
  EXPECT_EQ(validateMessage(p), "buffer 2 'lr2': scalar_role STEP needs one element, the buffer "
                                "has 2");
  p.mutable_buffers(2)->set_scalar_role(schema::ScalarRole(99));
  EXPECT_EQ(validateMessage(p), "buffer 2 'lr2': scalar_role 99 is not a valid scalar role "
                                "(expected LR .. LOSS_SCALE_HYSTERESIS_TRACKER)");
}

TEST(Validator, AcceptsAPlanWithEveryHostInputOfEveryMicrobatch) {
  Program p = plannedProgram();
  EXPECT_EQ(p.plan().global_batch_size(), 8u);
  EXPECT_EQ(validateMessage(p), "");
  // A program without a plan and without host inputs is a plain executor program.
  Baseline base;
  EXPECT_FALSE(base.b.finish().has_plan());
}

TEST(Validator, RefusesAPlanFieldOfZero) {
  for (const char *field :
       {"micro_batch_size", "num_microbatches", "global_batch_size", "seq_length", "vocab_size"}) {
    Program p = plannedProgram();
    schema::PlanInfo &plan = *p.mutable_plan();
    const google::protobuf::FieldDescriptor *f = plan.GetDescriptor()->FindFieldByName(field);
    ASSERT_NE(f, nullptr) << field;
    plan.GetReflection()->ClearField(&plan, f);
    EXPECT_EQ(validateMessage(p),
              std::string("plan: ") + field + " is 0, expected a positive value");
  }
}

TEST(Validator, RefusesAGlobalBatchOtherThanMicroBatchTimesMicrobatchesTimesDP) {
  Program p = plannedProgram();
  p.mutable_plan()->set_global_batch_size(4);
  EXPECT_EQ(validateMessage(p), "plan: global_batch_size 4 differs from micro_batch_size 2 x "
                                "num_microbatches 2 x the DP size 2 (mesh axis 'dp')");
}

TEST(Validator, RefusesAHostInputWithoutAPlan) {
  Program p = plannedProgram();
  p.clear_plan();
  EXPECT_EQ(validateMessage(p),
            "buffer 0 'tokens.0': host_input is set but the program has no plan (Program.plan)");
}

TEST(Validator, RefusesAnInputBufferWithoutHostInputInAPlannedProgram) {
  Program p = plannedProgram();
  p.mutable_buffers(4)->clear_host_input();
  EXPECT_EQ(validateMessage(p), "buffer 4 'loss_mask.1': an INPUT buffer needs host_input (its "
                                "role and microbatch) in a program with a plan");
}

TEST(Validator, RefusesHostInputOnABufferThatIsNotAnInput) {
  Program p = plannedProgram();
  p.mutable_buffers(2)->set_kind(schema::SCALAR);
  EXPECT_EQ(validateMessage(p),
            "buffer 2 'rng.0': host_input is set on a buffer of kind SCALAR, expected INPUT");
}

TEST(Validator, RefusesAnInvalidHostInputRole) {
  Program p = plannedProgram();
  p.mutable_buffers(0)->mutable_host_input()->set_role(schema::InputRole(9));
  EXPECT_EQ(validateMessage(p),
            "buffer 0 'tokens.0': host_input.role 9 is not a valid input role "
            "(expected TOKENS, POSITION_IDS, LABELS, LOSS_MASK, RNG or DOC_START)");
  p.mutable_buffers(0)->mutable_host_input()->set_role(schema::INPUT_ROLE_UNSPECIFIED);
  EXPECT_NE(validateMessage(p).find("host_input.role 0 is not a valid input role"),
            std::string::npos);
}

TEST(Validator, RefusesAHostInputMicrobatchOutsideThePlan) {
  Program p = plannedProgram();
  p.mutable_buffers(3)->mutable_host_input()->set_microbatch(2);
  EXPECT_EQ(validateMessage(p), "buffer 3 'tokens.1': host_input.microbatch 2 is outside [0, "
                                "num_microbatches 2)");
}

TEST(Validator, RefusesTheSameHostInputTwice) {
  Program p = plannedProgram();
  p.mutable_buffers(3)->mutable_host_input()->set_microbatch(0);
  EXPECT_EQ(validateMessage(p), "buffer 3 'tokens.1': host input TOKENS of microbatch 0 is also "
                                "buffer 0 'tokens.0'");
}

TEST(Validator, RefusesARoleMissingAMicrobatch) {
  // tokens.1 becomes LABELS: TOKENS lacks microbatch 1 (and LABELS microbatch 0).
  Program p = plannedProgram();
  p.mutable_buffers(3)->mutable_host_input()->set_role(schema::LABELS);
  EXPECT_EQ(validateMessage(p), "host input TOKENS has no buffer for microbatch 1 "
                                "(num_microbatches 2: one buffer per microbatch)");
  // More microbatches in the plan than the buffers cover.
  p = plannedProgram();
  p.mutable_plan()->set_num_microbatches(3);
  p.mutable_plan()->set_global_batch_size(12);
  EXPECT_EQ(validateMessage(p), "host input TOKENS has no buffer for microbatch 2 "
                                "(num_microbatches 3: one buffer per microbatch)");
}

TEST(Validator, RefusesAHostInputOfTheWrongShape) {
  Program p = plannedProgram();
  reshapeBuffer(p, 0, {2, 4});
  EXPECT_EQ(validateMessage(p), "buffer 0 'tokens.0': host input TOKENS has shape [2, 4], "
                                "expected [2, 3] ([micro_batch_size, seq_length] of the plan)");
  p = plannedProgram();
  reshapeBuffer(p, 5, {4});
  EXPECT_EQ(validateMessage(p), "buffer 5 'rng.1': host input RNG has shape [4], expected [3] "
                                "(seed, iteration, microbatch)");
}

TEST(Validator, RefusesAHostInputOfTheWrongDType) {
  Program p = plannedProgram();
  p.mutable_buffers(1)->set_dtype(schema::I32);
  EXPECT_EQ(validateMessage(p),
            "buffer 1 'loss_mask.0': host input LOSS_MASK has dtype i32, expected f32 or f64");
  p = plannedProgram();
  p.mutable_buffers(0)->set_dtype(schema::F32);
  EXPECT_EQ(validateMessage(p),
            "buffer 0 'tokens.0': host input TOKENS has dtype f32, expected i32");
  p = plannedProgram();
  p.mutable_buffers(2)->set_dtype(schema::F64);
  EXPECT_EQ(validateMessage(p), "buffer 2 'rng.0': host input RNG has dtype f64, expected i64");
}

TEST(Validator, RefusesMoreArgumentsThanTheExecutorCanBind) {
  ProgramBuilder b;
  b.addFunction("main");
  std::vector<std::tuple<std::string, DType, std::vector<int64_t>>> args(
      65536, {"a", DType::F32, {1}});
  b.addFunction("wide", args);
  std::string m = validateMessage(b.finish());
  EXPECT_NE(m.find("function 'wide' has 65536 arguments; at most 65535 are supported"),
            std::string::npos)
      << m;
}

} // namespace

namespace {
/// The CPU backend, but claiming to capture graphs (as CUDA does): counts the capture and replay
/// calls and the events recorded. Kernels still run inline while "captured", and replayGraph
/// runs nothing, so a buffer the region updates shows which runs executed the region eagerly.
class GraphCountingBackend : public Backend {
public:
  std::unique_ptr<Backend> cpu = createCpuBackend();
  int begins = 0, ends = 0, replays = 0;
  std::vector<unsigned> recorded;
  std::string_view name() const override { return "graph-counting"; }
  void *allocateArena(size_t bytes) override { return cpu->allocateArena(bytes); }
  void freeArena(void *p) override { cpu->freeArena(p); }
  void copyToDevice(void *d, const void *s, size_t n) override { cpu->copyToDevice(d, s, n); }
  void copyToHost(void *d, const void *s, size_t n) override { cpu->copyToHost(d, s, n); }
  KernelFn findKernel(std::string_view n) const override { return cpu->findKernel(n); }
  void *kernelData(unsigned s) override { return cpu->kernelData(s); }
  void enqueue(unsigned s, std::function<void()> fn) override { cpu->enqueue(s, std::move(fn)); }
  void synchronize(unsigned s) override { cpu->synchronize(s); }
  void recordEvent(unsigned e, unsigned s) override {
    recorded.push_back(e);
    cpu->recordEvent(e, s);
  }
  void streamWaitEvent(unsigned s, unsigned e) override { cpu->streamWaitEvent(s, e); }
  void hostWaitEvent(unsigned e) override { cpu->hostWaitEvent(e); }
  void resizeEvents(unsigned n) override { cpu->resizeEvents(n); }
  void beginCapture(std::string_view) override { ++begins; }
  void endCapture(std::string_view) override { ++ends; }
  bool replayGraph(std::string_view) override { return ++replays, ends > 0; }
  bool capturesGraphs() const override { return true; }
};
} // namespace

TEST(Executor, CapturesARegionAfterItsWarmupRunsAndReplaysIt) {
  // main: one = 1; region { x += one; all_reduce(x) (synchronous) }; warmup 2, five runs.
  ProgramBuilder b;
  int x = b.addBuffer("x", schema::MAIN_GRAD, DType::F32, {4});
  int one = b.addBuffer("one", schema::WORKSPACE, DType::F32, {4});
  int dp = b.addGroup("dp", {0});
  int main = b.addFunction("main");
  b.kernel(main, "fill", {}, {ProgramBuilder::buf(one)}, {AttrArg("value", 1.0)});
  b.region(main, schema::GRAPH_CAPTURE_BEGIN, "iteration");
  b.kernel(main, "add", {ProgramBuilder::buf(x), ProgramBuilder::buf(one)},
           {ProgramBuilder::buf(x)}, {AttrArg("alpha", 1.0)}, {0});
  b.collective(main, schema::ALL_REDUCE, dp, ProgramBuilder::buf(x), ProgramBuilder::buf(x),
               schema::SUM, /*async=*/false, 0);
  b.region(main, schema::GRAPH_CAPTURE_END, "iteration");
  Program p = b.finish();
  p.set_cuda_graph_warmup_steps(2);
  const unsigned joinEvent = p.num_events() + p.num_tokens();

  auto runFive = [&](Backend &backend, std::vector<uint64_t> &counts) {
    auto comm = createLocalCommunicator();
    auto ex = Executor::create(p, backend, *comm);
    EXPECT_TRUE(ex.ok()) << ex.status();
    for (int r = 0; r < 5; ++r) {
      EXPECT_TRUE((*ex)->run().ok());
      counts.push_back((*ex)->lastInstructionCount());
    }
    std::vector<float> v(4);
    EXPECT_TRUE((*ex)->readBuffer(x, v.data(), 16).ok());
    return v[0];
  };
  GraphCountingBackend graphs;
  std::vector<uint64_t> counts;
  // Runs 1 and 2 eager, run 3 captured (its kernels run here) and launched, runs 4 and 5
  // replayed: the region's add ran three times on the host.
  EXPECT_EQ(runFive(graphs, counts), 3.0f);
  EXPECT_EQ(graphs.begins, 1);
  EXPECT_EQ(graphs.ends, 1);
  EXPECT_EQ(graphs.replays, 3);
  // The synchronous collective inside the capture is ordered by the join event (once: run 3).
  EXPECT_EQ(std::count(graphs.recorded.begin(), graphs.recorded.end(), joinEvent), 1);
  // A replayed run counts the instructions it replaced.
  EXPECT_EQ(counts, std::vector<uint64_t>(5, 5));

  // The CPU backend runs the region eagerly every time.
  auto cpu = createCpuBackend();
  std::vector<uint64_t> cpuCounts;
  EXPECT_EQ(runFive(*cpu, cpuCounts), 5.0f);
  EXPECT_EQ(cpuCounts, std::vector<uint64_t>(5, 5));
}

TEST(Executor, RefusesARegionSplitOverFunctionsOnAGraphBackend) {
  ProgramBuilder b;
  int main = b.addFunction("main");
  int tail = b.addFunction("tail");
  b.region(main, schema::GRAPH_CAPTURE_BEGIN, "iteration");
  b.call(main, tail, {});
  b.region(tail, schema::GRAPH_CAPTURE_END, "iteration");
  Program p = b.finish();
  auto comm = createLocalCommunicator();
  GraphCountingBackend graphs;
  auto ex = Executor::create(p, graphs, *comm);
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.status().message(),
            "graph-capture region 'iteration' begins in function 'main' without its end there: "
            "the graph-counting backend captures and replays a region within one function");
  auto cpu = createCpuBackend();
  EXPECT_TRUE(Executor::create(p, *cpu, *comm).ok()); // CPU: the markers only nest
}

namespace {

/// Records the point-to-point calls the executor makes (rank 0 of 2; nothing is transferred).
class RecordingCommunicator : public Communicator {
public:
  int64_t rank() const override { return 0; }
  int64_t worldSize() const override { return 2; }
  std::string setupGroups(const std::vector<GroupSpec> &) override { return ""; }
  void allReduce(int, const void *, void *, int64_t, DType, ReduceOp) override {}
  void reduceScatter(int, const void *, void *, int64_t, DType, ReduceOp) override {}
  void allGather(int, const void *, void *, int64_t, DType) override {}
  void broadcast(int, void *, int64_t, DType, int64_t) override {}
  void send(int, int64_t peer, const void *, size_t bytes, DType) override {
    calls.push_back("send " + std::to_string(peer) + " " + std::to_string(bytes));
  }
  void recv(int, int64_t peer, void *, size_t bytes, DType) override {
    calls.push_back("recv " + std::to_string(peer) + " " + std::to_string(bytes));
  }
  void sendRecv(int, int64_t sendPeer, const void *, size_t sendBytes, DType, int64_t recvPeer,
                void *, size_t recvBytes, DType) override {
    calls.push_back("pair " + std::to_string(sendPeer) + " " + std::to_string(sendBytes) + " " +
                    std::to_string(recvPeer) + " " + std::to_string(recvBytes));
  }
  void barrier(int) override {}
  std::vector<std::string> calls;
};

} // namespace

// Batched pairs (runsAsSendRecvPair): a send immediately followed by a receive on the same
// group, both async (--overlap-p2p-comm) or both synchronous (the 1F1B / ZB-H1 plans), reaches
// the communicator as one sendRecv (NCCL groups it); an async pair split by a wait, or a
// synchronous send before an async receive, stays two calls.
TEST(Executor, RunsASendReceivePairAsOneCall) {
  ProgramBuilder b;
  b.setMesh({"pp"}, {2}, 0);
  int pp = b.addGroup("pp", {0, 1});
  int x = b.addBuffer("x", schema::ACTIVATION, DType::F32, {4});
  int y = b.addBuffer("y", schema::ACTIVATION, DType::F32, {8});
  int main = b.addFunction("main");
  auto p2p = [&](bool isSend, int buffer, bool async, uint32_t token) {
    schema::Instruction &ins = *b.proto().mutable_functions(main)->add_body();
    schema::SendRecv &sr = isSend ? *ins.mutable_send() : *ins.mutable_recv();
    sr.set_group(uint32_t(pp));
    sr.set_peer(1);
    *sr.mutable_operand() = ProgramBuilder::buf(buffer);
    sr.set_async(async);
    sr.set_token(token);
    ins.set_stream(1);
  };
  p2p(true, x, true, 0);
  p2p(false, y, true, 1);
  b.wait(main, 0);
  b.wait(main, 1);
  p2p(true, x, false, 0);
  p2p(false, y, false, 0);
  p2p(true, x, true, 2);
  b.wait(main, 2);
  p2p(false, y, true, 3);
  b.wait(main, 3);
  p2p(true, x, false, 0);
  p2p(false, y, true, 4);
  b.wait(main, 4);
  b.setNumTokens(5);
  auto backend = createCpuBackend();
  RecordingCommunicator comm;
  auto ex = Executor::create(b.finish(), *backend, comm);
  ASSERT_TRUE(ex.ok()) << ex.status();
  absl::Status s = (*ex)->run();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(comm.calls,
            (std::vector<std::string>{"pair 1 16 1 32", "pair 1 16 1 32", "send 1 16",
                                      "recv 1 32", "send 1 16", "recv 1 32"}));
}

// The traces' GEMM sizes (matmulDims) follow the matmul kernel's own shape rule: M and K from a
// (swapped by trans_a), N from b (swapped by trans_b), the batch from a's leading dims; an
// argument operand's shape comes from the callee's declared Arg; a view uses its own shape.
TEST(MatmulDims, ReadsOperandShapesAndTransposes) {
  ProgramBuilder b;
  int x = b.addBuffer("x", schema::ACTIVATION, DType::F32, {2, 3, 4});
  int w = b.addBuffer("w", schema::PARAMETER, DType::F32, {5, 4});
  int y = b.addBuffer("y", schema::ACTIVATION, DType::F32, {2, 3, 5});
  int g = b.addBuffer("g", schema::ACTIVATION, DType::F32, {4, 5});
  int main = b.addFunction("main");
  int callee = b.addFunction("layer", {{"a", DType::F32, {6, 4}}, {"out", DType::F32, {4, 5}}});
  b.kernel(main, "matmul", {ProgramBuilder::buf(x), ProgramBuilder::buf(w)},
           {ProgramBuilder::buf(y)}, {AttrArg("trans_b", 1)});
  // The weight gradient: x viewed as [6, 4], transposed, times y viewed as [6, 5].
  b.kernel(main, "matmul", {ProgramBuilder::buf(x, 0, {6, 4}), ProgramBuilder::buf(y, 0, {6, 5})},
           {ProgramBuilder::buf(g)}, {AttrArg("trans_a", 1), AttrArg("beta", 1.0)});
  b.kernel(callee, "matmul", {ProgramBuilder::arg(0), ProgramBuilder::buf(g)},
           {ProgramBuilder::buf(y, 0, {6, 5})});
  b.kernel(main, "fill", {}, {ProgramBuilder::buf(g)}, {AttrArg("value", 0.0)});
  schema::Program p = b.finish();

  auto d0 = matmulDims(p, main, p.functions(main).body(0).kernel());
  ASSERT_TRUE(d0.has_value());
  EXPECT_EQ(std::make_tuple(d0->batch, d0->m, d0->k, d0->n, d0->transA, d0->transB),
            std::make_tuple(int64_t(2), int64_t(3), int64_t(4), int64_t(5), false, true));
  EXPECT_DOUBLE_EQ(d0->flops, 2.0 * 2 * 3 * 4 * 5);
  auto d1 = matmulDims(p, main, p.functions(main).body(1).kernel());
  ASSERT_TRUE(d1.has_value());
  EXPECT_EQ(std::make_tuple(d1->batch, d1->m, d1->k, d1->n, d1->transA, d1->transB),
            std::make_tuple(int64_t(1), int64_t(4), int64_t(6), int64_t(5), true, false));
  EXPECT_TRUE(d1->accumulate);
  EXPECT_FALSE(d0->accumulate);
  auto d2 = matmulDims(p, callee, p.functions(callee).body(0).kernel());
  ASSERT_TRUE(d2.has_value());
  EXPECT_EQ(std::make_tuple(d2->batch, d2->m, d2->k, d2->n), std::make_tuple(1, 6, 4, 5));
  EXPECT_FALSE(matmulDims(p, main, p.functions(main).body(2).kernel()).has_value()); // a fill
  EXPECT_FALSE(matmulDims(p, 7, p.functions(main).body(0).kernel()).has_value()); // no function 7
}
