//! Compresses the token encoders' tables into `OUT_DIR` for `src/step/context/encoder_tables.rs`.
//!
//! bpe-openai compiles its encoders into the binary as msgpack: 32 MB for `o200k_base` and 15 MB
//! for `cl100k_base`, three quarters of the release binary. Here each encoder, read from
//! bpe-openai itself, is written again by its own serde implementation in postcard's form (30 MB
//! and 14 MB: integers as varints, byte strings borrowed whole, no type tags, so the service
//! reads it in about half the instructions msgpack takes) and packed in frames of `FRAME_BYTES`,
//! so that the service can inflate them on several cores at once: `o200k_base`, read at every
//! start, as LZ4 blocks (inflated in a tenth of zstd's instructions), `cl100k_base`, built on
//! first use, as zstd frames (a third smaller); `src/step/context/packed_table.rs` reads both.
//! The service then never names bpe-openai's own tables, and the linker leaves them out.
//!
//! Release builds use zstd's level 19 (once per target folder; `cl100k_base` comes to 6.7 MB);
//! other builds use level 1, which is quick and decompresses as fast. LZ4 has one level.

use std::path::PathBuf;

/// Bytes of table per frame: 4 MiB, 8 frames for `o200k_base`.
const FRAME_BYTES: usize = 4 << 20;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_else(|| panic!("no OUT_DIR")));
    let level = match std::env::var("PROFILE").as_deref() {
        Ok("release") => 19,
        _ => 1,
    };
    for (name, tokenizer, packed) in [
        ("o200k_base", bpe_openai::o200k_base(), "lz4"),
        ("cl100k_base", bpe_openai::cl100k_base(), "zst"),
    ] {
        let table = postcard::to_stdvec(&tokenizer.bpe)
            .unwrap_or_else(|e| panic!("{name}: cannot serialise: {e}"));
        let mut frames = Vec::new();
        for chunk in table.chunks(FRAME_BYTES) {
            if packed == "lz4" {
                // Each block after its packed and inflated sizes, little-endian.
                let block = lz4_flex::block::compress(chunk);
                frames.extend_from_slice(&size(block.len()));
                frames.extend_from_slice(&size(chunk.len()));
                frames.extend_from_slice(&block);
            } else {
                let frame = zstd::bulk::compress(chunk, level)
                    .unwrap_or_else(|e| panic!("{name}: cannot compress: {e}"));
                frames.extend_from_slice(&frame);
            }
        }
        let path = out.join(format!("{name}.postcard.{packed}"));
        std::fs::write(&path, frames)
            .unwrap_or_else(|e| panic!("{}: cannot write: {e}", path.display()));
    }
}

fn size(bytes: usize) -> [u8; 4] {
    u32::try_from(bytes)
        .unwrap_or_else(|_| panic!("a frame of {bytes} bytes"))
        .to_le_bytes()
}
