//===- RtOps.td - The rt dialect: buffer-level ops = program.proto -------===//
//
// One op per program.proto concept: rt.buffer = Buffer, func.func = Function (memref arguments),
// rt.kernel = KernelCall, func.call = Call, rt.host_io = HostIO, rt.collective / rt.wait =
// Collective / Wait, rt.region = Region. Operands are statically shaped memrefs: rt.buffer_ref
// names a whole buffer, rt.view takes a contiguous element range with another shape.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINC_RT_OPS
#define TRAINC_RT_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Rt_Dialect : Dialect {
  let name = "rt";
  let summary = "Buffer-level instructions that map one to one onto runtime/schema/program.proto";
  let cppNamespace = "::mlir::trainc::rt";
  let useDefaultAttributePrinterParser = 1;
  // The discardable attributes of the dialect, each checked once here. Module: rt.arena_bytes,
  // rt.persistent_bytes, rt.flowing_peak_bytes, rt.stash_slots (non-negative integers),
  // rt.group_bytes ({group = bytes}), rt.carried_tokens (array<i64>), rt.schedule (string).
  // Functions: rt.stage, rt.function, rt.entry (unit), rt.entry_point, rt.layer (strings).
  // Ops: rt.unit (string), rt.layer_index (non-negative integer), rt.shard_segments
  // (array<i64> of (begin, end, decay) triples). Arguments: rt.input (string), rt.stash,
  // rt.result (non-negative integers), rt.accumulate (unit). Any other rt.* name is an error.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  // Loads the trainc dialect, which verifies the trainc.* module attributes.
  let dependentDialects = ["::mlir::trainc::top::TraincDialect"];
}

class Rt_Op<string mnemonic, list<Trait> traits = []> : Op<Rt_Dialect, mnemonic, traits>;

// The enums of program.proto (case values: the proto's minus one, its 0 being UNSPECIFIED).
class Rt_Enum<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::trainc::rt";
}
def Rt_BufferKindCases : Rt_Enum<"BufferKind", "what a buffer holds", [
    I32EnumAttrCase<"parameter", 0>, I32EnumAttrCase<"main_grad", 1>,
    I32EnumAttrCase<"master_param", 2>, I32EnumAttrCase<"optimizer_state", 3>,
    I32EnumAttrCase<"activation", 4>, I32EnumAttrCase<"input", 5>, I32EnumAttrCase<"output", 6>,
    I32EnumAttrCase<"scalar", 7>, I32EnumAttrCase<"workspace", 8>]>;
def Rt_BufferKindAttr : EnumAttr<Rt_Dialect, Rt_BufferKindCases, "buffer_kind">;
def Rt_CollectiveKindCases : Rt_Enum<"CollectiveKind", "a collective", [
    I32EnumAttrCase<"all_reduce", 0>, I32EnumAttrCase<"reduce_scatter", 1>,
    I32EnumAttrCase<"all_gather", 2>, I32EnumAttrCase<"broadcast", 3>,
    I32EnumAttrCase<"barrier", 4>]>;
def Rt_CollectiveKindAttr : EnumAttr<Rt_Dialect, Rt_CollectiveKindCases, "collective_kind">;
def Rt_ReduceOpCases : Rt_Enum<"ReduceOp", "the reduction of a collective", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"max", 1>, I32EnumAttrCase<"min", 2>]>;
def Rt_ReduceOpAttr : EnumAttr<Rt_Dialect, Rt_ReduceOpCases, "reduce_op">;
def Rt_HostIOKindCases : Rt_Enum<"HostIOKind", "a host I/O point", [
    I32EnumAttrCase<"fill_inputs", 0>, I32EnumAttrCase<"read_outputs", 1>]>;
def Rt_HostIOKindAttr : EnumAttr<Rt_Dialect, Rt_HostIOKindCases, "host_io_kind">;
def Rt_RegionKindCases : Rt_Enum<"RegionKind", "a graph-capture region marker", [
    I32EnumAttrCase<"begin", 0>, I32EnumAttrCase<"end", 1>]>;
def Rt_RegionKindAttr : EnumAttr<Rt_Dialect, Rt_RegionKindCases, "region_kind">;



def Rt_BufferOp : Rt_Op<"buffer", [Symbol]> {
  let summary = "A buffer of the rank's arena: kind, type and (after memory planning) offset";
  let description = [{
    kind is one of parameter, main_grad, master_param, optimizer_state, activation, input, output,
    scalar, workspace. offset is the byte offset in the arena, -1 until trainc-memory-plan runs.
    group (optional, flowing buffers) names a buffer group: trainc-memory-plan places the members
    of a group as one contiguous block, in declaration order (an activation stash between a forward
    and a backward call; one group per microbatch in flight).
    ```mlir
    rt.buffer @h1 activation {offset = 0 : i64} : memref<2x9x16xf32>
    rt.buffer @h2 activation {group = "stash.0"} : memref<2x9x16xf32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<AnyStaticShapeMemRef>:$type,
                   Rt_BufferKindAttr:$kind, DefaultValuedAttr<I64Attr, "-1">:$offset,
                   OptionalAttr<StrAttr>:$group);
  let assemblyFormat = "$sym_name $kind attr-dict `:` $type";
  let hasVerifier = 1;
}

def Rt_BufferRefOp : Rt_Op<"buffer_ref", [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The whole buffer @name as a memref value";
  let description = [{
    ```mlir
    %b = rt.buffer_ref @h1 : memref<2x9x16xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$buffer);
  let results = (outs AnyStaticShapeMemRef:$result);
  let assemblyFormat = "$buffer attr-dict `:` type($result)";
}

def Rt_ViewOp : Rt_Op<"view", [Pure]> {
  let summary = "A contiguous view: numel(result) elements from element `offset` of the source";
  let description = [{
    A rank-dependent view (e.g. a DP rank's shard of a gradient bucket) names a mesh axis and a
    stride: on the rank with coordinate c on that axis it starts at `offset + c * axis_stride`.
    The rt IR is compiled once for every rank; the export resolves the offset per rank (the dumps
    show the offset of coordinate 0).
    ```mlir
    %v = rt.view %b [16] : memref<2x9x16xf32> to memref<18x16xf32>
    %s = rt.view %g [0] {axis = "dp", axis_stride = 44 : i64} : memref<100xf32> to memref<44xf32>
    ```
  }];
  let arguments = (ins AnyStaticShapeMemRef:$source, I64Attr:$offset, OptionalAttr<StrAttr>:$axis,
                   DefaultValuedAttr<I64Attr, "0">:$axis_stride);
  let results = (outs AnyStaticShapeMemRef:$result);
  let builders = [
    // The same view on every rank.
    OpBuilder<(ins "Type":$result, "Value":$source, "IntegerAttr":$offset), [{
      build($_builder, $_state, result, source, offset, StringAttr(),
            $_builder.getI64IntegerAttr(0));
    }]>
  ];
  let assemblyFormat = "$source `[` $offset `]` attr-dict `:` type($source) `to` type($result)";
  let hasVerifier = 1;
}

def Rt_KernelOp : Rt_Op<"kernel", [AttrSizedOperandSegments]> {
  let summary = "A runtime kernel call on buffers";
  let description = [{
    The kernel name, operand counts, attributes, dtypes and shapes are checked against the runtime's
    kernel table (runtime/core/KernelSignatures.cpp) by the verifier. in_place[j] is the input that
    output j aliases, or -1. Kernel attributes are integers, floats or `array<i64: ...>` lists.
    `rt.shard_segments` (on an adamw over a DP shard of a gradient bucket) holds the bucket-relative
    (begin, end, decay) ranges of its parameters; the export turns them into the kernel's
    `segments` attribute of each DP rank's shard.
    ```mlir
    rt.kernel "matmul" ins(%a, %w : memref<18x16xf32>, memref<48x16xf32>) outs(%y : memref<18x48xf32>) {kernel_attrs = {trans_b = 1 : i64}}
    ```
  }];
  let arguments = (ins StrAttr:$kernel, Variadic<AnyStaticShapeMemRef>:$inputs,
                   Variadic<AnyStaticShapeMemRef>:$outputs,
                   DefaultValuedAttr<DictionaryAttr, "{}">:$kernel_attrs,
                   OptionalAttr<DenseI32ArrayAttr>:$in_place);
  let assemblyFormat = [{
    $kernel (`ins` `(` $inputs^ `:` type($inputs) `)`)? `outs` `(` $outputs `:` type($outputs) `)` attr-dict
  }];
  let hasVerifier = 1;
}

def Rt_CollectiveOp : Rt_Op<"collective", [AttrSizedOperandSegments]> {
  let summary = "A collective on a communicator group (sync, or async with a token)";
  let description = [{
    ```mlir
    rt.collective all_reduce "dp" ins(%g : memref<64xf32>) outs(%g : memref<64xf32>) {token = 0 : i64}
    ```
  }];
  let arguments = (ins Rt_CollectiveKindAttr:$kind, StrAttr:$group,
                   Variadic<AnyStaticShapeMemRef>:$inputs, Variadic<AnyStaticShapeMemRef>:$outputs,
                   DefaultValuedAttr<Rt_ReduceOpAttr, "::mlir::trainc::rt::ReduceOp::sum">:$op,
                   DefaultValuedAttr<I64Attr, "-1">:$token);
  let assemblyFormat = [{
    $kind $group (`ins` `(` $inputs^ `:` type($inputs) `)`)? (`outs` `(` $outputs^ `:` type($outputs) `)`)? attr-dict
  }];
  let hasVerifier = 1;
}

class Rt_PointToPointOp<string mnemonic, string what> : Rt_Op<mnemonic> {
  let summary = "A point-to-point transfer " # what # " group rank `peer` of `group` (sync, or async with a token)";
  let description = [{
    program.proto's SendRecv on the communication stream (pipeline parallelism: activations
    and their gradients between adjacent stages on the "pp" group). Synchronous when `token`
    is -1; else started async, complete at the `rt.wait` of its token (--overlap-p2p-comm:
    the buffer must not be read (recv) or written (send) before that wait).
    ```mlir
    rt.send "pp" peer 1 ins(%b : memref<2x9x16xf32>)
    rt.recv "pp" peer 0 outs(%b : memref<2x9x16xf32>) {token = 3 : i64}
    ```
  }];
  let arguments = (ins StrAttr:$group, I64Attr:$peer, AnyStaticShapeMemRef:$buffer,
                   DefaultValuedAttr<I64Attr, "-1">:$token);
}
def Rt_SendOp : Rt_PointToPointOp<"send", "to"> {
  let assemblyFormat = "$group `peer` $peer `ins` `(` $buffer `:` type($buffer) `)` attr-dict";
}
def Rt_RecvOp : Rt_PointToPointOp<"recv", "from"> {
  let assemblyFormat = "$group `peer` $peer `outs` `(` $buffer `:` type($buffer) `)` attr-dict";
}

def Rt_WaitOp : Rt_Op<"wait"> {
  let summary = "Wait for the async operation that holds `token`";
  let description = [{
    ```mlir
    rt.wait 0
    ```
  }];
  let arguments = (ins I64Attr:$token);
  let assemblyFormat = "$token attr-dict";
}

def Rt_HostIOOp : Rt_Op<"host_io"> {
  let summary = "Host I/O point: fill_inputs or read_outputs";
  let description = [{
    ```mlir
    rt.host_io fill_inputs "batch"
    ```
  }];
  let arguments = (ins Rt_HostIOKindAttr:$kind, StrAttr:$label);
  let assemblyFormat = "$kind $label attr-dict";
}

def Rt_RegionOp : Rt_Op<"region"> {
  let summary = "Graph-capture region marker: begin or end";
  let description = [{
    ```mlir
    rt.region begin "iteration"
    ```
  }];
  let arguments = (ins Rt_RegionKindAttr:$kind, StrAttr:$label);
  let assemblyFormat = "$kind $label attr-dict";
}

#endif
