//! `weir-taskmanager` with the built-in operator kinds.

fn main() {
    weir_taskmanager::server::main_with_registry(weir_taskmanager::registry::Registry::with_builtins());
}
