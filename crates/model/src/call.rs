//! A call's quality as its two people hear it: the E-model of ITU-T G.107 (06/2015), with
//! the codec impairment (Ie) and packet-loss robustness (Bpl) values of ITU-T G.113
//! Appendix I, scored from what a call-shaped test (`linerate app --pattern voip`)
//! counted at each receiver: one-way delay, loss, datagrams later than the jitter buffer
//! holds, and how bursty the losses were.
//!
//! Sans IO: figures in, figures out. Every E-model parameter other than delay, loss and
//! codec keeps G.107's default (Table 3), the planning values for a handset call with no
//! echo problem; the figures that produced a score travel with it.

use serde::{Deserialize, Serialize};

/// Bytes of the RTP header before each frame's payload.
pub const RTP_HEADER: u64 = 12;

/// The longest jitter buffer a call may ask for: beyond it the delay alone rates a call
/// as one nobody would hold (G.107's delay impairment passes 40 at about 400 ms).
pub const MAX_JITTER_BUFFER_MS: u32 = 1_000;
/// The jitter buffer a call has when nobody says: 60 ms, a common fixed buffer of VoIP
/// phones and gateways.
pub const DEFAULT_JITTER_BUFFER_MS: u32 = 60;

/// The voice codecs a call can carry, with G.113's values where it gives them.
///
/// Written as `--codec` takes it (`g711`, `g729a`, `opus:24k`) in documents and on the
/// wire, so that the codecs G.113 names stay the plain words they always were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Codec {
    /// G.711 (64 kbit/s PCM) with packet-loss concealment (G.711 Appendix I).
    G711,
    /// G.711 without packet-loss concealment: a lost frame is silence.
    G711NoPlc,
    /// G.729 Annex A (8 kbit/s) with voice activity detection.
    G729a,
    /// Opus (RFC 6716) at a constant bitrate, bits per second. G.113 gives Opus no
    /// equipment impairment or loss robustness, so its calls have no E-model score:
    /// their delay, loss, late loss and Quality of Outcome are measured as any call's,
    /// their R and MOS withheld ([`Codec::emodel`]) rather than invented.
    Opus { bps: u32 },
}

/// Opus's bitrates (RFC 6716: from 6 kbit/s to 510 kbit/s; 510 kbit/s fills a 20 ms
/// frame's most, 1,275 bytes).
pub const OPUS_BPS: std::ops::RangeInclusive<u32> = 6_000..=510_000;

impl Codec {
    /// The codecs G.113 gives values for: those with a MOS.
    pub const SCORED: [Codec; 3] = [Codec::G711, Codec::G711NoPlc, Codec::G729a];

    /// Every `--codec` in words, for help and errors.
    pub const CHOICES: &'static str = "g711, g711-no-plc, g729a, opus:RATE (6k to 510k)";

    pub fn name(self) -> String {
        match self {
            Codec::G711 => "g711".into(),
            Codec::G711NoPlc => "g711-no-plc".into(),
            Codec::G729a => "g729a".into(),
            Codec::Opus { bps } if bps % 1000 == 0 => format!("opus:{}k", bps / 1000),
            Codec::Opus { bps } => format!("opus:{bps}"),
        }
    }

    /// The codec named `name` (as `--codec` takes it): a G.113 codec's name, or `opus:`
    /// and a bitrate in bit/s (`24000`) or kbit/s (`24k`, `12.4k`). The error says why,
    /// for the caller to put beside the value.
    pub fn parse(name: &str) -> Result<Codec, String> {
        if let Some(rate) = name.strip_prefix("opus:") {
            let bps = match rate.strip_suffix(['k', 'K']) {
                Some(kbps) => kbps.parse::<f64>().map(|k| (k * 1000.0).round()),
                None => rate.parse::<f64>(),
            }
            .ok()
            .filter(|bps| bps.is_finite())
            .ok_or("the bitrate is bit/s or kbit/s, as opus:24k")?;
            return (f64::from(*OPUS_BPS.start())..=f64::from(*OPUS_BPS.end()))
                .contains(&bps)
                .then_some(Codec::Opus { bps: bps as u32 })
                .ok_or_else(|| "Opus runs from 6k to 510k bit/s (RFC 6716)".into());
        }
        if name == "opus" {
            return Err("Opus needs its bitrate: opus:RATE, as opus:24k".into());
        }
        Codec::SCORED
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| format!("one of {}", Codec::CHOICES))
    }

    /// Payload bytes of one 20 ms frame (Opus's at its constant bitrate, rounded up).
    pub fn payload_bytes(self) -> u64 {
        match self {
            Codec::G711 | Codec::G711NoPlc => 160,
            Codec::G729a => 20,
            Codec::Opus { bps } => (u64::from(bps) * FRAME_MS).div_ceil(8_000),
        }
    }

    /// The UDP payload of one frame: RTP's header and the codec's bytes.
    pub fn datagram_bytes(self) -> u64 {
        RTP_HEADER + self.payload_bytes()
    }

    /// G.113's equipment impairment Ie (Table I.1) and packet-loss robustness Bpl for
    /// random loss (Table I.3); for a codec it gives none, why the call has no MOS.
    pub fn emodel(self) -> Result<(f64, f64), &'static str> {
        match self {
            Codec::G711 => Ok((0.0, 25.1)),
            Codec::G711NoPlc => Ok((0.0, 4.3)),
            Codec::G729a => Ok((11.0, 19.0)),
            Codec::Opus { .. } => Err(OPUS_UNSCORED),
        }
    }

    /// Whether the codec sends only while its speaker talks (G.729A with VAD, as G.113
    /// scores it): the frames of a pause are not sent ([`TalkSpurts`]).
    pub fn voice_activity(self) -> bool {
        matches!(self, Codec::G729a)
    }

    /// The codec's own delay beyond the frame: G.729's 5 ms look-ahead; Opus's 6.5 ms
    /// (libopus at 48 kHz: RFC 6716's 26.5 ms for a 20 ms frame).
    pub fn lookahead_ms(self) -> f64 {
        match self {
            Codec::G711 | Codec::G711NoPlc => 0.0,
            Codec::G729a => 5.0,
            Codec::Opus { .. } => 6.5,
        }
    }
}

/// Why an Opus call has no R or MOS, as the reports say it.
pub const OPUS_UNSCORED: &str =
    "no MOS: ITU-T G.113 gives Opus no Ie or Bpl, and linerate does not invent them";

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl From<Codec> for String {
    fn from(codec: Codec) -> String {
        codec.name()
    }
}

impl TryFrom<String> for Codec {
    type Error = String;
    fn try_from(name: String) -> Result<Codec, String> {
        Codec::parse(&name)
    }
}

/// Milliseconds of speech in each datagram: every codec here sends a frame per 20 ms.
pub const FRAME_MS: u64 = 20;

/// A speaker's talk spurts and pauses, each of exponentially distributed length with
/// ITU-T P.59's means for conversational speech (1.004 s of talk, 1.587 s of pause: a
/// speaker talks 38.8 % of the time): what a codec with voice activity detection sends
/// (frames) and does not (a pause's frames). Sans IO and seeded: the same seed, the same
/// conversation. A call begins in a talk spurt.
#[derive(Debug, Clone)]
pub struct TalkSpurts {
    rng: rand_chacha::ChaCha8Rng,
    talk: rand_distr::Exp<f64>,
    pause: rand_distr::Exp<f64>,
    talking: bool,
    /// When the current spurt or pause ends, nanoseconds from the start.
    until_ns: u64,
    /// Talk spurts begun, the first included.
    pub spurts: u64,
}

/// P.59's mean talk spurt and pause, milliseconds.
pub const MEAN_TALK_MS: f64 = 1_004.0;
pub const MEAN_PAUSE_MS: f64 = 1_587.0;

impl TalkSpurts {
    pub fn new(seed: u64) -> TalkSpurts {
        use rand::SeedableRng;
        let exp = |mean_ms: f64| rand_distr::Exp::new(1.0 / (mean_ms * 1e6)).expect("a rate");
        let mut spurts = TalkSpurts {
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
            talk: exp(MEAN_TALK_MS),
            pause: exp(MEAN_PAUSE_MS),
            talking: true,
            until_ns: 0,
            spurts: 1,
        };
        spurts.until_ns = spurts.draw(true);
        spurts
    }

    fn draw(&mut self, talking: bool) -> u64 {
        use rand::distributions::Distribution;
        let length = if talking {
            self.talk.sample(&mut self.rng)
        } else {
            self.pause.sample(&mut self.rng)
        };
        // At least a frame: a spurt or pause shorter than 20 ms sends or holds nothing.
        (length as u64).max(FRAME_MS * 1_000_000)
    }

    /// Whether the speaker talks at `elapsed_ns` from the start (called with times that
    /// do not go back).
    pub fn talking(&mut self, elapsed_ns: u64) -> bool {
        while elapsed_ns >= self.until_ns {
            self.talking = !self.talking;
            if self.talking {
                self.spurts += 1;
            }
            self.until_ns += self.draw(self.talking);
        }
        self.talking
    }
}

/// A call-shaped test: its codec and the receivers' jitter buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSettings {
    pub codec: Codec,
    /// A fixed jitter buffer of this many milliseconds, set on the call's first datagram:
    /// a datagram whose one-way delay exceeds the first's by more arrives too late to be
    /// played and counts as lost (late loss). With `adaptive`, the most an adaptive
    /// buffer grows to.
    pub jitter_buffer_ms: u32,
    /// The buffer follows the way's jitter ([`AdaptivePlayout`]) instead of holding one
    /// size.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adaptive: bool,
}

/// `--jitter-buffer`: a fixed size, or an adaptive buffer and the most it grows to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JitterBuffer {
    Fixed { ms: u32 },
    Adaptive { most_ms: u32 },
}

impl JitterBuffer {
    /// The most an adaptive buffer grows to when `adaptive` names none.
    pub const ADAPTIVE_MOST_MS: u32 = 200;

    /// Reads `60ms`, `0.1s`, `adaptive` or `adaptive:300ms` (a time as `parse_ms` reads
    /// one); the error names the value.
    pub fn parse<E>(
        text: &str,
        parse_ms: impl Fn(&str) -> Result<u32, E>,
    ) -> Result<JitterBuffer, E> {
        match text.split_once(':') {
            Some(("adaptive", most)) => Ok(JitterBuffer::Adaptive {
                most_ms: parse_ms(most)?,
            }),
            None if text == "adaptive" => Ok(JitterBuffer::Adaptive {
                most_ms: Self::ADAPTIVE_MOST_MS,
            }),
            _ => Ok(JitterBuffer::Fixed {
                ms: parse_ms(text)?,
            }),
        }
    }
}

/// An adaptive jitter buffer's smallest depth: one frame.
pub const ADAPTIVE_LEAST_MS: u32 = FRAME_MS as u32;

/// An adaptive jitter buffer (`--jitter-buffer adaptive`), sans IO: it follows each
/// arriving datagram's transit with running estimates of its mean and of its mean
/// deviation from that mean (gains of 1/16, RFC 3550's for jitter), and every
/// [`AdaptivePlayout::EVERY`] datagrams (a second of frames: a buffer that stretches or
/// shrinks its audio does so gradually) sets its depth to four mean deviations, at least
/// one frame and at most its most. A datagram is late when its transit exceeds the mean
/// estimate as last set by more than the depth (the point its turn was played). Its
/// depth over the call, averaged over the datagrams judged, is what the listener waited:
/// the E-model's mouth-to-ear delay takes it in place of a fixed buffer's size.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptivePlayout {
    most_ns: f64,
    /// Running estimates: the mean transit and the mean deviation from it, nanoseconds.
    mean_ns: Option<f64>,
    deviation_ns: f64,
    /// The playout point as last set: the mean and the depth past it.
    set_mean_ns: f64,
    depth_ns: f64,
    judged: u64,
    depth_sum_ns: f64,
}

impl AdaptivePlayout {
    /// Datagrams between two settings of the depth: a second of 20 ms frames.
    pub const EVERY: u64 = 1000 / FRAME_MS;

    pub fn new(most_ms: u32) -> AdaptivePlayout {
        let least = f64::from(ADAPTIVE_LEAST_MS) * 1e6;
        AdaptivePlayout {
            most_ns: (f64::from(most_ms) * 1e6).max(least),
            mean_ns: None,
            deviation_ns: 0.0,
            set_mean_ns: 0.0,
            depth_ns: least,
            judged: 0,
            depth_sum_ns: 0.0,
        }
    }

    /// Judges a datagram that arrived with `transit_ns` (arrival less its send time):
    /// whether it came after its turn was played.
    pub fn late(&mut self, transit_ns: i128) -> bool {
        let transit = transit_ns as f64;
        let least = f64::from(ADAPTIVE_LEAST_MS) * 1e6;
        let mean = match self.mean_ns {
            None => {
                // The first datagram sets the playout point: its transit, one frame deep.
                self.set_mean_ns = transit;
                transit
            }
            Some(mean) => mean,
        };
        let late = transit - self.set_mean_ns > self.depth_ns;
        self.judged += 1;
        self.depth_sum_ns += self.depth_ns;
        // The estimates follow every arrival, late or not.
        let deviation = (transit - mean).abs();
        let mean = mean + (transit - mean) / 16.0;
        self.deviation_ns += (deviation - self.deviation_ns) / 16.0;
        self.mean_ns = Some(mean);
        if self.judged.is_multiple_of(Self::EVERY) {
            self.set_mean_ns = mean;
            self.depth_ns = (4.0 * self.deviation_ns).clamp(least, self.most_ns);
        }
        late
    }

    /// The buffer's mean depth over the datagrams judged, nanoseconds.
    pub fn mean_depth_ns(&self) -> f64 {
        if self.judged == 0 {
            self.depth_ns
        } else {
            self.depth_sum_ns / self.judged as f64
        }
    }

    /// The depth the next datagram is judged against, nanoseconds.
    pub fn depth_ns(&self) -> f64 {
        self.depth_ns
    }
}

impl CallSettings {
    /// Datagrams per second each way.
    pub fn pps(&self) -> u64 {
        1000 / FRAME_MS
    }

    /// The settings of `--codec` and `--jitter-buffer`, checked.
    pub fn checked(codec: Codec, buffer: JitterBuffer) -> Result<CallSettings, String> {
        let (jitter_buffer_ms, adaptive) = match buffer {
            JitterBuffer::Fixed { ms } => (ms, false),
            JitterBuffer::Adaptive { most_ms } => (most_ms, true),
        };
        if jitter_buffer_ms > MAX_JITTER_BUFFER_MS {
            return Err(format!(
                "invalid value '{jitter_buffer_ms}ms' for '--jitter-buffer': at most {MAX_JITTER_BUFFER_MS} ms"
            ));
        }
        if adaptive && jitter_buffer_ms < ADAPTIVE_LEAST_MS {
            return Err(format!(
                "invalid value 'adaptive:{jitter_buffer_ms}ms' for '--jitter-buffer': an adaptive buffer holds at least a frame ({ADAPTIVE_LEAST_MS} ms)"
            ));
        }
        Ok(CallSettings {
            codec,
            jitter_buffer_ms,
            adaptive,
        })
    }

    /// The buffer as `--jitter-buffer` gave it.
    pub fn buffer(&self) -> JitterBuffer {
        if self.adaptive {
            JitterBuffer::Adaptive {
                most_ms: self.jitter_buffer_ms,
            }
        } else {
            JitterBuffer::Fixed {
                ms: self.jitter_buffer_ms,
            }
        }
    }
}

/// What one way of a call delivered, as its receiver counted it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallWayCounts {
    /// Mean one-way delay of the datagrams that arrived, milliseconds.
    pub one_way_delay_ms: f64,
    pub received: u64,
    /// Never arrived (sequence gaps).
    pub lost: u64,
    /// Arrived after the jitter buffer played their turn.
    pub late: u64,
    /// Runs of consecutive losses.
    pub loss_events: u64,
    /// Runs of consecutive datagrams not heard, lost or late (a run of both counts once);
    /// 0 where the receiver did not count them.
    pub unplayed_runs: u64,
    /// How long the jitter buffer held the datagrams, milliseconds: a fixed buffer's
    /// size, an adaptive one's mean depth.
    pub jitter_buffer_ms: f64,
}

/// One way of a call, scored: the E-model's inputs and what it made of them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CallScore {
    /// Mouth-to-ear delay Ta: the network's mean one-way delay, the jitter buffer, the
    /// frame's 20 ms of packetisation and the codec's look-ahead, milliseconds.
    pub mouth_to_ear_ms: f64,
    /// Packet-loss probability Ppl: lost and late over those sent, percent.
    pub loss_pct: f64,
    /// BurstR: the mean length of the loss runs against that of random loss at the same
    /// rate (1 random, above 1 bursty).
    pub burst_ratio: f64,
    /// The delay impairment Id and the effective equipment impairment Ie,eff (none for a
    /// codec G.113 gives no values: [`Codec::emodel`]).
    pub delay_impairment: f64,
    pub loss_impairment: Option<f64>,
    /// The transmission rating factor R (0..100) and the mean opinion score (1..4.5);
    /// none, rather than one of linerate's invention, for a codec G.113 does not score.
    pub r: Option<f64>,
    pub mos: Option<f64>,
}

impl CallScore {
    /// "MOS 4.24 (R 86.3)", or "no MOS" where the codec has no E-model values.
    pub fn rating(&self) -> String {
        match (self.mos, self.r) {
            (Some(mos), Some(r)) => format!("MOS {mos:.2} (R {r:.1})"),
            _ => "no MOS".into(),
        }
    }
}

/// Scores one way of a call carried by `settings`' codec that delivered `counts`.
pub fn score(settings: &CallSettings, counts: &CallWayCounts) -> CallScore {
    let codec = settings.codec;
    let mouth_to_ear_ms = counts.one_way_delay_ms.max(0.0)
        + counts.jitter_buffer_ms.max(0.0)
        + FRAME_MS as f64
        + codec.lookahead_ms();
    let dropped = counts.lost + counts.late;
    let sent = counts.received + counts.lost;
    let loss = if sent > 0 {
        dropped as f64 / sent as f64
    } else {
        0.0
    };
    // G.107's bursts are runs of datagrams not heard, late or lost. Where the receiver
    // did not count them (an older peer), each late datagram is taken as a run of its own,
    // which makes late loss look as random as it can.
    let runs = if counts.unplayed_runs > 0 {
        counts.unplayed_runs
    } else {
        counts.loss_events + counts.late
    };
    let burst_ratio = if runs > 0 && loss < 1.0 {
        (dropped as f64 / runs as f64) * (1.0 - loss)
    } else {
        1.0
    };
    let e = EModel::default();
    let delay_impairment = e.delay_impairment(mouth_to_ear_ms);
    let loss_impairment = codec
        .emodel()
        .ok()
        .map(|(ie, bpl)| effective_ie(ie, bpl, loss * 100.0, burst_ratio));
    let r = loss_impairment.map(|ie_eff| e.ro_minus_is() - delay_impairment - ie_eff);
    CallScore {
        mouth_to_ear_ms,
        loss_pct: loss * 100.0,
        burst_ratio,
        delay_impairment,
        loss_impairment,
        r,
        mos: r.map(mos),
    }
}

/// G.107's effective equipment impairment: the codec's Ie raised by the loss `ppl`
/// (percent) as its robustness `bpl` and the burstiness allow.
pub fn effective_ie(ie: f64, bpl: f64, ppl: f64, burst_r: f64) -> f64 {
    if ppl <= 0.0 {
        return ie;
    }
    ie + (95.0 - ie) * ppl / (ppl / burst_r + bpl)
}

/// G.107's estimated mean opinion score (conversational quality) of a rating `r`.
pub fn mos(r: f64) -> f64 {
    if r <= 0.0 {
        1.0
    } else if r >= 100.0 {
        4.5
    } else {
        1.0 + 0.035 * r + r * (r - 60.0) * (100.0 - r) * 7e-6
    }
}

/// The E-model's parameters that are not the call's delay, loss or codec: G.107 Table 3's
/// defaults.
#[derive(Debug, Clone, Copy)]
struct EModel {
    /// Send and receive loudness ratings, dB.
    slr: f64,
    rlr: f64,
    /// Sidetone masking and listener sidetone ratings, dB.
    stmr: f64,
    lstr: f64,
    /// D-values of the telephones' send and receive sides.
    ds: f64,
    /// Talker echo loudness rating and weighted echo path loss, dB.
    telr: f64,
    wepl: f64,
    /// Quantizing distortion units.
    qdu: f64,
    /// Circuit noise at the 0 dBr point and the noise floor at the receive side, dBm0p.
    nc: f64,
    nfor: f64,
    /// Room noise at the send and receive sides, dB(A).
    ps: f64,
    pr: f64,
}

impl Default for EModel {
    fn default() -> EModel {
        EModel {
            slr: 8.0,
            rlr: 2.0,
            stmr: 15.0,
            lstr: 18.0,
            ds: 3.0,
            telr: 65.0,
            wepl: 110.0,
            qdu: 1.0,
            nc: -70.0,
            nfor: -64.0,
            ps: 35.0,
            pr: 35.0,
        }
    }
}

impl EModel {
    fn olr(&self) -> f64 {
        self.slr + self.rlr
    }

    /// The noise sum No (G.107 7.2), dBm0p.
    fn noise(&self) -> f64 {
        let nos = self.ps - self.slr - self.ds - 100.0
            + 0.004 * (self.ps - self.olr() - self.ds - 14.0).powi(2);
        let pre = self.pr + 10.0 * (1.0 + 10f64.powf((10.0 - self.lstr) / 10.0)).log10();
        let nor = self.rlr - 121.0 + pre + 0.008 * (pre - 35.0).powi(2);
        let nfo = self.nfor + self.rlr;
        10.0 * [self.nc, nos, nor, nfo]
            .iter()
            .map(|n| 10f64.powf(n / 10.0))
            .sum::<f64>()
            .log10()
    }

    /// The basic signal-to-noise ratio Ro (G.107 7.2).
    fn ro(&self) -> f64 {
        15.0 - 1.5 * (self.slr + self.noise())
    }

    /// Ro less the simultaneous impairment Is (G.107 7.3): the rating of a call with no
    /// delay and no loss over a codec without impairment.
    fn ro_minus_is(&self) -> f64 {
        let ro = self.ro();
        let no = self.noise();
        let xolr = self.olr() + 0.2 * (64.0 + no - self.rlr);
        let iolr = 20.0 * ((1.0 + (xolr / 8.0).powi(8)).powf(1.0 / 8.0) - xolr / 8.0);
        // STMRo's echo term (e^(-T/4) 10^(-TELR/10)) is left out: at the default TELR of
        // 65 dB it moves STMRo by under 0.0001 dB at any delay.
        let stmro = -10.0 * (10f64.powf(-self.stmr / 10.0)).log10();
        let ist = 12.0 * (1.0 + ((stmro - 13.0) / 6.0).powi(8)).powf(1.0 / 8.0)
            - 28.0 * (1.0 + ((stmro + 1.0) / 19.4).powi(35)).powf(1.0 / 35.0)
            - 13.0 * (1.0 + ((stmro - 3.0) / 33.0).powi(13)).powf(1.0 / 13.0)
            + 29.0;
        let q = 37.0 - 15.0 * self.qdu.log10();
        let g = 1.07 + 0.258 * q + 0.0602 * q * q;
        let y = (ro - 100.0) / 15.0 + 46.0 / 8.4 - g / 9.0;
        let z = 46.0 / 30.0 - g / 40.0;
        let iq = 15.0 * (1.0 + 10f64.powf(y) + 10f64.powf(z)).log10();
        ro - (iolr + ist + iq)
    }

    /// The delay impairment Id (G.107 7.4) of a mouth-to-ear delay `ta` ms, taking the
    /// talker echo path's delay T as `ta` and the listener echo's round trip Tr as twice
    /// it (one delay for the whole connection, G.107's planning assumption).
    fn delay_impairment(&self, ta: f64) -> f64 {
        let t = ta;
        let tr = 2.0 * ta;
        let ro = self.ro();
        let no = self.noise();
        let roe = -1.5 * (no - self.rlr);
        let terv = self.telr - 40.0 * ((1.0 + t / 10.0) / (1.0 + t / 150.0)).log10()
            + 6.0 * (-0.3 * t * t).exp();
        let re = 80.0 + 2.5 * (terv - 14.0);
        let idte = ((roe - re) / 2.0 + ((roe - re).powi(2) / 4.0 + 100.0).sqrt() - 1.0)
            * (1.0 - (-t).exp());
        let rle = 10.5 * (self.wepl + 7.0) * (tr + 1.0).powf(-0.25);
        let idle = (ro - rle) / 2.0 + ((ro - rle).powi(2) / 4.0 + 169.0).sqrt();
        let idd = if ta <= 100.0 {
            0.0
        } else {
            let x = (ta / 100.0).log10() / 2f64.log10();
            25.0 * ((1.0 + x.powi(6)).powf(1.0 / 6.0)
                - 3.0 * (1.0 + (x / 3.0).powi(6)).powf(1.0 / 6.0)
                + 2.0)
        };
        idte + idle + idd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over an hour of 20 ms frames, a speaker talks P.59's share of the time (38.8 %) in
    /// spurts of its mean length; the same seed is the same conversation, another seed
    /// another.
    #[test]
    fn talk_spurts_have_p59s_means() {
        let frames = 3_600 * 50u64;
        let run = |seed| {
            let mut spurts = TalkSpurts::new(seed);
            let talked: Vec<bool> = (0..frames)
                .map(|k| spurts.talking(k * FRAME_MS * 1_000_000))
                .collect();
            (talked, spurts.spurts)
        };
        let (talked, spurts) = run(7);
        assert!(talked[0], "a call begins in a talk spurt");
        let share = talked.iter().filter(|t| **t).count() as f64 / frames as f64;
        let expected = MEAN_TALK_MS / (MEAN_TALK_MS + MEAN_PAUSE_MS);
        assert!((share - expected).abs() < 0.03, "talked {share:.3}");
        let mean_spurt_ms = share * 3_600_000.0 / spurts as f64;
        assert!(
            (mean_spurt_ms / MEAN_TALK_MS - 1.0).abs() < 0.08,
            "{spurts} spurts of {mean_spurt_ms:.0} ms"
        );
        assert_eq!(run(7).0, talked);
        assert_ne!(run(8).0, talked);
    }

    fn way(delay_ms: f64, received: u64, lost: u64, late: u64, events: u64) -> CallWayCounts {
        CallWayCounts {
            one_way_delay_ms: delay_ms,
            received,
            lost,
            late,
            loss_events: events,
            unplayed_runs: 0,
            jitter_buffer_ms: 40.0,
        }
    }

    /// Most datagrams late, in long runs: counted as runs, the losses are bursty (the
    /// ratio over 1) and the call is bad; taken one run per late datagram (a peer that
    /// does not count runs), the same loss reads as smoother than random and scores
    /// far better, which is why the runs are counted.
    #[test]
    fn late_datagrams_in_runs_are_bursts() {
        let settings = CallSettings::checked(Codec::G711, JitterBuffer::Fixed { ms: 20 }).unwrap();
        let uncounted = way(40.0, 990, 10, 870, 5);
        let counted = CallWayCounts {
            unplayed_runs: 20,
            ..uncounted
        };
        let (uncounted, counted) = (score(&settings, &uncounted), score(&settings, &counted));
        assert!((counted.loss_pct - 88.0).abs() < 1e-9);
        assert!(counted.burst_ratio > 1.0, "{}", counted.burst_ratio);
        assert!(uncounted.burst_ratio < 0.2, "{}", uncounted.burst_ratio);
        assert!(
            counted.mos.unwrap() < 1.5,
            "MOS {} with 88 % unheard in runs",
            counted.mos.unwrap()
        );
        assert!(uncounted.mos.unwrap() > 3.5, "{}", uncounted.mos.unwrap());
    }

    #[test]
    fn the_default_connection_rates_93_2() {
        // G.107: with every parameter at its default, R = 93.2 (Ro 94.77, Is 1.41).
        let e = EModel::default();
        assert!((e.ro() - 94.77).abs() < 0.01, "Ro {}", e.ro());
        let r = e.ro_minus_is() - e.delay_impairment(0.0);
        assert!((r - 93.2).abs() < 0.05, "R {r}");
        assert!((mos(r) - 4.41).abs() < 0.01, "MOS {}", mos(r));
    }

    #[test]
    fn delay_costs_little_until_about_150_ms_then_much() {
        let e = EModel::default();
        let id = |ta| e.delay_impairment(ta);
        assert!(id(50.0) < 2.0, "{}", id(50.0));
        assert!(id(150.0) < 6.0, "{}", id(150.0));
        // G.114's planning curve: near 400 ms a call rates about R 60.
        let r400 = e.ro_minus_is() - id(400.0);
        assert!((55.0..65.0).contains(&r400), "R at 400 ms {r400}");
        assert!(id(100.0) < id(200.0) && id(200.0) < id(400.0));
    }

    #[test]
    fn loss_raises_the_impairment_by_the_codecs_robustness() {
        assert_eq!(effective_ie(0.0, 25.1, 0.0, 1.0), 0.0);
        // G.711 with PLC, 1 % random loss: 95 * 1 / (1 + 25.1) = 3.64.
        assert!((effective_ie(0.0, 25.1, 1.0, 1.0) - 3.640).abs() < 0.001);
        // Bursty loss hurts more than random loss at the same rate.
        assert!(effective_ie(0.0, 25.1, 2.0, 2.0) > effective_ie(0.0, 25.1, 2.0, 1.0));
        // G.729A starts at its Ie of 11.
        assert_eq!(effective_ie(11.0, 19.0, 0.0, 1.0), 11.0);
    }

    #[test]
    fn mos_is_g107s_curve_and_bounded() {
        assert_eq!(mos(-5.0), 1.0);
        assert_eq!(mos(120.0), 4.5);
        assert!((mos(50.0) - 2.58).abs() < 0.01, "{}", mos(50.0));
        assert!((mos(80.0) - 4.02).abs() < 0.01, "{}", mos(80.0));
    }

    #[test]
    fn a_call_is_scored_from_what_its_receiver_counted() {
        let g711 = CallSettings::checked(Codec::G711, JitterBuffer::Fixed { ms: 40 }).unwrap();
        let clean = score(&g711, &way(10.0, 500, 0, 0, 0));
        assert_eq!(clean.mouth_to_ear_ms, 70.0);
        assert_eq!(clean.loss_pct, 0.0);
        assert!(clean.mos.unwrap() > 4.3, "{clean:?}");
        // Random 1 % loss: runs of one, BurstR close to 1.
        let lossy = score(&g711, &way(10.0, 495, 5, 0, 5));
        assert!((lossy.loss_pct - 1.0).abs() < 1e-9);
        assert!((lossy.burst_ratio - 0.99).abs() < 1e-9);
        assert!(lossy.mos.unwrap() < clean.mos.unwrap());
        // Late datagrams count as lost.
        let late = score(&g711, &way(10.0, 500, 0, 5, 0));
        assert!((late.loss_pct - 1.0).abs() < 1e-9, "{late:?}");
        assert!((late.r.unwrap() - lossy.r.unwrap()).abs() < 0.01);
        // The same loss in bursts of five scores worse.
        let bursty = score(&g711, &way(10.0, 495, 5, 0, 1));
        assert!(
            bursty.burst_ratio > 4.9 && bursty.mos.unwrap() < lossy.mos.unwrap(),
            "{bursty:?}"
        );
        // G.729A: the codec's own impairment and look-ahead.
        let g729 = score(
            &CallSettings::checked(Codec::G729a, JitterBuffer::Fixed { ms: 40 }).unwrap(),
            &way(10.0, 500, 0, 0, 0),
        );
        assert_eq!(g729.mouth_to_ear_ms, 75.0);
        let extra_delay = g729.delay_impairment - clean.delay_impairment;
        assert!(extra_delay > 0.0);
        assert!(
            (clean.r.unwrap() - g729.r.unwrap() - 11.0 - extra_delay).abs() < 1e-9,
            "{clean:?} {g729:?}"
        );
        // Nothing arrived: every datagram lost, the rating at its floor.
        let silent = score(&g711, &way(0.0, 0, 50, 0, 1));
        assert_eq!(silent.loss_pct, 100.0);
        assert!(silent.mos.unwrap() < 1.5, "{silent:?}");
    }

    #[test]
    fn settings_are_checked_and_codecs_named() {
        assert!(
            CallSettings::checked(Codec::G711, JitterBuffer::Fixed { ms: 1_001 })
                .unwrap_err()
                .contains("'--jitter-buffer'")
        );
        assert_eq!(Codec::parse("g729a"), Ok(Codec::G729a));
        assert!(Codec::parse("g722")
            .unwrap_err()
            .contains("g711, g711-no-plc, g729a, opus:RATE"));
        assert_eq!(Codec::G711.datagram_bytes(), 172);
        assert_eq!(Codec::G729a.datagram_bytes(), 32);
        // Opus at a bitrate: a 20 ms frame of its bytes, from 6k to 510k (1,275 bytes,
        // the most a frame holds).
        assert_eq!(Codec::parse("opus:24k"), Ok(Codec::Opus { bps: 24_000 }));
        assert_eq!(Codec::parse("opus:12.4K"), Ok(Codec::Opus { bps: 12_400 }));
        assert_eq!(Codec::parse("opus:6000"), Ok(Codec::Opus { bps: 6_000 }));
        assert_eq!(Codec::Opus { bps: 24_000 }.datagram_bytes(), 12 + 60);
        assert_eq!(Codec::Opus { bps: 510_000 }.payload_bytes(), 1_275);
        assert_eq!(Codec::Opus { bps: 12_345 }.payload_bytes(), 31);
        for bad in [
            "opus",
            "opus:5.9k",
            "opus:511k",
            "opus:fast",
            "opus:NaNk",
            "opus:-8k",
        ] {
            let error = Codec::parse(bad).unwrap_err();
            assert!(
                error.contains("opus:") || error.contains("Opus runs"),
                "{error}"
            );
        }
        // Names read back as they were given, in documents as on the command line.
        for name in ["g711", "g711-no-plc", "g729a", "opus:24k", "opus:12400"] {
            let codec = Codec::parse(name).unwrap();
            assert_eq!(codec.name(), name);
            let json = serde_json::to_string(&codec).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<Codec>(&json).unwrap(), codec);
        }
        assert!(serde_json::from_str::<Codec>("\"opus:1m\"").is_err());
    }

    proptest::proptest! {
        /// A codec's name as a peer may send it (a client's call settings, a mesh
        /// agent's job): any text is a G.113 codec, Opus within its bitrates, or refused,
        /// never a panic or a rate out of range; and a codec read back is itself.
        #[test]
        fn any_codec_name_from_a_peer_is_a_bounded_codec_or_refused(
            name in "(opus:)?[-+0-9.eEkKnaNinf]{0,24}|.{0,40}",
        ) {
            if let Ok(codec) = Codec::parse(&name) {
                if let Codec::Opus { bps } = codec {
                    proptest::prop_assert!(OPUS_BPS.contains(&bps), "{name} -> {bps}");
                }
                proptest::prop_assert!((15..=1_275).contains(&codec.payload_bytes()));
                proptest::prop_assert_eq!(Codec::parse(&codec.name()), Ok(codec));
            }
        }
    }

    /// An Opus call is measured as any call (its mouth-to-ear delay with Opus's 6.5 ms
    /// look-ahead, its loss), but G.113 has no values for Opus: no R, no MOS, and the
    /// reason is the codec's.
    #[test]
    fn an_opus_call_has_no_mos_of_linerates_invention() {
        let opus =
            CallSettings::checked(Codec::Opus { bps: 32_000 }, JitterBuffer::Fixed { ms: 40 })
                .unwrap();
        let scored = score(&opus, &way(10.0, 495, 5, 0, 5));
        assert_eq!(scored.mouth_to_ear_ms, 76.5);
        assert!((scored.loss_pct - 1.0).abs() < 1e-9);
        assert!(scored.delay_impairment > 0.0);
        assert_eq!(
            (scored.loss_impairment, scored.r, scored.mos),
            (None, None, None)
        );
        assert!(Codec::Opus { bps: 32_000 }
            .emodel()
            .unwrap_err()
            .contains("G.113"));
        let json = serde_json::to_value(scored).unwrap();
        assert!(json["mos"].is_null() && json["r"].is_null(), "{json}");
    }

    /// A steady path: nothing late, and the buffer stays one frame deep.
    #[test]
    fn an_adaptive_buffer_on_a_steady_path_holds_a_frame_and_drops_nothing() {
        let mut playout = AdaptivePlayout::new(200);
        let late = (0..500).filter(|_| playout.late(5_000_000)).count();
        assert_eq!(late, 0);
        assert!((playout.mean_depth_ns() - 20e6).abs() < 1.0);
    }

    /// Transits that wander uniformly over 60 ms (a seeded draw): a fixed 20 ms buffer set
    /// on the first drops far more than the adaptive one, which settles near four mean
    /// deviations (15 ms for a uniform spread of 60: 60 ms deep) within its bounds; held
    /// to at most 20 ms it drops about the sixth of them that come over 20 ms past the
    /// mean.
    #[test]
    fn an_adaptive_buffer_follows_the_jitter_within_its_bounds() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut draw = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 60_000) as i128 * 1_000
        };
        let transits: Vec<i128> = (0..3000).map(|_| 10_000_000 + draw()).collect();
        let mut adaptive = AdaptivePlayout::new(200);
        let adaptive_late = transits.iter().filter(|&&t| adaptive.late(t)).count();
        let first = transits[0];
        let fixed_late = transits.iter().filter(|&&t| t - first > 20_000_000).count();
        let depth_ms = adaptive.mean_depth_ns() / 1e6;
        assert!(
            adaptive_late * 10 < fixed_late,
            "adaptive {adaptive_late} late, fixed 20 ms {fixed_late}"
        );
        assert!((45.0..=65.0).contains(&depth_ms), "{depth_ms:.1} ms deep");
        let mut capped = AdaptivePlayout::new(20);
        let capped_late = transits.iter().filter(|&&t| capped.late(t)).count();
        assert!((capped.mean_depth_ns() - 20e6).abs() < 1.0);
        assert!(
            capped_late > 5 * adaptive_late.max(1) && (300..=800).contains(&capped_late),
            "{capped_late} against {adaptive_late}"
        );
    }

    /// A path whose delay steps up 50 ms (a new route): a fixed buffer of 40 ms plays
    /// every datagram after the step too late; the adaptive one loses at most the second
    /// before it next sets its depth and the few after, then none.
    #[test]
    fn an_adaptive_buffer_recovers_from_a_step_within_about_a_second() {
        let transits: Vec<i128> = (0..1000)
            .map(|i| if i < 400 { 10_000_000 } else { 60_000_000 })
            .collect();
        let mut adaptive = AdaptivePlayout::new(200);
        let late: Vec<usize> = transits
            .iter()
            .enumerate()
            .filter(|(_, &t)| adaptive.late(t))
            .map(|(i, _)| i)
            .collect();
        assert!(
            !late.is_empty() && late.len() <= 2 * AdaptivePlayout::EVERY as usize,
            "{late:?}"
        );
        assert!(late
            .iter()
            .all(|&i| i >= 400 && i < 400 + 2 * AdaptivePlayout::EVERY as usize));
        let fixed_late = transits
            .iter()
            .filter(|&&t| t - transits[0] > 40_000_000)
            .count();
        assert_eq!(fixed_late, 600);
    }

    /// The mouth-to-ear delay takes the buffer's depth as the way counted it: an adaptive
    /// buffer 25 ms deep scores a call as a fixed one of 25 ms would.
    #[test]
    fn the_e_model_takes_the_buffers_depth_as_counted() {
        let fixed = CallSettings::checked(Codec::G711, JitterBuffer::Fixed { ms: 25 }).unwrap();
        let adaptive =
            CallSettings::checked(Codec::G711, JitterBuffer::Adaptive { most_ms: 200 }).unwrap();
        let counts = CallWayCounts {
            jitter_buffer_ms: 25.0,
            ..way(30.0, 1000, 5, 2, 3)
        };
        assert_eq!(score(&fixed, &counts), score(&adaptive, &counts));
        assert!((score(&fixed, &counts).mouth_to_ear_ms - 75.0).abs() < 1e-9);
        assert!(
            CallSettings::checked(Codec::G711, JitterBuffer::Adaptive { most_ms: 10 }).is_err()
        );
        assert_eq!(adaptive.buffer(), JitterBuffer::Adaptive { most_ms: 200 });
    }
}
