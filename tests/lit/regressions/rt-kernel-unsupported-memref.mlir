// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// REQUIRES: compiler
// Known bug: rt.kernel's verifier ignores makeView's failure (rank above kMaxRank = 6) and maps
// element types the runtime lacks (i1, ...) to DType::Invalid, so a "copy" of such memrefs is
// accepted (both sides equally invalid), and "scale" on an f32 memref of rank 7 says "dtype
// invalid". Both should be refused with a message naming the rank or the element type. Remove the
// XFAIL line when fixed.

// Tests that a memref of rank 7 is refused.
func.func @f(%a: memref<1x1x1x1x1x1x2xf32>) {
  // expected-error-re@+1 {{'rt.kernel' op {{.*}}rank{{.*}}}}
  rt.kernel "copy" ins(%a : memref<1x1x1x1x1x1x2xf32>) outs(%a : memref<1x1x1x1x1x1x2xf32>)
  return
}

// -----

// Tests that an element type the runtime has no dtype for is refused.
func.func @f(%a: memref<2xi1>, %b: memref<2xi1>) {
  // expected-error-re@+1 {{'rt.kernel' op {{.*}}i1{{.*}}}}
  rt.kernel "copy" ins(%a : memref<2xi1>) outs(%b : memref<2xi1>)
  return
}
