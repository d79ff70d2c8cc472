// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// REQUIRES: compiler
// Known bug: rt.kernel's verifier streams the attribute name as a StringAttr, which prints with
// its own double quotes: "kernel 'fill' has no attribute '"alpha"'". Remove the XFAIL line when
// fixed.

// Tests that an unknown kernel attribute is named plainly.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.kernel' op kernel 'fill' has no attribute 'alpha'}}
  rt.kernel "fill" outs(%a : memref<8xf32>) {kernel_attrs = {alpha = 1.0 : f64}}
  return
}

// -----

// Tests that a non-numeric kernel attribute is named plainly.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.kernel' op attribute 'value' must be an integer or a float}}
  rt.kernel "fill" outs(%a : memref<8xf32>) {kernel_attrs = {value = "one"}}
  return
}
