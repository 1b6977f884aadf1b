//! Serde for durations as human strings: `"5m"`, `"90s"`, `"1h 30m"`, `"250ms"`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer, de::Error};

/// Writes `"5m"`.
///
/// # Errors
///
/// Never, beyond the serializer's own.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

/// Reads `"5m"`; a bare number is refused because its unit would be a guess.
///
/// # Errors
///
/// When the value is not a duration string.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Text(String),
        Number(f64),
    }
    match Written::deserialize(d)? {
        Written::Text(text) => humantime::parse_duration(text.trim()).map_err(|e| {
            D::Error::custom(format!(
                "invalid duration {text:?}: {e} (write e.g. \"90s\", \"5m\", \"1h\")"
            ))
        }),
        Written::Number(n) => Err(D::Error::custom(format!(
            "a duration needs a unit: write \"{n}s\" or \"{n}ms\", not {n}"
        ))),
    }
}

/// The same for an optional duration.
pub mod option {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `"5m"`, or nothing.
    ///
    /// # Errors
    ///
    /// Never, beyond the serializer's own.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    /// Reads `"5m"` or nothing.
    ///
    /// # Errors
    ///
    /// When the value is not a duration string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Text(#[serde(with = "super")] Duration);
        Ok(Option::<Text>::deserialize(d)?.map(|t| t.0))
    }
}

#[cfg(test)]
// `Jail` closures return figment's own (large) error type.
#[allow(clippy::result_large_err)]
mod tests {
    use figment::Jail;

    use crate::config::Config;

    #[test]
    fn unitless_duration_is_refused() {
        Jail::expect_with(|jail| {
            jail.create_file("ralph.toml", "stage_timeout = 300\n")?;
            let msg = Config::load(jail.directory()).unwrap_err().to_string();
            assert!(
                msg.contains("stage_timeout") && msg.contains("needs a unit"),
                "{msg}"
            );
            Ok(())
        });
    }

    #[test]
    fn durations_round_trip_as_strings() {
        let text = toml::to_string(&Config::default()).unwrap();
        assert!(text.contains("stage_timeout = \"5m\""), "{text}");
    }
}
