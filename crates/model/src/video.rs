//! Video-shaped traffic, as iperf 2's `--isochronous=FPS:MEAN,STDEV` defines it: a frame
//! every 1/FPS seconds, its size drawn so that the load per frame is log-normal with mean
//! MEAN and standard deviation STDEV bits a second, sent as a burst of datagrams (with an
//! optional gap between them). The receiver counts, per frame, the time from its first
//! write to its last byte read, and whether it was whole in time to be shown.
//!
//! Sans IO: the settings, the seeded frame sizes, the frame clock (which frames are due at
//! a time the caller gives, and which ones the sender skipped because it ran late) and the
//! counts both ends report. The datagrams' fields are `linerate_proto::video`'s.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, LogNormal};
use serde::{Deserialize, Serialize};

/// Frames a second: at most 1,000 (a frame a millisecond; iperf 2's frame clock counts
/// in whole microseconds) and at least one a minute.
pub const MAX_FPS: f64 = 1_000.0;
pub const MIN_FPS: f64 = 1.0 / 60.0;
/// The largest frame a sender may draw (16 MiB, an 8K key frame's order): a draw above it
/// is cut to it and counted, so one unlucky draw cannot make a burst of gigabytes.
pub const MAX_FRAME_BYTES: u32 = 16 << 20;
/// Bytes before a video datagram's payload: linerate's header and the frame's fields
/// (`linerate_proto::video::VIDEO_HEADER`).
pub const DATAGRAM_HEADER_BYTES: u64 = 56;
/// iperf 2's `--isochronous` with no value: 60 frames a second, 20 Mbit/s, no spread.
pub const DEFAULT_SPEC: &str = "60:20m,0";

/// A game (`linerate app --pattern game`): the client's inputs, 120 bytes (spread 30) 64
/// times a second, and the server's state each tick, 1,200 bytes (spread 400) as a burst of
/// datagrams of [`GAME_DATAGRAM`]: a fast online game's order (64 ticks a second, as many
/// shooters' servers run; every value can be given).
pub const GAME_INPUTS: &str = "64:61440,15360";
pub const GAME_STATE: &str = "64:614400,204800";
/// A game's datagrams: a tick's state of 1,200 bytes goes as two or three.
pub const GAME_DATAGRAM: u64 = 600;

/// A video test's frame plan (`--isochronous FPS:MEAN[,STDEV]`, `--frame-gap`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VideoSettings {
    /// Frames a second.
    pub fps: f64,
    /// The mean load, bits a second: a frame's mean size is this over 8 x `fps` bytes.
    pub mean_bps: u64,
    /// The standard deviation of the load per frame, bits a second (0: every frame the
    /// mean's size).
    pub stdev_bps: u64,
    /// Microseconds between the datagrams of one frame (0: the frame in one burst, as an
    /// encoder hands it to the socket).
    #[serde(default)]
    pub gap_us: u32,
    /// The seed of the frame sizes: the same seed, the same frames.
    #[serde(default)]
    pub seed: u64,
    /// Key frames (`--key-frames`): absent, every frame is drawn alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_frames: Option<KeyFrames>,
}

/// A key frame's size over the other frames' mean when `--key-frames` gives none: an
/// encoder's intra frame carries the whole picture, several times a predicted frame.
pub const DEFAULT_KEY_SCALE: f64 = 8.0;
/// The most a key frame may be over the other frames' mean.
pub const MAX_KEY_SCALE: f64 = 100.0;

/// Key frames, as an encoder's group of pictures makes them (`--key-frames EVERY[:SCALE]`):
/// frame 1 and every EVERY-th after it is a key frame of SCALE times the other frames'
/// mean size, without spread (its size is the picture's, not the motion's). The stream's
/// mean load stays the one asked, as an encoder's target bit rate does: the other frames
/// are drawn smaller by the share the key frames take, their spread with them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KeyFrames {
    pub every: u32,
    pub scale: f64,
}

impl KeyFrames {
    /// Reads `EVERY[:SCALE]` (`60`, `120:10`), checked; the error says why.
    pub fn parse(text: &str) -> Result<KeyFrames, String> {
        let (every, scale) = match text.split_once(':') {
            Some((every, scale)) => (every, Some(scale)),
            None => (text, None),
        };
        let every = every
            .trim()
            .parse::<u32>()
            .map_err(|_| "expected EVERY[:SCALE], as 60 or 60:8".to_string())?;
        let scale = match scale {
            Some(scale) => scale
                .trim()
                .parse::<f64>()
                .map_err(|_| "a key frame's scale must be a number".to_string())?,
            None => DEFAULT_KEY_SCALE,
        };
        KeyFrames { every, scale }.checked()
    }

    /// The key frames, or why not: a key frame at most every second frame (every frame a
    /// key frame is no key frame), one in a million at least, a scale above 1 and at
    /// most [`MAX_KEY_SCALE`].
    pub fn checked(self) -> Result<KeyFrames, String> {
        if !(2..=1_000_000).contains(&self.every) {
            return Err(format!(
                "a key frame every {} frames is outside 2 to 1000000",
                self.every
            ));
        }
        if !self.scale.is_finite() || self.scale <= 1.0 || self.scale > MAX_KEY_SCALE {
            return Err(format!(
                "a key frame {} times the others is outside above 1 to {MAX_KEY_SCALE}",
                self.scale
            ));
        }
        Ok(self)
    }

    /// Whether frame `id` (from 1) is a key frame.
    pub fn is_key(&self, id: u32) -> bool {
        id.saturating_sub(1).is_multiple_of(self.every)
    }

    /// The share of a group of pictures' mean frame that each other frame's mean is:
    /// EVERY / (EVERY - 1 + SCALE), so that the group's mean is the asked one.
    pub fn others_share(&self) -> f64 {
        f64::from(self.every) / (f64::from(self.every) - 1.0 + self.scale)
    }

    /// As the flag writes it: `60:8`.
    pub fn spec(&self) -> String {
        format!("{}:{}", self.every, self.scale)
    }
}

impl VideoSettings {
    /// Reads `FPS:MEAN[,STDEV]` (iperf 2's `--isochronous` value; MEAN and STDEV as rates,
    /// `20m`, `1.5m`), checked; the error says why, for the caller to name the value.
    pub fn parse(text: &str) -> Result<VideoSettings, String> {
        let bad = |why: &str| why.to_string();
        let (fps, load) = text
            .split_once(':')
            .ok_or_else(|| bad("expected FPS:MEAN[,STDEV], as 60:20m,1m"))?;
        let fps: f64 = fps
            .trim()
            .parse()
            .map_err(|_| bad("frames a second must be a number"))?;
        let (mean, stdev) = load.split_once(',').unwrap_or((load, "0"));
        let rate =
            |part: &str| crate::units::parse_rate(part.trim()).map_err(|e| bad(&e.to_string()));
        VideoSettings {
            fps,
            mean_bps: rate(mean)?,
            stdev_bps: rate(stdev)?,
            gap_us: 0,
            seed: 0,
            key_frames: None,
        }
        .checked()
        .map_err(|why| bad(&why))
    }

    /// The settings, or why they cannot be run: a frame rate outside 1/60 to 1,000, no
    /// load, a mean frame larger than a frame may be, a spread over ten times the mean,
    /// or a gap that would not let a frame's datagrams start within its period.
    pub fn checked(self) -> Result<VideoSettings, String> {
        if !self.fps.is_finite() || !(MIN_FPS..=MAX_FPS).contains(&self.fps) {
            return Err(format!(
                "{} frames a second is outside {MIN_FPS:.3} to {MAX_FPS}",
                self.fps
            ));
        }
        if self.mean_bps == 0 {
            return Err("the mean load must be above 0".into());
        }
        if self.mean_frame_bytes() > f64::from(MAX_FRAME_BYTES) {
            return Err(format!(
                "a mean frame of {:.0} bytes is over the {MAX_FRAME_BYTES} a frame may be",
                self.mean_frame_bytes()
            ));
        }
        if self.stdev_bps > self.mean_bps.saturating_mul(10) {
            return Err("the standard deviation may be at most ten times the mean".into());
        }
        if let Some(key) = self.key_frames {
            let key = key.checked()?;
            let bytes = self.key_frame_bytes(&key);
            if bytes > f64::from(MAX_FRAME_BYTES) {
                return Err(format!(
                    "with --key-frames {}, a key frame of {bytes:.0} bytes is over the \
                     {MAX_FRAME_BYTES} a frame may be",
                    key.spec()
                ));
            }
        }
        if u64::from(self.gap_us) * 1_000 >= self.period_ns() {
            return Err(format!(
                "a gap of {} us between a frame's datagrams is not under its period ({:.0} us)",
                self.gap_us,
                self.period_ns() as f64 / 1e3
            ));
        }
        Ok(self)
    }

    /// Nanoseconds from one frame's start to the next's.
    pub fn period_ns(&self) -> u64 {
        (1e9 / self.fps).round() as u64
    }

    /// A frame's mean size in bytes.
    pub fn mean_frame_bytes(&self) -> f64 {
        self.mean_bps as f64 / (8.0 * self.fps)
    }

    /// A key frame's size in bytes: `key`'s scale times the other frames' mean.
    pub fn key_frame_bytes(&self, key: &KeyFrames) -> f64 {
        key.scale * key.others_share() * self.mean_frame_bytes()
    }

    /// As iperf 2's value writes it: `60:20m,1m`.
    pub fn spec(&self) -> String {
        let rate = |bps: u64| match bps {
            0 => "0".to_string(),
            b if b % 1_000_000_000 == 0 => format!("{}g", b / 1_000_000_000),
            b if b % 1_000_000 == 0 => format!("{}m", b / 1_000_000),
            b if b % 1_000 == 0 => format!("{}k", b / 1_000),
            b => b.to_string(),
        };
        format!(
            "{}:{},{}",
            self.fps,
            rate(self.mean_bps),
            rate(self.stdev_bps)
        )
    }
}

/// Frame sizes, drawn from a seeded generator: the load of each frame log-normal with the
/// settings' mean and standard deviation, over 8 x FPS, at least `least` bytes (a frame
/// is at least one datagram's header) and at most [`MAX_FRAME_BYTES`]. With key frames,
/// those are their fixed size and the others are drawn by their share ([`KeyFrames`]).
pub struct FrameSizes {
    draw: Option<LogNormal<f64>>,
    mean_bps: f64,
    bits_per_frame: f64,
    least: u32,
    key: Option<(KeyFrames, u32)>,
    rng: ChaCha8Rng,
    /// Draws cut to [`MAX_FRAME_BYTES`].
    pub cut: u64,
}

impl FrameSizes {
    pub fn new(settings: &VideoSettings, least: u32) -> FrameSizes {
        let share = settings.key_frames.map_or(1.0, |key| key.others_share());
        let (mean, stdev) = (
            settings.mean_bps as f64 * share,
            settings.stdev_bps as f64 * share,
        );
        // A log-normal variable with mean m and standard deviation s has sigma^2 =
        // ln(1 + s^2/m^2) and mu = ln m - sigma^2/2.
        let draw = (stdev > 0.0).then(|| {
            let sigma2 = (1.0 + (stdev / mean).powi(2)).ln();
            LogNormal::new(mean.ln() - sigma2 / 2.0, sigma2.sqrt())
                .expect("a finite, non-negative sigma")
        });
        FrameSizes {
            draw,
            mean_bps: mean,
            bits_per_frame: 8.0 * settings.fps,
            least,
            key: settings.key_frames.map(|key| {
                let bytes = settings.key_frame_bytes(&key).round();
                (
                    key,
                    (bytes.min(f64::from(MAX_FRAME_BYTES)) as u32).max(least),
                )
            }),
            rng: ChaCha8Rng::seed_from_u64(settings.seed),
            cut: 0,
        }
    }

    /// Frame `id`'s size in bytes (called once a frame sent, in order).
    pub fn next_bytes(&mut self, id: u32) -> u32 {
        if let Some((key, bytes)) = self.key {
            if key.is_key(id) {
                return bytes;
            }
        }
        let load = match &self.draw {
            Some(draw) => draw.sample(&mut self.rng),
            None => self.mean_bps,
        };
        let bytes = (load / self.bits_per_frame).round();
        if bytes > f64::from(MAX_FRAME_BYTES) {
            self.cut += 1;
            return MAX_FRAME_BYTES;
        }
        (bytes as u32).max(self.least)
    }
}

/// A frame the clock says is due: its number (from 1), the number of the frame sent
/// before it (0 for the first), and when it was due, in nanoseconds from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueFrame {
    pub id: u32,
    pub previous: u32,
    pub due_ns: u64,
}

/// Which frame is due when: frame k starts (k - 1) periods after the start. A sender that
/// comes back more than a period late skips the frames whose time passed, as a live
/// encoder drops them, and says how many (iperf 2's slips).
#[derive(Debug, Clone)]
pub struct FrameClock {
    period_ns: u64,
    last: u32,
    /// Frames whose time passed before the sender came back for them.
    pub skipped: u64,
    /// Times the sender came back more than a period late.
    pub slips: u64,
}

impl FrameClock {
    pub fn new(period_ns: u64) -> FrameClock {
        FrameClock {
            period_ns: period_ns.max(1),
            last: 0,
            skipped: 0,
            slips: 0,
        }
    }

    /// The frame due at `elapsed_ns` from the start that has not been given yet: the
    /// latest whose time has come (earlier ones not given are skipped); `None` when the
    /// last one given is still the latest.
    pub fn due(&mut self, elapsed_ns: u64) -> Option<DueFrame> {
        let current = u32::try_from(elapsed_ns / self.period_ns + 1).unwrap_or(u32::MAX);
        if current <= self.last {
            return None;
        }
        let passed = current - self.last - 1;
        if passed > 0 {
            self.skipped += u64::from(passed);
            self.slips += 1;
        }
        let frame = DueFrame {
            id: current,
            previous: self.last,
            due_ns: u64::from(current - 1) * self.period_ns,
        };
        self.last = current;
        Some(frame)
    }

    /// Nanoseconds from one frame's due time to the next's.
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// When the next frame is due, nanoseconds from the start.
    pub fn next_due_ns(&self) -> u64 {
        u64::from(self.last) * self.period_ns
    }
}

/// What one end counted of a video flow's frames (docs/results.md, `frames`): a sender's
/// frames sent and skipped, a receiver's frames whole, in part and late, with the
/// latency of the whole ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FrameCounts {
    /// Sender: frames it began to send.
    #[serde(default)]
    pub sent: u64,
    /// Sender: frames whose time passed before it could send them, and the times that
    /// happened (iperf 2's slips).
    #[serde(default)]
    pub skipped: u64,
    #[serde(default)]
    pub slips: u64,
    /// Sender: frame sizes cut to the largest a frame may be.
    #[serde(default)]
    pub cut: u64,
    /// Sender: the most a frame's first write came after its due time, microseconds.
    #[serde(default)]
    pub start_late_max_us: u64,
    /// Sender: how late each frame's first write came after its due time, microseconds,
    /// with its buckets (the schedule's own account: a busy host's frames start late).
    #[serde(default)]
    pub start_late_us: crate::latency::LatencySummary,
    /// Receiver: frames whose every byte arrived.
    #[serde(default)]
    pub whole: u64,
    /// Receiver: the largest whole frame's bytes (a key frame where there are some).
    #[serde(default)]
    pub largest_whole_bytes: u64,
    /// Receiver: frames of which some bytes arrived, never all.
    #[serde(default)]
    pub partial: u64,
    /// Receiver: whole frames that were whole after their turn to be shown: later than
    /// the first whole frame's latency (from its due time) plus one period.
    #[serde(default)]
    pub late: u64,
    /// Receiver: datagrams whose frame fields made no sense (a size over the limit, more
    /// remaining than the frame, a frame that changed size, frame 0); not counted in any
    /// frame.
    #[serde(default)]
    pub malformed: u64,
    /// Receiver: whole frames whose first write the sender's clock put after their last
    /// byte's arrival here (clocks that disagree): counted whole, their latency not.
    #[serde(default)]
    pub clock_ahead: u64,
    /// Receiver: each whole frame's latency from its first write to its last byte read,
    /// microseconds (true where the two ends' clocks agree, as one-way delay).
    #[serde(default)]
    pub latency_us: crate::latency::LatencySummary,
    /// Receiver, a stream with key frames (`--key-frames`): the key frames whole, and
    /// their own latency (among `whole` and `latency_us`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub key_whole: u64,
    #[serde(default, skip_serializing_if = "no_latency")]
    pub key_latency_us: crate::latency::LatencySummary,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn no_latency(summary: &crate::latency::LatencySummary) -> bool {
    summary.count == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf2s_spec_reads_and_bad_ones_name_the_value() {
        let s = VideoSettings::parse("60:20m,1m").unwrap();
        assert_eq!(
            (s.fps, s.mean_bps, s.stdev_bps),
            (60.0, 20_000_000, 1_000_000)
        );
        assert_eq!(s.period_ns(), 16_666_667);
        assert!((s.mean_frame_bytes() - 41_666.67).abs() < 0.01);
        let s = VideoSettings::parse("30:4m").unwrap();
        assert_eq!((s.fps, s.mean_bps, s.stdev_bps), (30.0, 4_000_000, 0));
        assert_eq!(s.spec(), "30:4m,0");
        assert_eq!(
            VideoSettings::parse("64:61440,15360").unwrap().spec(),
            "64:61440,15360"
        );
        assert_eq!(
            VideoSettings::parse("60:1.5m,250k").unwrap().spec(),
            "60:1500k,250k"
        );
        for (bad, says) in [
            ("60", "expected FPS:MEAN"),
            ("0:20m", "frames a second is outside"),
            ("5000:20m", "frames a second is outside"),
            ("x:20m", "must be a number"),
            ("60:0", "above 0"),
            ("1:1000g", "over the 16777216"),
            ("60:1m,20m", "ten times the mean"),
            ("60:fast", "rate"),
        ] {
            let e = VideoSettings::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let gap = VideoSettings {
            gap_us: 20_000,
            ..VideoSettings::parse("60:20m").unwrap()
        };
        assert!(gap.checked().unwrap_err().contains("not under its period"));
    }

    /// Over many frames the sizes' mean and spread are the settings' (as loads), the same
    /// seed draws the same frames, and a spread of zero gives every frame the mean.
    #[test]
    fn frame_sizes_are_log_normal_with_the_asked_mean_and_spread() {
        let settings = VideoSettings::parse("60:20m,5m").unwrap();
        let mut sizes = FrameSizes::new(&settings, 56);
        let n = 200_000;
        let loads: Vec<f64> = (0..n as u32)
            .map(|id| f64::from(sizes.next_bytes(id + 1)) * 8.0 * 60.0)
            .collect();
        let mean = loads.iter().sum::<f64>() / n as f64;
        let var = loads.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        assert!((mean / 20e6 - 1.0).abs() < 0.005, "mean load {mean}");
        assert!(
            (var.sqrt() / 5e6 - 1.0).abs() < 0.03,
            "spread {}",
            var.sqrt()
        );
        // Log-normal: skewed right, the median under the mean.
        let mut sorted = loads.clone();
        sorted.sort_by(f64::total_cmp);
        assert!(sorted[n / 2] < mean);
        let mut again = FrameSizes::new(&settings, 56);
        let first: Vec<u32> = (1..11).map(|id| again.next_bytes(id)).collect();
        let mut third = FrameSizes::new(&settings, 56);
        assert_eq!(
            first,
            (1..11).map(|id| third.next_bytes(id)).collect::<Vec<_>>()
        );
        let mut flat = FrameSizes::new(&VideoSettings::parse("50:4m").unwrap(), 56);
        assert!((1..101).all(|id| flat.next_bytes(id) == 10_000));
        // A frame is never under a datagram's header, nor over the limit.
        let mut tiny = FrameSizes::new(&VideoSettings::parse("1000:8k").unwrap(), 56);
        assert_eq!(tiny.next_bytes(1), 56);
    }

    /// Key frames: frame 1 and every EVERY-th after it, SCALE times the others' mean, and
    /// the stream's mean load still the one asked; bad values name why.
    #[test]
    fn key_frames_come_every_n_frames_and_keep_the_asked_mean_load() {
        let key = KeyFrames::parse("30").unwrap();
        assert_eq!((key.every, key.scale), (30, DEFAULT_KEY_SCALE));
        assert_eq!(KeyFrames::parse("60:10").unwrap().spec(), "60:10");
        assert!(key.is_key(1) && key.is_key(31) && !key.is_key(30) && !key.is_key(2));
        let settings = VideoSettings {
            key_frames: Some(key),
            ..VideoSettings::parse("30:6m,2m").unwrap()
        };
        // The others' mean: 25,000 bytes x 30 / 37; a key frame 8 times that.
        let key_bytes = settings.key_frame_bytes(&key);
        assert!((key_bytes - 8.0 * 25_000.0 * 30.0 / 37.0).abs() < 1e-6);
        let mut sizes = FrameSizes::new(&settings, 56);
        let n = 300_000u32;
        let (mut keys, mut others, mut total) = (0u64, Vec::new(), 0f64);
        for id in 1..=n {
            let bytes = sizes.next_bytes(id);
            total += f64::from(bytes);
            if key.is_key(id) {
                keys += 1;
                assert_eq!(f64::from(bytes), key_bytes.round(), "frame {id}");
            } else {
                others.push(f64::from(bytes));
            }
        }
        assert_eq!(keys, u64::from(n / 30));
        let mean_load = total / f64::from(n) * 8.0 * 30.0;
        assert!(
            (mean_load / 6e6 - 1.0).abs() < 0.01,
            "mean load {mean_load}"
        );
        let others_mean = others.iter().sum::<f64>() / others.len() as f64;
        assert!((key_bytes / others_mean / 8.0 - 1.0).abs() < 0.01);
        for (bad, says) in [
            ("1", "outside 2 to"),
            ("x", "expected EVERY"),
            ("30:1", "outside above 1"),
            ("30:101", "outside above 1"),
            ("30:big", "must be a number"),
        ] {
            let e = KeyFrames::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        // A key frame over the largest a frame may be is refused with the settings.
        let huge = VideoSettings {
            key_frames: Some(KeyFrames::parse("1000:100").unwrap()),
            ..VideoSettings::parse("1:100m").unwrap()
        };
        assert!(huge.checked().unwrap_err().contains("a key frame of"));
    }

    #[test]
    fn a_late_sender_skips_the_frames_whose_time_passed_and_counts_a_slip() {
        let mut clock = FrameClock::new(10);
        let first = clock.due(0).unwrap();
        assert_eq!((first.id, first.previous, first.due_ns), (1, 0, 0));
        assert_eq!(clock.due(5), None);
        assert_eq!(clock.next_due_ns(), 10);
        let second = clock.due(12).unwrap();
        assert_eq!((second.id, second.previous, second.due_ns), (2, 1, 10));
        // Back at 47: frames 3 and 4 (due at 20 and 30) passed; 5 (due at 40) is sent.
        let fifth = clock.due(47).unwrap();
        assert_eq!((fifth.id, fifth.previous, fifth.due_ns), (5, 2, 40));
        assert_eq!((clock.skipped, clock.slips), (2, 1));
        assert_eq!(clock.next_due_ns(), 50);
    }
}
