//! A task manager with Weir's built-in kinds plus the user kinds `buffering-sink` and `distinct-values` of this
//! crate, as a Flink user would ship a jar: the job manager learns the extra kinds when this task manager
//! registers.

fn main() {
    weir_taskmanager::process::main_with_registry(weir_examples::registry());
}
