//===- Program.h - Loading and validating per-rank programs --------------===//
//
// A program file is a 24-byte header followed by a serialized schema::Program:
//   bytes 0..7   magic "TRAINCPG"
//   bytes 8..11  format version (little-endian u32), equal to Program.format_version
//   bytes 12..15 CRC32C (Castagnoli) of the payload (little-endian u32; version 3 on, 0 before)
//   bytes 16..23 payload size in bytes (little-endian u64)
// The size makes truncation detectable (protobuf alone can parse a prefix cut at a field boundary);
// the checksum makes a changed payload byte detectable (protobuf parses most of them as another
// valid message).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_PROGRAM_H
#define TRAINC_RUNTIME_CORE_PROGRAM_H

#include "runtime/schema/program.pb.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <optional>
#include <string>
#include <string_view>

namespace trainc::rt {

class Backend;

/// The program format this runtime reads and writes. Version history is in docs/runtime.md.
constexpr uint32_t kFormatVersion = 3;
/// The oldest file format the loader reads: the first with the payload checksum. Older files are
/// refused with a message to recompile (a message's format_version may still be 1 or 2 in memory).
constexpr uint32_t kMinFileFormatVersion = 3;
constexpr char kProgramMagic[8] = {'T', 'R', 'A', 'I', 'N', 'C', 'P', 'G'};
constexpr size_t kProgramHeaderSize = 24;

/// Serializes `program` with the file header (the payload's CRC32C included). Sets format_version
/// to kFormatVersion if it is 0.
std::string serializeProgram(const schema::Program &program);
absl::Status writeProgramFile(const schema::Program &program, const std::string &path);

/// Parses a header + payload. Errors (InvalidArgument / DataLoss): bad magic, a version other than
/// kMinFileFormatVersion..kFormatVersion, a payload shorter than the header says (truncated),
/// trailing bytes, a payload whose CRC32C differs from the header's, or a payload that protobuf
/// cannot parse. Does not validate the contents (see validateProgram).
absl::StatusOr<schema::Program> parseProgram(std::string_view bytes);
/// Reads and parses a file; NotFound if it cannot be opened.
absl::StatusOr<schema::Program> readProgramFile(const std::string &path);

/// Checks everything the executor relies on, before anything runs: format version, mesh and
/// communicator groups (members inside the mesh), every buffer inside the arena with a byte size that
/// matches its dtype and shape, parameter slices inside their buffers, every instruction's operands
/// inside their bases, kernel names, operand counts, attributes, dtypes and shapes against the kernel
/// signature (Kernel.h), undeclared overlaps between outputs and inputs, call bindings against the
/// callee's arguments, acyclic calls, async tokens started and waited in order, balanced graph-capture
/// regions, and the plan (Program.plan) against the host-input buffers (Buffer.host_input). When
/// `backend` is given, every kernel must also be implemented by it.
/// The error names the function, the instruction index, its source location and the field.
absl::Status validateProgram(const schema::Program &program, const Backend *backend = nullptr);

/// The host-scalar role of the buffer the compiler names `name` ("lr", "weight_decay", "step",
/// "loss_sum", "num_tokens", "grad_norm", "update_successful", and fp16's "loss_scale",
/// "loss_scale_growth_tracker", "loss_scale_hysteresis_tracker"); SCALAR_ROLE_UNSPECIFIED for any
/// other name. The export and hand-assembled programs (ProgramBuilder) tag buffers with it.
schema::ScalarRole scalarRoleOfName(std::string_view name);
/// The buffer kind a host-scalar role lives in: SCALAR for the values the host writes before a
/// step (LR, WEIGHT_DECAY, STEP) and the loss scaler's state, OUTPUT for those it reads after one.
schema::BufferKind scalarRoleKind(schema::ScalarRole role);

/// Whether instruction `send` followed directly by `recv` in one function body runs as one batched
/// pair (Communicator::sendRecv; NcclCommunicator puts both in one ncclGroupStart/End): a send
/// then a receive on the same group and stream, both synchronous or both async. This is
/// Megatron's batch_isend_irecv of p2p_communication._communicate: under NCCL an ungrouped
/// send completes only once its peer has posted the receive, so two stages sending to each other
/// first (1F1B's steady state) would deadlock. The executor and the whole-plan verifier
/// (compiler/VerifyPlan.h, which simulates the NCCL semantics) share this rule.
bool runsAsSendRecvPair(const schema::Instruction &send, const schema::Instruction &recv);

/// "function 'f' instruction 3 (loc file:line:col op)" for messages.
std::string describeInstruction(const schema::Program &p, int function, int index);

/// The problem size of one `matmul` kernel call: c[batch, m, n] = op(a)[batch, m, k] @ op(b)[k, n]
/// (the matmul signature's rule, runtime/cpu/MatmulKernels.cpp), from the operands as the
/// executor resolves them (resolveOperand) and the decoded trans_a / trans_b / beta attributes.
/// `flops` is 2 * batch * m * n * k; `accumulate` is beta != 0 (c is read and added to, e.g. a
/// weight gradient into its main_grad). For traces and profiles: nullopt when the call is not a
/// matmul or does not resolve (an unvalidated program); nothing is reported as an error.
struct MatmulDims {
  int64_t batch = 1, m = 0, k = 0, n = 0;
  bool transA = false, transB = false, accumulate = false;
  double flops = 0;
};
std::optional<MatmulDims> matmulDims(const schema::Program &p, int function,
                                     const schema::KernelCall &call);

} // namespace trainc::rt

#endif
