//! The example task manager, second version: the `upgrades` kinds with their changed state types (as a user's
//! next release would ship them), for the upgrade-safety tests.

fn main() {
    weir_taskmanager::process::main_with_registry(weir_examples::registry_v2());
}
