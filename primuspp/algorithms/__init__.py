"""Schedule algorithms. Each emits a compute order; `build_schedule` lowers and validates it."""
