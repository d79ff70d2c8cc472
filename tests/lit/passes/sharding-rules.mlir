// RUN: rm -rf %t && trainc compile --preset tiny-llama --micro-batch-size 2 --global-batch-size 2 --hidden-dropout 0.1 --dump-ir-dir %t/llama -o %t/llama-plan > /dev/null
// RUN: trainc-opt %t/llama/0-model.mlir -trainc-check-sharding-rules -o /dev/null 2>&1 | FileCheck %s --check-prefix=LLAMA
// RUN: trainc compile --preset tiny-gpt --micro-batch-size 2 --global-batch-size 2 --hidden-dropout 0.1 --dump-ir-dir %t/gpt -o %t/gpt-plan > /dev/null
// RUN: trainc-opt %t/gpt/0-model.mlir -trainc-check-sharding-rules -o /dev/null 2>&1 | FileCheck %s --check-prefix=GPT
// RUN: trainc-opt %s -trainc-check-sharding-rules="remarks=false"
// REQUIRES: compiler

// Tests the structured sharding rules of every forward op of both model families (each is checked
// against the op's shapes by the pass, which fails on an inconsistent rule), and the rules that
// carry Megatron's layouts: vocab-parallel embedding (v indexes only the table: a split gives
// partial sums), linear (split n: column-parallel; split k: row-parallel, partial sums),
// norms and rotary pairs whole, attention by heads with grouped-query kv heads at heads / 2,
// SwiGLU's matching gate/up halves, vocab-parallel cross entropy by log-sum-exp.
// LLAMA-DAG: remark: loops (l0=2, l1=9, h=16, v=128) ins [v, h] [l0, l1] outs [l0, l1, h]
// LLAMA-DAG: remark: loops (l0=2, l1=9, h=16:whole) ins [l0, l1, h] [h] outs [l0, l1, h] [l0 * 9 + l1]
// LLAMA-DAG: remark: loops (l0=2, l1=9, n=16, k=16) ins [l0, l1, k] [n, k] outs [l0, l1, n]
// LLAMA-DAG: remark: loops (b=2, s=9, heads=4, d=4:whole) ins [b, s, heads, d] [b, s] outs [b, s, heads, d]
// LLAMA-DAG: remark: loops (b=2, s=9, heads=4, d=4:whole, t=9:whole) ins [b, s, heads, d] [b, t, heads floordiv 2, d] [b, t, heads floordiv 2, d] outs [b, s, heads, d] [b, heads, s]
// LLAMA-DAG: remark: loops (l0=2, l1=9, f=32, half=2:whole) ins [l0, l1, half * 32 + f] outs [l0, l1, f]
// LLAMA-DAG: remark: loops (d0=2, d1=9, d2=16) ins [d0, d1, d2] [] outs [d0, d1, d2]
// LLAMA-DAG: remark: loops (n=18, v=128:logsumexp) ins [n, v] [n] [n] outs [] [] [n]
// LLAMA-DAG: remark: loops (d0=2, d1=9, d2=4, d3=4) ins [(((d0 * 9 + d1) * 4 + d2) * 4 + d3) floordiv 144, ((((d0 * 9 + d1) * 4 + d2) * 4 + d3) floordiv 16) mod 9, (((d0 * 9 + d1) * 4 + d2) * 4 + d3) mod 16] outs [d0, d1, d2, d3]
// GPT-DAG: remark: loops (l0=2, l1=9, h=16:whole) ins [l0, l1, h] [h] [h] outs [l0, l1, h] [l0 * 9 + l1] [l0 * 9 + l1]
// GPT-DAG: remark: loops (l0=2, l1=9, n=64, k=16) ins [l0, l1, k] [n, k] [n] outs [l0, l1, n]
// GPT-DAG: remark: loops (d0=2, d1=9, d2=64) ins [d0, d1, d2] outs [d0, d1, d2]
// GPT-DAG: remark: loops (b=2, s=9, heads=4, d=4:whole, t=9:whole) ins [b, s, heads, d] [b, t, heads, d] [b, t, heads, d] outs [b, s, heads, d] [b, heads, s]

// The collectives' own rules (elementwise).
mesh.mesh @mesh(shape = 2)
func.func @f(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %y = model.copy_to_region %x on @mesh mesh_axes = [0] : tensor<4x3xf32> -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}
