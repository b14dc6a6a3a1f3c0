//! Freed heap goes back to the system. Its own test binary, so that no other test allocates in
//! this process while resident memory is measured.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn memory_freed_between_live_allocations_is_given_back() {
    // 64 MiB in blocks small enough for the heap (not their own mappings), each followed by a
    // small block that stays: freeing the big ones leaves holes the allocator cannot shrink
    // away from the top of the heap.
    const BLOCK: usize = 32 * 1024;
    const BLOCKS: usize = 2048;
    let mut kept = Vec::with_capacity(BLOCKS);
    let mut freed = Vec::with_capacity(BLOCKS);
    for i in 0..BLOCKS {
        freed.push(vec![i as u8 | 1; BLOCK]);
        kept.push(vec![i as u8; 64]);
    }
    let filled = resident_kib();
    drop(freed);
    let before = resident_kib();
    assert!(
        filled - before < 16 * 1024,
        "without a trim the holes stay resident ({filled} KiB, then {before} KiB)"
    );

    assert!(
        reactstep::runtime::heap_trim::trim(),
        "some pages were released"
    );
    let after = resident_kib();
    assert!(
        before - after > 48 * 1024,
        "most of the 64 MiB freed went back: {before} KiB before the trim, {after} KiB after"
    );
    // The small blocks lived through the trim: the holes were between live allocations.
    drop(kept);
}
