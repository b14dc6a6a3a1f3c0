//! The standard `OTEL_*` variables the SDK and the exporter read, checked before they do: each
//! reads a value it cannot use as unset, or as its default, without a word (a collector's key
//! not sent, every span sampled, a 10 s timeout), and one reads a queue size it then takes
//! whole at start. What is wrong stops start-up, said plainly, a value that may be a secret
//! never quoted.

/// The standard variables the exporter reads. The SDK takes one that is not UTF-8 for unset:
/// a collector's key in `OTEL_EXPORTER_OTLP_HEADERS` would silently not be sent.
const OTEL_VARIABLES: [&str; 9] = [
    HEADERS[0],
    HEADERS[1],
    TIMEOUTS[0],
    TIMEOUTS[1],
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_BSP_MAX_QUEUE_SIZE",
];

const HEADERS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
];
const TIMEOUTS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
];

/// The samplers this SDK builds; it takes any other for `parentbased_always_on`.
const SAMPLERS: [&str; 6] = [
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
];

/// Every standard variable that is set, as the SDK would read it, is what it means.
pub fn check() -> Result<(), String> {
    all_text(|name| std::env::var_os(name))?;
    let var = |name: &str| std::env::var(name).ok();
    queue_within(var("OTEL_BSP_MAX_QUEUE_SIZE"))?;
    read_as_meant(var)
}

/// Headers, timeouts and the sampler, as the SDK reads them.
fn read_as_meant(var: impl Fn(&str) -> Option<String>) -> Result<(), String> {
    for name in HEADERS {
        headers(name, var(name))?;
    }
    for name in TIMEOUTS {
        match var(name) {
            Some(ms) if ms.trim().parse::<u64>().is_err() => {
                return Err(format!(
                    "{name} {ms:?}: the export timeout is a whole number of milliseconds"
                ));
            }
            _ => {}
        }
    }
    sampler(var("OTEL_TRACES_SAMPLER"), var("OTEL_TRACES_SAMPLER_ARG"))
}

/// `key=value` pairs, comma-separated, each a header name and a value, percent-decoded as the
/// exporter decodes it (it drops any other entry, a collector's key with it). Not quoted: a
/// value is likely a key.
fn headers(name: &str, set: Option<String>) -> Result<(), String> {
    let Some(set) = set else { return Ok(()) };
    let entries = set.split_terminator(',').map(str::trim).enumerate();
    for (i, entry) in entries.filter(|(_, e)| !e.is_empty()) {
        let pair = entry.split_once('=');
        let fine = pair.is_some_and(|(key, value)| {
            let value = value.trim();
            let decoded = percent_encoding::percent_decode_str(value).collect::<Vec<u8>>();
            reqwest::header::HeaderName::from_bytes(key.trim().as_bytes()).is_ok()
                && !value.is_empty()
                && reqwest::header::HeaderValue::from_bytes(&decoded).is_ok()
        });
        if !fine {
            return Err(format!(
                "{name}: entry {} is not a header's name=value (the exporter would drop it)",
                i + 1
            ));
        }
    }
    Ok(())
}

/// A sampler this SDK builds, and for a ratio one, a ratio from 0 to 1 when one is given (1
/// otherwise, as the specification has it).
fn sampler(sampler: Option<String>, arg: Option<String>) -> Result<(), String> {
    let Some(sampler) = sampler else {
        return Ok(());
    };
    if !SAMPLERS.contains(&sampler.as_str()) {
        return Err(format!(
            "OTEL_TRACES_SAMPLER {sampler:?}: this service's SDK builds {}",
            SAMPLERS.join(", ")
        ));
    }
    if !sampler.ends_with("traceidratio") {
        return Ok(());
    }
    let Some(arg) = arg else { return Ok(()) };
    match arg.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(()),
        _ => Err(format!(
            "OTEL_TRACES_SAMPLER_ARG {arg:?}: {sampler} samples the ratio it gives, from 0 to 1"
        )),
    }
}

/// Every one of [`OTEL_VARIABLES`] that is set is text.
fn all_text(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<(), String> {
    match OTEL_VARIABLES
        .iter()
        .find(|name| var(name).is_some_and(|v| v.to_str().is_none()))
    {
        Some(name) => Err(format!("{name} is not UTF-8: set it again, or unset it")),
        None => Ok(()),
    }
}

/// The most spans the export queue may hold: the SDK takes the whole queue at start (about
/// 370 bytes a span), so a mistaken figure took gigabytes, or stopped start-up with no word of
/// why.
const MOST_QUEUED_SPANS: usize = 65_536;

/// `OTEL_BSP_MAX_QUEUE_SIZE`, when set, is a number of spans within [`MOST_QUEUED_SPANS`].
fn queue_within(set: Option<String>) -> Result<(), String> {
    let Some(text) = set else { return Ok(()) };
    match text.trim().parse::<usize>() {
        Ok(spans) if (1..=MOST_QUEUED_SPANS).contains(&spans) => Ok(()),
        _ => Err(format!(
            "OTEL_BSP_MAX_QUEUE_SIZE {text:?}: the export queue holds 1 to {MOST_QUEUED_SPANS} spans (each taken at start)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_standard_variable_that_is_not_text_stops_start_up() {
        use std::os::unix::ffi::OsStringExt as _;
        let latin1 = |name: &str| {
            (name == "OTEL_EXPORTER_OTLP_HEADERS")
                .then(|| std::ffi::OsString::from_vec(b"x-key=\xe9".to_vec()))
        };
        assert_eq!(
            all_text(latin1).err().as_deref(),
            Some("OTEL_EXPORTER_OTLP_HEADERS is not UTF-8: set it again, or unset it")
        );
        assert!(all_text(|_| Some("fine".into())).is_ok());
        assert!(all_text(|_| None).is_ok());
    }

    #[test]
    fn the_export_queue_is_held_to_what_start_up_can_take() {
        assert!(queue_within(None).is_ok());
        for fine in ["1", "2048", " 65536 "] {
            assert!(queue_within(Some(fine.into())).is_ok(), "{fine}");
        }
        for bad in ["0", "65537", "100000000", "-1", "lots"] {
            let refused = queue_within(Some(bad.into())).err().unwrap_or_default();
            assert!(refused.contains("OTEL_BSP_MAX_QUEUE_SIZE"), "{refused}");
        }
    }

    #[test]
    fn what_the_sdk_would_read_as_unset_or_default_stops_start_up() {
        let with = |pairs: &[(&'static str, &'static str)]| {
            let pairs = pairs.to_vec();
            read_as_meant(move |name| {
                let found = pairs.iter().find(|(n, _)| *n == name);
                found.map(|(_, v)| v.to_string())
            })
        };
        for fine in [
            vec![],
            vec![(
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-api-key=abc, x-team = a%20b,",
            )],
            vec![("OTEL_EXPORTER_OTLP_TIMEOUT", " 3000 ")],
            vec![("OTEL_TRACES_SAMPLER", "parentbased_always_off")],
            vec![
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ],
            // The specification's default ratio is 1.
            vec![("OTEL_TRACES_SAMPLER", "traceidratio")],
        ] {
            assert_eq!(with(&fine), Ok(()), "{fine:?}");
        }
        for (bad, says) in [
            (
                vec![("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key:s3cret")],
                "entry 1",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "a=1,=s3cret")],
                "entry 2",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_HEADERS", "bad key=s3cret")],
                "entry 1",
            ),
            (vec![("OTEL_EXPORTER_OTLP_HEADERS", "x-key=")], "entry 1"),
            (vec![("OTEL_EXPORTER_OTLP_TIMEOUT", "-5")], "whole number"),
            (
                vec![("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "soon")],
                "whole number",
            ),
            (
                vec![("OTEL_TRACES_SAMPLER", "sometimes")],
                "builds always_on",
            ),
            (vec![("OTEL_TRACES_SAMPLER", "xray")], "builds always_on"),
            (
                vec![("OTEL_EXPORTER_OTLP_HEADERS", "x-ok=1,x-key=s3c%0Aret")],
                "entry 2",
            ),
            (
                vec![
                    ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "2"),
                ],
                "from 0 to 1",
            ),
        ] {
            let refused = with(&bad).err().unwrap_or_default();
            assert!(refused.contains(says), "{bad:?}: {refused}");
            assert!(!refused.contains("Some("), "{refused}");
            assert!(!refused.contains("s3cret"), "{refused}");
        }
    }
}
