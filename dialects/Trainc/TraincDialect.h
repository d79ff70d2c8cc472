//===- TraincDialect.h - The trainc dialect (module attributes) -----------===//
#ifndef TRAINC_DIALECTS_TRAINC_TRAINCDIALECT_H
#define TRAINC_DIALECTS_TRAINC_TRAINCDIALECT_H

#include "mlir/IR/Dialect.h"

#include "dialects/Trainc/TraincDialect.h.inc"

#endif
