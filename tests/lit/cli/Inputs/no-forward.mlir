func.func @f() { return }
