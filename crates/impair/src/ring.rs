//! The emulator's receive side: a PACKET_RX_RING (TPACKET_V2) shared with the kernel, so
//! that frames arrive without a system call or a socket-buffer copy each.
//!
//! Why a ring and why version 2: with recvmmsg every frame cost the emulator's thread a
//! message header, a copy out of an skb and the skb's release, about a third of its CPU
//! per frame (perf, a 1,514-byte flood). With the ring the kernel copies each frame once,
//! where it receives it, into a slot this thread reads in place; the thread makes a system
//! call only to sleep when the ring is empty. TPACKET_V3 packs frames into blocks that
//! reach user space when full or after a timeout of at least a millisecond, which a
//! path emulator adding microseconds cannot wait for; V2 hands over every frame at once.
//! No maintained crate wraps the ring for a bridge like this one; the layout is the
//! kernel's `linux/if_packet.h`.

// A driver: the clock and sleeping are its job (the core modules stay sans-IO).
#![allow(clippy::disallowed_methods)]

use crate::sys::{set_packet_option, PacketSocket};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_FANOUT: libc::c_int = 18;
/// Fan-out by the flow's hash: every frame of a flow goes to the same socket.
const PACKET_FANOUT_HASH: u32 = 0;
/// `struct virtio_net_hdr`: what the kernel puts before a frame when asked (segment size
/// and kind of an offloaded segment, where its checksum is to be filled in).
pub const VNET_HEADER: usize = 10;
const TPACKET_V2: libc::c_int = 1;
/// Slot states (`tp_status`): the kernel's to fill, or this thread's to read.
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TPACKET_ALIGNMENT: usize = 16;
/// `struct tpacket2_hdr`: 32 bytes, then the `sockaddr_ll` at the next 16-byte boundary.
const HEADER_LEN: usize = 32;
/// Where the kernel puts an Ethernet frame in a slot: after the header and the address,
/// aligned so that the network header is 16-byte aligned (`tpacket_rcv`'s `macoff`).
const DATA_OFFSET: usize = align(HEADER_LEN + std::mem::size_of::<libc::sockaddr_ll>() + 16);
/// The `sockaddr_ll` field that says whether the frame was this host's own.
const PKTTYPE_OFFSET: usize = HEADER_LEN + 10;
/// Ring memory per receiving interface: at 1 Gbit/s of 1,514-byte frames about a quarter
/// of a second of frames, so a thread held up by the scheduler loses nothing.
const RING_BYTES: usize = 32 << 20;
/// With offloads a slot holds up to 64 KB, and an ACK takes a slot as a segment does: 960
/// slots, about 50 ms at 10 Gbit/s.
const RING_BYTES_OFFLOADED: usize = 64 << 20;
const BLOCK_BYTES: usize = 1 << 20;

const fn align(n: usize) -> usize {
    (n + TPACKET_ALIGNMENT - 1) & !(TPACKET_ALIGNMENT - 1)
}

#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    packets: u32,
    drops: u32,
}

/// What one received frame was.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Bytes on the wire (more than the slot held when truncated).
    pub len: usize,
    pub truncated: bool,
    pub outgoing: bool,
    /// When the kernel received it, nanoseconds on the wall clock (CLOCK_REALTIME).
    pub kernel_ns: u64,
}

/// A receive ring mapped into this process, read slot by slot in the kernel's order.
pub struct RxRing {
    // Dropped after the mapping (fields drop in order after `Drop::drop` unmaps it).
    socket: PacketSocket,
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    frame_size: usize,
    frames_per_block: usize,
    frame_count: usize,
    /// The next slot to read.
    head: usize,
    /// Bytes of `virtio_net_hdr` the kernel puts before each frame (0 without offloads).
    vnet: usize,
}

// SAFETY: the mapping belongs to this ring alone; it moves to its thread with the socket.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Sets up a ring on `socket` (a receiving AF_PACKET socket) for frames up to
    /// `frame_capacity` bytes; longer ones are cut to the slot and marked truncated. With
    /// `offloads`, each frame comes with its `virtio_net_hdr` before it, and the frames
    /// may be segments the kernel has not cut into frames.
    pub fn new(socket: PacketSocket, frame_capacity: usize, offloads: bool) -> io::Result<RxRing> {
        let fd = socket.raw();
        let vnet = if offloads { VNET_HEADER } else { 0 };
        if offloads {
            // Before the ring: the kernel refuses it once a ring exists.
            set_packet_option(fd, PACKET_VNET_HDR, &1 as &libc::c_int)?;
        }
        let frame_size = align(DATA_OFFSET + align(vnet) + frame_capacity);
        let block_size = BLOCK_BYTES.max(frame_size.next_power_of_two());
        let frames_per_block = block_size / frame_size;
        let ring_bytes = if offloads {
            RING_BYTES_OFFLOADED
        } else {
            RING_BYTES
        };
        let block_nr = (ring_bytes / block_size).max(4);
        let request = TpacketReq {
            block_size: block_size as u32,
            block_nr: block_nr as u32,
            frame_size: frame_size as u32,
            frame_nr: (frames_per_block * block_nr) as u32,
        };
        set_packet_option(fd, PACKET_VERSION, &TPACKET_V2)?;
        set_packet_option(fd, PACKET_RX_RING, &request)?;
        let map_len = block_size * block_nr;
        // SAFETY: maps the ring the kernel just allocated for this socket; checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        socket.discard_queued();
        Ok(RxRing {
            socket,
            map: map.cast(),
            map_len,
            block_size,
            frame_size,
            frames_per_block,
            frame_count: frames_per_block * block_nr,
            head: 0,
            vnet,
        })
    }

    /// Joins fan-out group `group` of the interface: the kernel hands each frame to one
    /// of the group's sockets, chosen by the flow's hash (addresses and ports), so every
    /// frame of a flow comes to the same socket, in order. After the ring is set up.
    pub fn join_fanout(&self, group: u16) -> io::Result<()> {
        let argument = u32::from(group) | (PACKET_FANOUT_HASH << 16);
        set_packet_option(self.raw(), PACKET_FANOUT, &argument)
    }

    /// The socket's descriptor, readable (poll) when a frame is in the ring.
    pub fn raw(&self) -> RawFd {
        self.socket.raw()
    }

    fn slot(&self, index: usize) -> *mut u8 {
        let block = index / self.frames_per_block;
        let within = index % self.frames_per_block;
        // SAFETY: index < frame_count, so the slot lies inside the mapping.
        unsafe {
            self.map
                .add(block * self.block_size + within * self.frame_size)
        }
    }

    fn status(&self, slot: *mut u8) -> &AtomicU32 {
        // SAFETY: a slot starts with the 4-byte-aligned `tp_status` word the kernel and
        // this thread hand back and forth; atomics give the ordering the kernel expects
        // (its smp_wmb before setting TP_STATUS_USER).
        unsafe { &*(slot as *const AtomicU32) }
    }

    /// Whether a frame waits in the next slot.
    pub fn ready(&self) -> bool {
        self.status(self.slot(self.head)).load(Ordering::Acquire) & TP_STATUS_USER != 0
    }

    /// Hands each waiting frame, up to `limit`, to `each` with its bytes (its
    /// `virtio_net_hdr` first, with offloads), then gives its slot back to the kernel.
    /// Returns how many were handed over.
    pub fn receive(&mut self, limit: usize, mut each: impl FnMut(Received, &[u8])) -> usize {
        let mut count = 0;
        while count < limit {
            let slot = self.slot(self.head);
            let status = self.status(slot);
            if status.load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the kernel filled this slot and will not touch it until its status
            // goes back to TP_STATUS_KERNEL; its header and the frame it describes lie
            // within the slot (the kernel cut the frame to fit).
            let (received, bytes) = unsafe {
                let word = |at: usize| std::ptr::read_unaligned(slot.add(at).cast::<u32>());
                let len = word(4) as usize;
                let snaplen = word(8) as usize;
                let mac = std::ptr::read_unaligned(slot.add(12).cast::<u16>()) as usize;
                let seconds = u64::from(word(16));
                let nanos = u64::from(word(20));
                let snaplen = snaplen.min(self.frame_size.saturating_sub(mac));
                let received = Received {
                    len,
                    truncated: snaplen < len,
                    outgoing: *slot.add(PKTTYPE_OFFSET) == crate::sys::PACKET_OUTGOING,
                    kernel_ns: seconds * 1_000_000_000 + nanos,
                };
                // The kernel writes the virtio_net_hdr just before the frame, within the
                // slot (macoff leaves room for it).
                let start = mac.saturating_sub(self.vnet).max(HEADER_LEN);
                (
                    received,
                    std::slice::from_raw_parts(slot.add(start), snaplen + (mac - start)),
                )
            };
            each(received, bytes);
            status.store(TP_STATUS_KERNEL, Ordering::Release);
            self.head = (self.head + 1) % self.frame_count;
            count += 1;
        }
        count
    }

    /// Frames the kernel dropped because the ring was full, since the last call.
    pub fn drops(&self) -> u64 {
        let mut stats = TpacketStats::default();
        let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: stats is a live tpacket_stats of the length passed.
        let result = unsafe {
            libc::getsockopt(
                self.socket.raw(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                (&mut stats as *mut TpacketStats).cast(),
                &mut len,
            )
        };
        if result < 0 {
            0
        } else {
            u64::from(stats.drops)
        }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_sits_where_the_kernel_puts_an_ethernet_frame() {
        // tpacket_rcv: netoff = TPACKET_ALIGN(tp_hdrlen + max(maclen, 16)), macoff =
        // netoff - maclen, with tp_hdrlen = TPACKET_ALIGN(sizeof tpacket2_hdr) +
        // sizeof sockaddr_ll = 32 + 20. A slot must hold macoff + the frame.
        assert_eq!(std::mem::size_of::<libc::sockaddr_ll>(), 20);
        let macoff = align(32 + 20 + 16) - 14;
        assert!(DATA_OFFSET >= macoff);
        assert_eq!(DATA_OFFSET % TPACKET_ALIGNMENT, 0);
    }
}
