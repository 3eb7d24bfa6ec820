//! Layered configuration: embedded defaults < TOML file < `WEIR_*` environment < command-line flags.
//! Unknown keys in the file are errors; only the binary's own keys are read from the environment.

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;

/// A configuration that cannot be loaded, with the reason.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

/// Loads `T` from its defaults, an optional TOML file, the `WEIR_<KEY>` variables of `keys`, and `flags`
/// (a struct whose `None` fields are skipped when serialized). `keys`, when given, are every key of `T`: the
/// file may set no other.
pub fn load<T, F>(file: Option<&Path>, keys: &[&str], flags: &F) -> Result<T, ConfigError>
where
    T: DeserializeOwned + Serialize + Default,
    F: Serialize,
{
    let mut fig = Figment::from(Serialized::defaults(T::default()));
    if let Some(path) = file {
        if !path.exists() {
            return Err(ConfigError(format!("config file {} does not exist", path.display())));
        }
        // Checked here rather than by the config type (serde's deny_unknown_fields does not work with the
        // flattened flags shared by every binary, such as security::SecurityFlags). A caller without `keys`
        // reads no environment and has its type deny unknown keys.
        let table: figment::value::Dict =
            Figment::from(Toml::file_exact(path)).extract().map_err(|e| ConfigError(e.to_string()))?;
        if let Some(unknown) = table.keys().find(|k| !keys.is_empty() && !keys.contains(&k.as_str())) {
            return Err(ConfigError(format!(
                "{}: unknown key `{unknown}`, expected one of {}",
                path.display(),
                keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
            )));
        }
        fig = fig.merge(Toml::file_exact(path));
    }
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    // Variable names are matched case-insensitively (`WEIR_DATA_DIR` sets `data_dir`).
    fig = fig.merge(Env::prefixed("WEIR_").filter(move |k| keys.iter().any(|x| k.as_str().eq_ignore_ascii_case(x))));
    fig = fig.merge(Serialized::defaults(flags));
    fig.extract().map_err(|e| ConfigError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, Default, Debug, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct C {
        bind: String,
        slots: u32,
    }

    #[derive(Serialize)]
    struct Flags {
        #[serde(skip_serializing_if = "Option::is_none")]
        slots: Option<u32>,
    }

    #[test]
    fn layers_and_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "bind = \"1.2.3.4:5\"\nslots = 2\n").unwrap();
        let c: C = load(Some(&f), &["bind", "slots"], &Flags { slots: Some(7) }).unwrap();
        assert_eq!(c, C { bind: "1.2.3.4:5".into(), slots: 7 });
        std::fs::write(&f, "bnd = 1\n").unwrap();
        let e = load::<C, _>(Some(&f), &["bind", "slots"], &Flags { slots: None }).unwrap_err();
        assert!(e.to_string().contains("unknown key `bnd`"), "{e}");
        assert!(load::<C, _>(Some(&dir.path().join("nope.toml")), &[], &Flags { slots: None }).is_err());
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API fixes the error type
    fn environment_sets_listed_keys_only() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("WEIR_SLOTS", "5");
            jail.set_env("WEIR_JOBMANAGER", "http://elsewhere:1");
            let c: C = load(None, &["bind", "slots"], &Flags { slots: None }).map_err(|e| e.to_string())?;
            assert_eq!(c.slots, 5);
            let c: C = load(None, &["bind", "slots"], &Flags { slots: Some(6) }).map_err(|e| e.to_string())?;
            assert_eq!(c.slots, 6, "flags win over the environment");
            Ok(())
        });
    }
}
