//! An encoder's table as build.rs packs it into the binary: a run of frames, each holding up to
//! 4 MiB of the table, inflated each into its own part of one buffer on up to one thread per core.
//!
//! Two packings, each for how its table is used. `o200k_base` is read at every start, before the
//! service is ready: LZ4 blocks, which inflate in about a tenth of zstd's instructions (45 M
//! against 530 M for its 29.5 MB) for 7.9 MB more of binary. `cl100k_base` is built only when a
//! request names a model that counts with it: zstd frames, a third the size of LZ4's.

use std::io::{Error, ErrorKind, Result};

#[derive(Clone, Copy, Debug)]
pub enum Packing {
    /// zstd frames, each carrying its inflated size.
    Zstd,
    /// LZ4 blocks, each after two little-endian u32s: its packed size, then its inflated size.
    Lz4,
}

/// The table's bytes, its frames inflated in parallel.
pub fn inflate(packed: &[u8], packing: Packing) -> Result<Vec<u8>> {
    let frames = frames(packed, packing)?;
    let mut out = vec![0u8; frames.iter().map(|(_, size)| size).sum()];
    let mut slices = Vec::with_capacity(frames.len());
    let mut free = out.as_mut_slice();
    for (frame, size) in frames {
        let (slice, after) = free.split_at_mut(size);
        slices.push((frame, slice));
        free = after;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let per_thread = slices.len().div_ceil(cores.max(1)).max(1);
    std::thread::scope(|scope| {
        let threads: Vec<_> = slices
            .chunks_mut(per_thread)
            .map(|group| scope.spawn(move || inflate_into(group, packing)))
            .collect();
        threads
            .into_iter()
            .try_for_each(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })?;
    Ok(out)
}

fn invalid(what: &str) -> Error {
    Error::new(ErrorKind::InvalidData, what)
}

/// Each frame of `packed` with the size it inflates to.
fn frames(mut packed: &[u8], packing: Packing) -> Result<Vec<(&[u8], usize)>> {
    let mut frames = Vec::new();
    while !packed.is_empty() {
        let (frame, size, rest) = match packing {
            Packing::Zstd => zstd_frame(packed)?,
            Packing::Lz4 => lz4_frame(packed)?,
        };
        frames.push((frame, size));
        packed = rest;
    }
    Ok(frames)
}

/// The first zstd frame, its inflated size, and what follows it.
fn zstd_frame(packed: &[u8]) -> Result<(&[u8], usize, &[u8])> {
    let length = zstd::zstd_safe::find_frame_compressed_size(packed)
        .map_err(|_| invalid("not a zstd frame"))?;
    let (frame, rest) = packed.split_at(length.min(packed.len()));
    let size = zstd::zstd_safe::get_frame_content_size(frame)
        .ok()
        .flatten()
        .ok_or_else(|| invalid("a frame without its size"))?;
    let size = usize::try_from(size).map_err(|_| invalid("too big"))?;
    Ok((frame, size, rest))
}

/// The first LZ4 block, its inflated size, and what follows it.
fn lz4_frame(packed: &[u8]) -> Result<(&[u8], usize, &[u8])> {
    let word = |at: usize| {
        packed
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(|b| u32::from_le_bytes(b) as usize)
            .ok_or_else(|| invalid("an LZ4 block cut short"))
    };
    let (length, size) = (word(0)?, word(4)?);
    let frame = packed
        .get(8..8 + length)
        .ok_or_else(|| invalid("an LZ4 block cut short"))?;
    Ok((frame, size, &packed[8 + length..]))
}

/// Inflates each frame into its slice, which is exactly its size.
fn inflate_into(group: &mut [(&[u8], &mut [u8])], packing: Packing) -> Result<()> {
    for (frame, slice) in group.iter_mut() {
        let written = match packing {
            Packing::Zstd => zstd::bulk::decompress_to_buffer(frame, slice)?,
            Packing::Lz4 => lz4_flex::block::decompress_into(frame, slice)
                .map_err(|e| invalid(&format!("a bad LZ4 block: {e}")))?,
        };
        if written != slice.len() {
            return Err(invalid("a frame shorter than its size"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `table` packed as build.rs packs `o200k_base`, in frames of `frame` bytes.
    fn lz4_packed(table: &[u8], frame: usize) -> Vec<u8> {
        let mut packed = Vec::new();
        for chunk in table.chunks(frame) {
            let block = lz4_flex::block::compress(chunk);
            packed.extend_from_slice(&(block.len() as u32).to_le_bytes());
            packed.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
            packed.extend_from_slice(&block);
        }
        packed
    }

    fn table() -> Vec<u8> {
        (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect()
    }

    #[test]
    fn both_packings_give_the_table_back() {
        let table = table();
        assert_eq!(
            inflate(&lz4_packed(&table, 65_536), Packing::Lz4).ok(),
            Some(table.clone())
        );
        let zstd: Vec<u8> = table
            .chunks(65_536)
            .flat_map(|c| zstd::bulk::compress(c, 1).unwrap_or_default())
            .collect();
        assert_eq!(inflate(&zstd, Packing::Zstd).ok(), Some(table));
    }

    #[test]
    fn a_damaged_pack_is_refused_not_read_past() {
        assert!(inflate(b"not zstd at all", Packing::Zstd).is_err());
        assert_eq!(inflate(b"", Packing::Zstd).ok(), Some(Vec::new()));
        assert_eq!(inflate(b"", Packing::Lz4).ok(), Some(Vec::new()));
        let packed = lz4_packed(&table(), 65_536);
        // Cut anywhere, a block's sizes or bytes run past the end.
        for cut in [1, 7, 8, 100, packed.len() - 1] {
            assert!(
                inflate(&packed[..cut], Packing::Lz4).is_err(),
                "cut at {cut}"
            );
        }
        // A block that claims more than it inflates to, or less.
        for claim in [65_537u32, 65_535, 0] {
            let mut lying = packed.clone();
            lying[4..8].copy_from_slice(&claim.to_le_bytes());
            assert!(inflate(&lying, Packing::Lz4).is_err(), "claims {claim}");
        }
        // A packed size past the end.
        let mut lying = packed;
        lying[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(inflate(&lying, Packing::Lz4).is_err());
    }
}
