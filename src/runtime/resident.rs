//! Gives back the memory of data compiled into the binary once start-up has read it.
//!
//! The token encoders are built at start from tables compiled into the executable (about 29 MB,
//! packed with LZ4 and zstd: `src/step/context/packed_table.rs`). Once built, those tables are
//! never read again, but their pages stay resident
//! and count against the process (and a container's memory limit) for its whole life. The
//! kernel is asked to page out the executable's read-only data; a page that is needed later is
//! read back from the file. `MADV_PAGEOUT` never discards what it cannot restore: a page that
//! was written (relocated data) is kept or swapped, not dropped.

/// Pages out the executable's read-only data mappings; returns the bytes advised. Failures
/// (an old kernel, an unreadable `/proc`) only cost the memory, so they are logged and ignored.
#[cfg(target_os = "linux")]
pub fn release_compiled_in_data() -> usize {
    let (Ok(exe), Ok(maps)) = (
        std::env::current_exe(),
        std::fs::read_to_string("/proc/self/maps"),
    ) else {
        return 0;
    };
    let mut advised = 0;
    for (start, end) in read_only_mappings_of(&maps, &exe) {
        // SAFETY: the range is a whole mapping of this process, as the kernel listed it, and
        // MADV_PAGEOUT changes no contents: the pages stay valid and fault back in from the file.
        let done =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_PAGEOUT) };
        if done == 0 {
            advised += end - start;
        } else {
            tracing::debug!(error = %std::io::Error::last_os_error(), "madvise(MADV_PAGEOUT) refused");
        }
    }
    advised
}

#[cfg(not(target_os = "linux"))]
pub fn release_compiled_in_data() -> usize {
    0
}

/// The `r--p` mappings of `exe` in a `/proc/<pid>/maps` listing, as address ranges.
#[cfg(target_os = "linux")]
fn read_only_mappings_of(maps: &str, exe: &std::path::Path) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3)?;
            if perms != "r--p" || std::path::Path::new(path) != exe {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (end > start).then_some((start, end))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn only_the_executables_read_only_data_is_chosen() {
        let maps = "\
55d0a0000000-55d0a2d00000 r--p 00000000 fe:00 77 /srv/reactstep
55d0a2d00000-55d0a3000000 r-xp 02d00000 fe:00 77 /srv/reactstep
55d0a3000000-55d0a3040000 r--p 03000000 fe:00 77 /srv/reactstep
55d0a3040000-55d0a3050000 rw-p 03040000 fe:00 77 /srv/reactstep
55d0a4000000-55d0a5000000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000100000 r--p 00000000 fe:00 12 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000201000 r--p 00000000 00:00 0
not a mapping line";
        let chosen = read_only_mappings_of(maps, std::path::Path::new("/srv/reactstep"));
        assert_eq!(
            chosen,
            vec![
                (0x55d0_a000_0000, 0x55d0_a2d0_0000),
                (0x55d0_a300_0000, 0x55d0_a304_0000)
            ]
        );
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_encoders_still_count_after_their_tables_are_paged_out() {
        crate::step::context::tokens::warm_up();
        let counter = crate::step::context::tokens::TokenCounter::for_model(
            crate::llm::Provider::OPENAI,
            "gpt-4o",
        );
        let before = counter.count("fn main() { println!(\"hello\"); }");
        assert!(
            release_compiled_in_data() > 0,
            "the test binary has read-only data"
        );
        assert_eq!(counter.count("fn main() { println!(\"hello\"); }"), before);
    }
}
