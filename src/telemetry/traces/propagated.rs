//! The W3C Trace Context headers a request carries, bounded before the propagator reads them:
//! whatever it keeps is copied into every span of the request, and each span may wait in the
//! export queue. The SDK's propagator checks each `tracestate` entry but not how many there are,
//! so a 100 KB header would ride along in every queued span.
//!
//! What the specification (Trace Context, §3.3) allows, and so what is done here:
//! - an invalid `tracestate` (an entry out of its grammar, a key twice) is ignored whole;
//! - at most 32 list-members: entries past the 32nd are dropped unread;
//! - a header over 512 characters is cut by dropping whole entries, those over 128 characters
//!   first, then from the end;
//! - a `traceparent` sent twice, or longer than any version could make it, is ignored (and
//!   with it the `tracestate`).
//!
//! Beyond the specification, an entry that holds a secret (the caller's bearer token, anything
//! shaped like a key, as the edge judges it) is dropped: every span would carry it to the
//! collector.

/// Entries kept at most.
pub const MAX_MEMBERS: usize = 32;
/// Characters of the joined `tracestate` kept at most.
pub const MAX_LEN: usize = 512;
/// Entries longer than this go first when the header is too long.
const LONG_MEMBER: usize = 128;
/// Version 00 is 55 characters; later versions may add fields, not this many.
const MAX_TRACEPARENT: usize = 256;

/// The one `traceparent` worth reading, if any.
pub fn traceparent<'a>(mut fields: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let first = fields.next()?;
    (fields.next().is_none() && first.len() <= MAX_TRACEPARENT).then_some(first)
}

/// The `tracestate` fields (in the order received) as the entries to propagate, joined, those
/// that hold a `secret` left out; `None` when there is nothing valid to propagate.
pub fn tracestate<'a>(
    fields: impl Iterator<Item = &'a str>,
    secret: impl Fn(&str) -> bool,
) -> Option<String> {
    let mut members: Vec<&str> = Vec::new();
    let entries = fields
        .flat_map(|field| field.split(','))
        .map(|member| member.trim_matches([' ', '\t']))
        .filter(|member| !member.is_empty());
    for member in entries.take(MAX_MEMBERS) {
        let (key, value) = member.split_once('=')?;
        if !valid_key(key) || !valid_value(value) {
            return None;
        }
        if members
            .iter()
            .any(|kept| kept.split_once('=').map(|(k, _)| k) == Some(key))
        {
            return None;
        }
        members.push(member);
    }
    members.retain(|member| !secret(member));
    fit(&mut members);
    (!members.is_empty()).then(|| members.join(","))
}

/// Drops entries until the joined header fits [`MAX_LEN`]: long ones first, then from the end.
fn fit(members: &mut Vec<&str>) {
    let joined = |members: &[&str]| members.iter().map(|m| m.len() + 1).sum::<usize>() - 1;
    while !members.is_empty() && joined(members) > MAX_LEN {
        match members.iter().rposition(|m| m.len() > LONG_MEMBER) {
            Some(long) => members.remove(long),
            None => members.remove(members.len() - 1),
        };
    }
}

/// `simple-key` or `tenant@system`: lower-case letters, digits and `_-*/`, starting with a
/// letter or digit; at most 256 characters, the system at most 14.
fn valid_key(key: &str) -> bool {
    let part = |part: &str, max: usize| {
        let bytes = part.as_bytes();
        !bytes.is_empty()
            && bytes.len() <= max
            && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
            && bytes.iter().all(|&b| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || matches!(b, b'_' | b'-' | b'*' | b'/')
            })
    };
    match key.split_once('@') {
        None => part(key, 256),
        Some((tenant, system)) => {
            part(tenant, 241) && part(system, 14) && system.as_bytes()[0].is_ascii_lowercase()
        }
    }
}

/// 1 to 256 printable ASCII characters other than `,` and `=`, not ending in a space.
fn valid_value(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 256
        && !value.ends_with(' ')
        && value
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;

    fn state(fields: &[&str]) -> Option<String> {
        tracestate(fields.iter().copied(), |_| false)
    }

    #[test]
    fn an_entry_holding_a_secret_is_dropped_and_the_rest_kept() {
        let secret = |member: &str| member.contains("s3cret");
        let kept = tracestate(["a=1,k=s3cret,b=2"].into_iter(), secret);
        assert_eq!(kept.as_deref(), Some("a=1,b=2"));
        assert_eq!(tracestate(["k=xs3cretx"].into_iter(), secret), None);
    }

    #[test]
    fn a_valid_small_header_passes_unchanged() {
        let header = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7,fw529a3039@dt=x";
        assert_eq!(state(&[header]).as_deref(), Some(header));
    }

    #[test]
    fn fields_are_combined_and_blank_entries_dropped() {
        assert_eq!(
            state(&["a=1 , ,b=2", "\tc=3"]).as_deref(),
            Some("a=1,b=2,c=3")
        );
        assert_eq!(state(&[" , "]), None);
    }

    #[test]
    fn an_invalid_or_repeated_entry_voids_the_header() {
        for bad in [
            "a",
            "A=1",
            "a=",
            "a=b=c",
            "a=1,a=2",
            "a=\u{7f}",
            "@x=1",
            "t@Sys=1",
            "t@abcdefghijklmno=1",
            "a=\u{e9}",
        ] {
            assert_eq!(state(&[bad]), None, "{bad}");
        }
    }

    #[test]
    fn past_32_entries_the_rest_is_not_read() {
        let mut members: Vec<String> = (0..32).map(|i| format!("k{i}=v")).collect();
        members.push("INVALID".into());
        let header = members.join(",");
        let kept = state(&[&header]).unwrap();
        assert_eq!(kept.split(',').count(), 32);
        assert!(kept.len() <= MAX_LEN);
    }

    #[test]
    fn a_long_header_loses_long_entries_first_then_the_last() {
        let long = format!("long={}", "x".repeat(200));
        let short: Vec<String> = (0..20)
            .map(|i| format!("key{i:02}={}", "v".repeat(20)))
            .collect();
        let mut members = vec![short[0].clone(), long];
        members.extend(short[1..].iter().cloned());
        let kept = state(&[&members.join(",")]).unwrap();
        assert!(kept.len() <= MAX_LEN, "{}", kept.len());
        assert!(!kept.contains("long="), "the long entry goes first");
        assert!(kept.starts_with("key00="), "{kept}");
        // Whole entries, from the front, in order.
        let expected: Vec<&str> = short
            .iter()
            .map(String::as_str)
            .take(kept.split(',').count())
            .collect();
        assert_eq!(kept, expected.join(","));
    }

    #[test]
    fn a_hundred_kilobyte_header_keeps_at_most_512_characters() {
        let member = format!("k={}", "v".repeat(250));
        let header = vec![member; 400].join(",");
        // 400 copies of one key: the first 32 hold a duplicate, so it is invalid whole.
        assert_eq!(state(&[&header]), None);
        let distinct: Vec<String> = (0..400)
            .map(|i| format!("k{i}={}", "v".repeat(250)))
            .collect();
        let kept = state(&[&distinct.join(",")]).unwrap();
        assert!(kept.len() <= MAX_LEN && kept.split(',').count() <= MAX_MEMBERS);
    }

    #[test]
    fn one_short_traceparent_is_read() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(traceparent([parent].into_iter()), Some(parent));
        assert_eq!(traceparent([parent, parent].into_iter()), None);
        let long = format!("{parent}-{}", "0".repeat(300));
        assert_eq!(traceparent([long.as_str()].into_iter()), None);
        assert_eq!(traceparent(std::iter::empty()), None);
    }
}
