//! `weir-taskmanager` with the built-in operator kinds.

fn main() {
    weir_taskmanager::process::main_with_registry(weir_taskmanager::builtins::registry());
}
