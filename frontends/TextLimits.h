//===- TextLimits.h - Nesting limits checked before a recursive parser runs ---===//
//
// LLVM's JSON parser and MLIR's parser recurse once per nesting level, so a file of 50,000
// nested brackets overflows the stack (a segfault, not an error). These scans count the depth
// first, without recursion, and refuse what no real config or model needs.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_FRONTENDS_TEXTLIMITS_H
#define TRAINC_FRONTENDS_TEXTLIMITS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>

namespace trainc::config {

/// Deepest nesting accepted in a JSON file (config.json, plan.json).
constexpr size_t kMaxJsonDepth = 256;
/// Deepest nesting accepted in a .mlir file: ( [ { < outside strings and comments.
constexpr size_t kMaxMlirDepth = 512;

/// Checks that the arrays and objects of the JSON `text` nest at most `maxDepth` deep (brackets
/// inside strings do not count). Error: "<source>: JSON nested deeper than <maxDepth> levels at
/// line L, column C". Says nothing about the JSON's validity otherwise.
llvm::Error checkJsonDepth(llvm::StringRef text, llvm::StringRef source,
                           size_t maxDepth = kMaxJsonDepth);

/// The same for MLIR's textual form: `(`, `[`, `{` and `<` (not the `>` of `->`) outside string
/// literals and `//` comments. Error: "<source>: brackets nested deeper than <maxDepth> levels at
/// line L, column C (no model's attribute or type nests this deep)".
llvm::Error checkMlirDepth(llvm::StringRef text, llvm::StringRef source,
                           size_t maxDepth = kMaxMlirDepth);

/// Checks that `path` names a regular file (following symlinks), so that a FIFO, a device such
/// as /dev/zero or a directory is refused instead of blocking or reading without end: the
/// runtime's trainc::rt::checkRegularFile (runtime/core/Files.h) as an llvm::Error. Errors:
/// "cannot read <what> file 'P': <reason>", "<what> file 'P' is a directory|FIFO|device|socket,
/// not a regular file".
llvm::Error checkRegularFile(llvm::StringRef path, llvm::StringRef what);

} // namespace trainc::config

#endif
