//! How a file is cut up: chunks (the unit of hashing, writing and resuming; a power of two
//! of at least 64 KiB) and, inside each chunk, blocks (one datagram's payload). A block
//! never straddles two chunks, so a chunk is whole exactly when all its blocks are.

/// The smallest chunk.
pub const MIN_CHUNK: u64 = 64 * 1024;
/// The largest chunk (the receiver holds whole chunks in memory).
pub const MAX_CHUNK: u64 = 64 * 1024 * 1024;
/// The default chunk: 1 MiB.
pub const DEFAULT_CHUNK: u64 = 1024 * 1024;
/// The largest file: 2^50 bytes (1 PiB); offsets and counts stay far from overflow.
pub const MAX_FILE: u64 = 1 << 50;
/// The most chunks one file may have: the receiver keeps about 70 bytes of state per chunk
/// (its fill state and hash), so a file's bookkeeping stays under 80 MiB whatever size a
/// peer offers. A sender picks a chunk large enough (`Layout::fitting`).
pub const MAX_CHUNKS: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub size: u64,
    pub chunk: u64,
    pub block: u32,
}

/// Why a layout offered by a peer is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("chunk size {0} is not a power of two between 64 KiB and 64 MiB")]
    Chunk(u64),
    #[error("block size {0} is outside 64..=65000")]
    Block(u32),
    #[error("file size {0} is over 1 PiB")]
    Size(u64),
    #[error("a file of {0} bytes in chunks of {1} bytes is more than 1048576 chunks")]
    Chunks(u64, u64),
}

impl Layout {
    /// Checks a layout's values (they may come from the network).
    pub fn new(size: u64, chunk: u64, block: u32) -> Result<Layout, LayoutError> {
        if !chunk.is_power_of_two() || !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk) {
            return Err(LayoutError::Chunk(chunk));
        }
        if !(64..=crate::wire::MAX_PAYLOAD as u32).contains(&block) {
            return Err(LayoutError::Block(block));
        }
        if size > MAX_FILE {
            return Err(LayoutError::Size(size));
        }
        if size.div_ceil(chunk) > MAX_CHUNKS {
            return Err(LayoutError::Chunks(size, chunk));
        }
        Ok(Layout { size, chunk, block })
    }

    /// The layout a sender offers for a file of `size` bytes: chunks of `chunk` bytes, or
    /// the smallest larger power of two that keeps the file within [`MAX_CHUNKS`].
    pub fn fitting(size: u64, chunk: u64, block: u32) -> Result<Layout, LayoutError> {
        let needed = size.div_ceil(MAX_CHUNKS).max(1).next_power_of_two();
        Layout::new(size, chunk.max(needed).min(MAX_CHUNK.max(chunk)), block)
    }

    pub fn chunks(&self) -> u64 {
        self.size.div_ceil(self.chunk)
    }

    pub fn chunk_len(&self, chunk: u64) -> u64 {
        let start = chunk * self.chunk;
        self.size.saturating_sub(start).min(self.chunk)
    }

    /// Blocks in a full chunk.
    pub fn blocks_per_chunk(&self) -> u64 {
        self.chunk.div_ceil(u64::from(self.block))
    }

    pub fn blocks_in(&self, chunk: u64) -> u64 {
        self.chunk_len(chunk).div_ceil(u64::from(self.block))
    }

    /// All blocks of the file.
    pub fn blocks(&self) -> u64 {
        let chunks = self.chunks();
        if chunks == 0 {
            return 0;
        }
        (chunks - 1) * self.blocks_per_chunk() + self.blocks_in(chunks - 1)
    }

    /// The block's global index, its chunk and its byte range, for a block start.
    pub fn block_at(&self, offset: u64) -> Option<Block> {
        if offset >= self.size {
            return None;
        }
        let chunk = offset / self.chunk;
        let within = offset % self.chunk;
        if !within.is_multiple_of(u64::from(self.block)) {
            return None;
        }
        let index_in_chunk = within / u64::from(self.block);
        let len = (self.chunk_len(chunk) - within).min(u64::from(self.block)) as u32;
        Some(Block {
            index: chunk * self.blocks_per_chunk() + index_in_chunk,
            chunk,
            in_chunk: index_in_chunk as u32,
            offset,
            len,
        })
    }

    /// The block after `block`, if the file goes on.
    pub fn next_block(&self, block: &Block) -> Option<Block> {
        self.block_at(block.offset + u64::from(block.len))
    }

    /// The first block of a chunk.
    pub fn first_block(&self, chunk: u64) -> Option<Block> {
        self.block_at(chunk * self.chunk)
    }
}

/// One block: where it is and how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub index: u64,
    pub chunk: u64,
    pub in_chunk: u32,
    pub offset: u64,
    pub len: u32,
}

/// The whole file's hash from its chunks' hashes, as both ends compute it.
pub fn root_hash(layout: &Layout, chunk_hashes: &[[u8; 32]]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key("linerate copy 2026-11 file root");
    hasher.update(&layout.size.to_le_bytes());
    hasher.update(&layout.chunk.to_le_bytes());
    for hash in chunk_hashes {
        hasher.update(hash);
    }
    *hasher.finalize().as_bytes()
}

/// A buffer of `len` bytes for a chunk: `spare` (one a chunk finished with) resized, else
/// a new one. A new buffer is zeroed by the allocator and its pages by the kernel, which at
/// a chunk a few milliseconds is a few percent of a copy's CPU at either end; a reused
/// one keeps its old bytes, which the chunk's reads or datagrams overwrite, and the chunk
/// is checked against its hash either way.
pub fn chunk_buffer(spare: Option<Vec<u8>>, len: usize) -> Vec<u8> {
    match spare {
        Some(mut buffer) => {
            buffer.resize(len, 0);
            buffer
        }
        None => vec![0u8; len],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer's offer cannot make the receiver keep state for more than MAX_CHUNKS chunks
    /// (a 1 PiB offer in 64 KiB chunks once asked for 512 GiB and aborted the server); a
    /// sender's own layout grows its chunk to fit.
    #[test]
    fn chunks_per_file_are_bounded_and_a_sender_fits_its_chunk() {
        assert_eq!(
            Layout::new(MAX_FILE, MIN_CHUNK, 1400),
            Err(LayoutError::Chunks(MAX_FILE, MIN_CHUNK))
        );
        assert!(Layout::new(MAX_CHUNKS * DEFAULT_CHUNK, DEFAULT_CHUNK, 1400).is_ok());
        assert_eq!(
            Layout::fitting(1 << 40, DEFAULT_CHUNK, 1400).unwrap().chunk,
            1 << 20
        );
        assert_eq!(
            Layout::fitting(1 << 44, DEFAULT_CHUNK, 1400).unwrap().chunk,
            16 << 20
        );
        assert_eq!(
            Layout::fitting(10, DEFAULT_CHUNK, 1400).unwrap().chunk,
            DEFAULT_CHUNK
        );
        // Past what the largest chunk can cover, a sender is told so.
        assert!(Layout::fitting(MAX_FILE, DEFAULT_CHUNK, 1400).is_err());
    }
    use proptest::prelude::*;

    #[test]
    fn blocks_tile_each_chunk_without_crossing() {
        let layout = Layout::new(3 * MIN_CHUNK + 100, MIN_CHUNK, 1000).unwrap();
        assert_eq!(layout.chunks(), 4);
        assert_eq!(layout.blocks_per_chunk(), 66);
        let mut block = layout.block_at(0).unwrap();
        let mut covered = u64::from(block.len);
        let mut count = 1;
        while let Some(next) = layout.next_block(&block) {
            assert_eq!(next.index, block.index + 1);
            assert!(next.offset / MIN_CHUNK == (next.offset + u64::from(next.len) - 1) / MIN_CHUNK);
            covered += u64::from(next.len);
            count += 1;
            block = next;
        }
        assert_eq!(covered, layout.size);
        assert_eq!(count, layout.blocks());
        // The last block of a full chunk is short (65536 = 65 * 1000 + 536).
        assert_eq!(layout.block_at(65_000).unwrap().len, 536);
        assert_eq!(layout.block_at(500), None);
    }

    #[test]
    fn bad_layouts_are_refused() {
        assert!(Layout::new(1, 3 << 20, 1000).is_err());
        assert!(Layout::new(1, 1 << 12, 1000).is_err());
        assert!(Layout::new(1, 1 << 20, 10).is_err());
        assert!(Layout::new(u64::MAX, 1 << 20, 1000).is_err());
    }

    proptest! {
        #[test]
        fn every_offset_maps_to_at_most_one_block(size in 0u64..(1 << 24), block in 64u32..9000, offset in 0u64..(1 << 24)) {
            let layout = Layout::new(size, MIN_CHUNK, block).unwrap();
            if let Some(b) = layout.block_at(offset) {
                prop_assert!(b.offset + u64::from(b.len) <= size);
                prop_assert!(b.index < layout.blocks());
                prop_assert!(b.len > 0);
            }
        }
    }
}
