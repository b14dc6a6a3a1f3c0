//! A session's name: what `run --session`, the page and the store accept, and how a name typed
//! to look a session up is read (as `run --session` reads it, so what a run saved is found by
//! the same text).

/// The longest session name.
const MOST_NAME_CHARS: usize = 200;

/// A session's name as given: words of at most 200 characters, trimmed, without control
/// characters, Unicode format characters (bidi overrides, zero-width spaces …) or line and
/// paragraph separators, any of which would make a name look like another one.
pub fn session_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    if name.is_empty() {
        return Err("a session name cannot be empty".into());
    }
    if name.chars().count() > MOST_NAME_CHARS || name.chars().any(is_hidden) {
        return Err(format!(
            "a session name is at most {MOST_NAME_CHARS} characters, without control characters, \
             format characters (bidi overrides, zero-width spaces) or line separators"
        ));
    }
    Ok(name.to_string())
}

/// The name a session is looked up by (`sessions show NAME`, `delete`, the page's
/// `api/sessions/NAME`): trimmed, as [`session_name`] keeps it; `None` for a name no session
/// can have (empty, or holding NUL, which PostgreSQL cannot even compare).
pub fn lookup(text: &str) -> Option<&str> {
    let name = text.trim();
    (!name.is_empty() && !name.contains('\0')).then_some(name)
}

/// A character that shows as nothing, or moves or reorders what follows it.
fn is_hidden(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') || is_format(c)
}

/// Unicode's general category `Cf` (format characters), as of Unicode 16.
fn is_format(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_name_is_words_without_control_characters() {
        assert_eq!(session_name(" work "), Ok("work".into()));
        assert_eq!(session_name("naïve 日本 🦀"), Ok("naïve 日本 🦀".into()));
        assert!(session_name("  ").is_err());
        assert!(session_name("a\u{1b}[2J").is_err());
        assert!(session_name(&"x".repeat(201)).is_err());
        assert!(session_name(&"🦀".repeat(200)).is_ok());
    }

    #[test]
    fn format_characters_and_separators_are_refused() {
        for hidden in [
            '\u{202E}',
            '\u{200B}',
            '\u{200D}',
            '\u{2066}',
            '\u{FEFF}',
            '\u{00AD}',
            '\u{2028}',
            '\u{2029}',
            '\u{E0041}',
            '\u{0085}',
        ] {
            let name = format!("rtl{hidden}gnp.exe");
            assert!(session_name(&name).is_err(), "{:04X}", u32::from(hidden));
        }
    }

    #[test]
    fn a_looked_up_name_is_trimmed_and_one_holding_nul_is_none() {
        assert_eq!(lookup("  padded  "), Some("padded"));
        assert_eq!(lookup("a\0b"), None);
        assert_eq!(lookup("   "), None);
    }
}
