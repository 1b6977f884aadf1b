//! Property tests of config loading: any `ralph.toml` and any `RALPH_*` value load or fail
//! with an error that names a key or the file, never a panic; counts within their bounds
//! load, counts beyond them are refused naming the key.

// `Jail` closures return figment's own (large) error type.
#![allow(clippy::result_large_err)]

use figment::Jail;
use proptest::prelude::*;

use super::{Config, ConfigError, bounds};

/// TOML-ish text: real keys and sections, values of every shape, and noise.
fn tomlish() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("max_iterations"),
        Just("retries"),
        Just("stage_timeout"),
        Just("grace"),
        Just("verify_concurrency"),
        Just("log_dir"),
        Just("once"),
        Just("nope"),
    ];
    let value = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        Just("\"5m\"".to_owned()),
        Just("\"-1s\"".to_owned()),
        Just("\"100000000000000h\"".to_owned()),
        Just("true".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        "\"[a-z0-9 ./]{0,10}\"",
        "[ -~]{0,10}",
    ];
    let line = prop_oneof![
        (key, value).prop_map(|(k, v)| format!("{k} = {v}")),
        Just("[context]".to_owned()),
        Just("warn = 0.5".to_owned()),
        Just("[[gates]]".to_owned()),
        Just("name = \"t\"\ncommand = \"true\"".to_owned()),
        Just("[claude]".to_owned()),
        Just("[store]".to_owned()),
        "[ -~]{0,20}",
    ];
    proptest::collection::vec(line, 0..8).prop_map(|lines| lines.join("\n"))
}

/// Whether an error says where the problem is: a key, or the file.
fn names_a_key_or_the_file(error: &ConfigError) -> bool {
    let text = error.to_string();
    text.contains("ralph.toml") || text.contains("key") || text.contains("RALPH_")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_file_loads_or_names_where_it_is_wrong(text in tomlish()) {
        Jail::expect_with(|jail| {
            jail.create_file("ralph.toml", &text)?;
            if let Err(e) = Config::load(jail.directory()) {
                assert!(names_a_key_or_the_file(&e), "{text:?}: {e}");
            }
            Ok(())
        });
    }

    #[test]
    fn any_environment_value_loads_or_names_the_variable(
        key in prop_oneof![Just("MAX_ITERATIONS"), Just("RETRIES"), Just("STAGE_TIMEOUT"),
            Just("CONTEXT__WARN"), Just("CLAUDE__MAX_TURNS"), Just("ONCE")],
        value in "[ -~]{0,16}",
    ) {
        Jail::expect_with(|jail| {
            jail.set_env(format!("RALPH_{key}"), &value);
            if let Err(e) = Config::load(jail.directory()) {
                assert!(e.to_string().contains("RALPH_"), "{key}={value:?}: {e}");
            }
            Ok(())
        });
    }

    #[test]
    fn counts_within_their_bounds_load_and_beyond_them_are_refused(
        retries in 0u64..=u64::from(u32::MAX),
        iterations in 1u64..=u64::from(u32::MAX),
    ) {
        Jail::expect_with(|jail| {
            jail.create_file(
                "ralph.toml",
                &format!("retries = {retries}\nmax_iterations = {iterations}\n"),
            )?;
            let loaded = Config::load(jail.directory());
            let fits = retries <= u64::from(bounds::MAX_RETRIES)
                && iterations <= u64::from(bounds::MAX_ITERATIONS);
            match loaded {
                Ok(config) => {
                    assert!(fits, "{retries}/{iterations} loaded");
                    assert_eq!(u64::from(config.retries), retries);
                }
                Err(e) => {
                    assert!(!fits, "{retries}/{iterations}: {e}");
                    let text = e.to_string();
                    assert!(text.contains("retries") || text.contains("max_iterations"), "{text}");
                }
            }
            Ok(())
        });
    }
}
