//===- Support.h - Helpers shared by the frontends (private) -------------===//
//
// Not part of the library's interface: included by frontends/*.cpp only.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_FRONTENDS_SUPPORT_H
#define TRAINC_FRONTENDS_SUPPORT_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <string>

namespace trainc::config::detail {

/// A user-facing error carrying `message`.
inline llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The shortest decimal form of `value` that reads back as the same double ("0.0003",
/// "500000", "1e-08").
std::string formatNumber(double value);

} // namespace trainc::config::detail

#endif // TRAINC_FRONTENDS_SUPPORT_H
