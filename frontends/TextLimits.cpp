//===- TextLimits.cpp - Nesting limits checked before a recursive parser runs -===//

#include "frontends/TextLimits.h"

#include "frontends/Support.h"
#include "runtime/core/Files.h"

#include "llvm/ADT/Twine.h"

namespace trainc::config {
namespace {

/// Scans `text` keeping a depth count; `open`/`close` classify a character at position i.
/// Strings are "..." with backslash escapes; `lineComments` skips `//` to the end of the line.
template <typename Open, typename Close>
llvm::Error scan(llvm::StringRef text, llvm::StringRef source, size_t maxDepth,
                 bool lineComments, llvm::StringRef what, llvm::StringRef why, Open open,
                 Close close) {
  size_t depth = 0, line = 1, lineStart = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n') {
      ++line;
      lineStart = i + 1;
      continue;
    }
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (lineComments && c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i + 1 < text.size() && text[i + 1] != '\n')
        ++i;
    } else if (open(text, i)) {
      if (++depth > maxDepth)
        return detail::makeError(source + ": " + what + " nested deeper than " +
                                 llvm::Twine(maxDepth) + " levels at line " + llvm::Twine(line) +
                                 ", column " + llvm::Twine(i - lineStart + 1) + why);
    } else if (close(text, i) && depth > 0) {
      --depth;
    }
  }
  return llvm::Error::success();
}

} // namespace

llvm::Error checkJsonDepth(llvm::StringRef text, llvm::StringRef source, size_t maxDepth) {
  return scan(
      text, source, maxDepth, /*lineComments=*/false, "JSON", "",
      [](llvm::StringRef t, size_t i) { return t[i] == '[' || t[i] == '{'; },
      [](llvm::StringRef t, size_t i) { return t[i] == ']' || t[i] == '}'; });
}

llvm::Error checkMlirDepth(llvm::StringRef text, llvm::StringRef source, size_t maxDepth) {
  return scan(
      text, source, maxDepth, /*lineComments=*/true, "brackets",
      " (no model's attribute or type nests this deep)",
      [](llvm::StringRef t, size_t i) {
        return t[i] == '(' || t[i] == '[' || t[i] == '{' || t[i] == '<';
      },
      [](llvm::StringRef t, size_t i) {
        return t[i] == ')' || t[i] == ']' || t[i] == '}' ||
               (t[i] == '>' && !(i > 0 && t[i - 1] == '-'));
      });
}

llvm::Error checkRegularFile(llvm::StringRef path, llvm::StringRef what) {
  absl::Status s = ::trainc::rt::checkRegularFile(path.str(), std::string_view(what.data(), what.size()));
  if (s.ok())
    return llvm::Error::success();
  return detail::makeError(std::string(s.message()));
}

} // namespace trainc::config
