//! What a stdio MCP server starts with. Not the driver's environment, which holds the model's key
//! and whatever else the user's shell exports, but the few variables a program needs to find its
//! tools and its home (the set MCP's own SDKs pass on), plus each one named by `--mcp-env`.

use std::ffi::OsString;

use crate::driver::memory::redact::names_a_secret;

/// Passed on to every stdio server when the driver has them: where programs are, who and where
/// the user is, the terminal, the locale and the temporary folder. None of them holds a secret.
#[cfg(not(windows))]
const INHERITED: [&str; 10] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR",
];
#[cfg(windows)]
const INHERITED: [&str; 13] = [
    "APPDATA",
    "HOMEDRIVE",
    "HOMEPATH",
    "LOCALAPPDATA",
    "PATH",
    "PROCESSOR_ARCHITECTURE",
    "PROGRAMFILES",
    "SYSTEMDRIVE",
    "SYSTEMROOT",
    "TEMP",
    "TMP",
    "USERNAME",
    "USERPROFILE",
];

/// The variables a stdio server starts with, as (name, value).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerEnvironment {
    pub variables: Vec<(OsString, OsString)>,
    /// Values passed under a name that holds a secret: one given on the command line
    /// (`NAME=value`) is in no environment the driver scans, and one passed by name may be
    /// shorter than the scan keeps; both are taken out of what the server says.
    pub given_secrets: Vec<String>,
}

impl ServerEnvironment {
    /// [`INHERITED`] as `lookup` finds them, then each of `passed`: `NAME` (taken from
    /// `lookup`, an error when it has no such variable) or `NAME=value`. A later entry for a
    /// name replaces an earlier one.
    pub fn new(
        passed: &[String],
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Self, String> {
        let mut env = Self::default();
        for name in INHERITED {
            // A shell function exported by bash (`() { …`) is no value a server needs.
            if let Some(value) = lookup(name).filter(|v| !v.as_encoded_bytes().starts_with(b"()")) {
                env.set(name, value);
            }
        }
        for entry in passed {
            let (name, given) = match entry.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (entry.as_str(), None),
            };
            // Not echoed: what stands before a mistaken `=` may be a pasted secret.
            if !valid_name(name) {
                return Err(
                    "--mcp-env takes NAME or NAME=value, where NAME is letters, digits \
                     and `_`, not starting with a digit"
                        .into(),
                );
            }
            let value = match given {
                Some(value) => {
                    if names_a_secret(name) {
                        env.given_secrets.push(value.to_string());
                    }
                    OsString::from(value)
                }
                None => {
                    let value = lookup(name).ok_or_else(|| not_set(name))?;
                    // The environment's scan keeps only values of 8 bytes and more; one passed
                    // on by name is as named as one given on the line.
                    if let Some(text) = value.to_str().filter(|_| names_a_secret(name)) {
                        env.given_secrets.push(text.to_string());
                    }
                    value
                }
            };
            env.set(name, value);
        }
        Ok(env)
    }

    /// From the driver's own environment.
    pub fn from_process(passed: &[String]) -> Result<Self, String> {
        Self::new(passed, |name| std::env::var_os(name))
    }

    fn set(&mut self, name: &str, value: OsString) {
        self.variables.retain(|(n, _)| n != name);
        self.variables.push((name.into(), value));
    }
}

/// Why a name cannot be passed. The name is shown only when it is written as variables' names
/// are (capitals, digits, `_`): `--mcp-env $GITHUB_TOKEN` passes the token itself as a name.
fn not_set(name: &str) -> String {
    unset_variable("--mcp-env", name)
}

/// Why `flag`'s variable `name` gives nothing: shown by name only when it is written as
/// variables' names are (capitals, digits, `_`), since a flag given `$TOKEN` by mistake names
/// the token itself.
pub fn unset_variable(flag: &str, name: &str) -> String {
    let conventional = name
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    match conventional {
        true => format!("{flag} names {name}, which is not set in the environment (or not UTF-8)"),
        false => format!(
            "{flag} names a variable that is not set in the environment (not shown: it is not \
             written as a variable's name, and may be a secret)"
        ),
    }
}

/// A name a shell can export: letters, digits and `_`, not starting with a digit.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(name: &str) -> Option<OsString> {
        match name {
            "PATH" => Some("/usr/bin".into()),
            "HOME" => Some("/home/me".into()),
            "SHELL" => Some("() { :; }; echo pwned".into()),
            "OPENAI_API_KEY" => Some("sk-driver-key-123456".into()),
            "HTTPS_PROXY" => Some("http://proxy:3128".into()),
            "DB_PASSWORD" => Some("hunter2".into()),
            _ => None,
        }
    }

    fn names(env: &ServerEnvironment) -> Vec<String> {
        env.variables
            .iter()
            .map(|(n, v)| format!("{}={}", n.to_string_lossy(), v.to_string_lossy()))
            .collect()
    }

    #[test]
    fn only_the_few_a_program_needs_are_inherited_never_a_key() {
        let env = ServerEnvironment::new(&[], driver).unwrap_or_default();
        assert_eq!(names(&env), ["HOME=/home/me", "PATH=/usr/bin"]);
        assert!(env.given_secrets.is_empty());
    }

    #[test]
    fn named_variables_are_passed_from_the_driver_or_as_given() {
        let passed = [
            "HTTPS_PROXY".to_string(),
            "DB_PASSWORD".into(),
            "GITHUB_TOKEN=ghp_given_on_the_line".into(),
            "PATH=/opt/bin".into(),
            "EMPTY=".into(),
        ];
        let env = ServerEnvironment::new(&passed, driver).unwrap_or_default();
        assert_eq!(
            names(&env),
            [
                "HOME=/home/me",
                "HTTPS_PROXY=http://proxy:3128",
                "DB_PASSWORD=hunter2",
                "GITHUB_TOKEN=ghp_given_on_the_line",
                "PATH=/opt/bin",
                "EMPTY=",
            ]
        );
        // A short secret passed by name is scrubbed too (the environment's scan needs 8 bytes).
        assert_eq!(env.given_secrets, ["hunter2", "ghp_given_on_the_line"]);
    }

    #[test]
    fn an_unset_or_malformed_name_is_refused_without_echoing_a_value() {
        let unset = ServerEnvironment::new(&["NOT_SET".into()], driver);
        assert!(unset.is_err_and(|e| e.contains("NOT_SET") && e.contains("not set")));
        // A token passed where a name belongs (`--mcp-env $GITHUB_TOKEN`) is not echoed.
        let pasted = ServerEnvironment::new(&["ghp_R3alL00kingT0ken".into()], driver);
        assert!(pasted.is_err_and(|e| !e.contains("R3al") && e.contains("not set")));
        for bad in ["=value", "9LIVES=x", "A B=secret-value", "A-B", ""] {
            let Err(refused) = ServerEnvironment::new(&[bad.to_string()], driver) else {
                panic!("{bad:?} is not a variable's name");
            };
            assert!(!refused.contains("secret-value"), "{refused}");
        }
    }
}
