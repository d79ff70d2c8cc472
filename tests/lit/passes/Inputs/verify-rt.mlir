// Cases of trainc-verify phase=rt (and phase=memory, which checks the rt invariants first), run by
// ../trainc-verify.mlir (lit skips Inputs/).

// Tests that no op above the rt level remains.
func.func @train_step() attributes {rt.entry} {
  // expected-error@+1 {{'sched.zero_grads' op phase rt: op above the rt level remains}}
  sched.zero_grads
  return
}

// -----

// Tests that no tensor value remains.
func.func private @make() -> tensor<4xf32>
func.func @train_step() attributes {rt.entry} {
  // expected-error@+1 {{'func.call' op phase rt: tensor value remains}}
  %0 = func.call @make() : () -> tensor<4xf32>
  return
}

// -----

// Tests that the program has exactly one entry function.
// expected-error@+1 {{phase rt: expected one entry function (rt.entry), found 0}}
module {
  func.func @train_step() {
    return
  }
}

// -----

// Tests that two entry functions are refused as well.
// expected-error@+1 {{phase rt: expected one entry function (rt.entry), found 2}}
module {
  func.func @a() attributes {rt.entry} {
    return
  }
  func.func @b() attributes {rt.entry} {
    return
  }
}
