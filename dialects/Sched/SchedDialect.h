//===- SchedDialect.h - The sched dialect ---------------------------------===//
#ifndef TRAINC_DIALECTS_SCHED_SCHEDDIALECT_H
#define TRAINC_DIALECTS_SCHED_SCHEDDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "dialects/Sched/SchedDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/Sched/SchedTypes.h.inc"

#define GET_OP_CLASSES
#include "dialects/Sched/SchedOps.h.inc"

#endif
