//===- Program.h - Loading and validating per-rank programs --------------===//
//
// A program file is a 24-byte header followed by a serialized schema::Program:
//   bytes 0..7   magic "TRAINCPG"
//   bytes 8..11  format version (little-endian u32), equal to Program.format_version
//   bytes 12..15 reserved (0)
//   bytes 16..23 payload size in bytes (little-endian u64)
// The header makes truncation detectable (protobuf alone can parse a prefix cut at a field boundary).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_PROGRAM_H
#define TRAINC_RUNTIME_CORE_PROGRAM_H

#include "runtime/schema/program.pb.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <string>
#include <string_view>

namespace trainc::rt {

class Backend;

/// The newest program format this runtime reads. Version history is in docs/runtime.md.
constexpr uint32_t kFormatVersion = 2;
constexpr char kProgramMagic[8] = {'T', 'R', 'A', 'I', 'N', 'C', 'P', 'G'};
constexpr size_t kProgramHeaderSize = 24;

/// Serializes `program` with the file header. Sets format_version to kFormatVersion if it is 0.
std::string serializeProgram(const schema::Program &program);
absl::Status writeProgramFile(const schema::Program &program, const std::string &path);

/// Parses a header + payload. Errors (InvalidArgument / DataLoss): bad magic, a version newer than
/// kFormatVersion, a payload shorter than the header says (truncated), trailing bytes, or a payload
/// that protobuf cannot parse. Does not validate the contents (see validateProgram).
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

/// "function 'f' instruction 3 (loc file:line:col op)" for messages.
std::string describeInstruction(const schema::Program &p, int function, int index);

} // namespace trainc::rt

#endif
