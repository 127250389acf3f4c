//! Device benchmarks through the [`Device`]/[`Queue`] API: the figures `augefs bench
//! device` compares with fio (4 KiB random read IOPS at a queue depth, 4 KiB random
//! write + flush IOPS one at a time, 1 MiB sequential write bandwidth).
//!
//! Invariants:
//! - Time comes from the injected [`Clock`]; randomness from a seeded [`Rng`], so the
//!   offsets of a run are a function of its seed.
//! - Offsets are multiples of the block size and every request lies inside
//!   `[0, span)`, where span is the device size rounded down to the block size: the same
//!   span fio is given.
//! - The timed loop does not allocate: buffers come from a [`BufPool`] filled before the
//!   clock starts, and a completed request's buffer carries the next request. Queues are
//!   kept full (pop one, push one).
//! - Counts cover completed requests only; `elapsed_ns` runs from the first push to the
//!   last completion.
//!
//! Each replacement request is submitted as soon as its slot frees (one `submit(0)` per
//! push), like fio's default `iodepth_batch_submit=1`, rather than batched with the other
//! completions of the same wake-up, so that the device sees the same request stream as
//! from fio. Batched resubmission can fall into lock-step on a virtio disk: the whole
//! depth goes out with one notification, the host completes it as one batch, and every
//! cycle waits for the slowest request of the batch. Seen on the development VM (4 KiB
//! random reads, QD32, batched): strace showed every `io_uring_enter` submitting 32 and
//! reaping 32, and throughput stayed near 100K IOPS while fio reached 130-145K in the
//! same minutes. The price is CPU: the extra `io_uring_enter` per request took system
//! time per 4 KiB read from about 3.7 us to 6.7 us there (fio spends about the same).

use device::{BufPool, Device, DeviceError, IoRequest, Queue};
use platform::{Clock, IoCause, Rng};
use serde::Serialize;

/// When a benchmark stops issuing requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchLimit {
    /// Issue until this much time has passed since the start.
    DurationNs(u64),
    /// Issue exactly this many operations.
    Ops(u64),
}

/// One benchmark's parameters.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub block_bytes: u32,
    /// Requests in flight; at most the device queue's depth.
    pub queue_depth: u32,
    pub limit: BenchLimit,
    pub seed: u64,
    /// The cause the device counts the benchmark's IO under.
    pub cause: IoCause,
}

impl BenchConfig {
    pub fn new(block_bytes: u32, queue_depth: u32, limit: BenchLimit, seed: u64) -> BenchConfig {
        BenchConfig {
            block_bytes,
            queue_depth,
            limit,
            seed,
            cause: IoCause::Tool,
        }
    }
}

/// What a benchmark measured. Latency is from push to pop, per operation (write +
/// flush for [`random_write_flush_iops`]), with about 6% bucket resolution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BenchResult {
    pub ops: u64,
    pub bytes: u64,
    pub elapsed_ns: u64,
    pub latency_p50_ns: u64,
    pub latency_p99_ns: u64,
    pub latency_max_ns: u64,
}

impl BenchResult {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 * 1e9 / self.elapsed_ns.max(1) as f64
    }

    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 * 1e9 / self.elapsed_ns.max(1) as f64
    }
}

/// Random `block_bytes` reads, `queue_depth` in flight.
pub fn random_read_iops(
    dev: &Device,
    clock: &dyn Clock,
    cfg: &BenchConfig,
) -> Result<BenchResult, DeviceError> {
    let span_blocks = span_blocks(dev, cfg);
    let mut rng = Rng::from_seed(cfg.seed);
    let block = cfg.block_bytes as u64;
    pipeline(dev, clock, cfg, Direction::Read, move || {
        rng.below(span_blocks) * block
    })
}

/// Sequential `block_bytes` writes from offset 0, `queue_depth` in flight, wrapping at
/// the end of the span. With `BenchLimit::Ops(span / block)` it writes the span once.
pub fn sequential_write_bandwidth(
    dev: &Device,
    clock: &dyn Clock,
    cfg: &BenchConfig,
) -> Result<BenchResult, DeviceError> {
    let span_blocks = span_blocks(dev, cfg);
    let block = cfg.block_bytes as u64;
    let mut next = 0u64;
    pipeline(dev, clock, cfg, Direction::Write, move || {
        let offset = next * block;
        next = (next + 1) % span_blocks;
        offset
    })
}

/// Random `block_bytes` writes, each followed by a flush, one at a time (fio
/// `--rw=randwrite --fdatasync=1 --iodepth=1`). `queue_depth` must be 1.
pub fn random_write_flush_iops(
    dev: &Device,
    clock: &dyn Clock,
    cfg: &BenchConfig,
) -> Result<BenchResult, DeviceError> {
    assert_eq!(cfg.queue_depth, 1, "write + flush runs one at a time");
    let span_blocks = span_blocks(dev, cfg);
    let block = cfg.block_bytes as u64;
    let mut rng = Rng::from_seed(cfg.seed);
    let mut queue = dev.queue()?;
    let mut buf = BufPool::new(cfg.block_bytes as usize, 1).get();
    rng.fill(&mut buf);
    let mut latency = LatencyHistogram::new();
    let mut result = BenchResult::default();
    let start_ns = clock.now_ns();
    let mut now_ns = start_ns;
    while cfg.limit.allows(result.ops, now_ns - start_ns) {
        let offset = rng.below(span_blocks) * block;
        buf = one(&mut queue, IoRequest::write(offset, buf, cfg.cause))?
            .into_buf()
            .expect("a write has a buffer");
        one(&mut queue, IoRequest::flush(cfg.cause))?;
        let done_ns = clock.now_ns();
        latency.record(done_ns - now_ns);
        now_ns = done_ns;
        result.ops += 1;
        result.bytes += block;
    }
    result.elapsed_ns = now_ns - start_ns;
    latency.summarise(&mut result);
    Ok(result)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Read,
    Write,
}

impl BenchLimit {
    fn allows(self, issued: u64, elapsed_ns: u64) -> bool {
        match self {
            BenchLimit::DurationNs(limit) => elapsed_ns < limit,
            BenchLimit::Ops(limit) => issued < limit,
        }
    }
}

/// Blocks in the benchmark span; checks the configuration against the device.
fn span_blocks(dev: &Device, cfg: &BenchConfig) -> u64 {
    let block = cfg.block_bytes as u64;
    let logical = dev.info().logical_block_bytes as u64;
    assert!(
        block > 0 && block % logical == 0,
        "block {block} not a multiple of {logical}"
    );
    assert!(cfg.queue_depth > 0);
    let span_blocks = dev.size_bytes() / block;
    assert!(
        span_blocks > 0,
        "device of {} bytes is smaller than one block",
        dev.size_bytes()
    );
    span_blocks
}

/// Runs one request alone and returns it.
fn one(queue: &mut Queue<'_>, request: IoRequest) -> Result<IoRequest, DeviceError> {
    queue.push(request).expect("an empty queue has room");
    queue.submit(1)?;
    let completion = queue.pop().expect("submit(1) leaves a completion");
    completion.result?;
    Ok(completion.request)
}

/// Keeps `queue_depth` requests in flight at the offsets `next_offset` yields. The tag of
/// a request is its pipeline slot, which indexes its push time.
fn pipeline(
    dev: &Device,
    clock: &dyn Clock,
    cfg: &BenchConfig,
    direction: Direction,
    mut next_offset: impl FnMut() -> u64,
) -> Result<BenchResult, DeviceError> {
    let mut queue = dev.queue()?;
    let depth = cfg.queue_depth as usize;
    assert!(
        depth <= queue.depth(),
        "benchmark depth {depth} beyond the queue's {}",
        queue.depth()
    );
    let pool = BufPool::new(cfg.block_bytes as usize, depth);
    let mut bufs: Vec<_> = (0..depth).map(|_| pool.get()).collect();
    if direction == Direction::Write {
        let mut rng = Rng::from_seed(cfg.seed ^ 0x5eed);
        bufs.iter_mut().for_each(|b| rng.fill(b));
    }
    let make = |offset, buf, tag| match direction {
        Direction::Read => IoRequest::read(offset, buf, cfg.cause).with_tag(tag),
        Direction::Write => IoRequest::write(offset, buf, cfg.cause).with_tag(tag),
    };
    let mut pushed_ns = vec![0u64; depth];
    let mut latency = LatencyHistogram::new();
    let mut result = BenchResult::default();
    let mut issued = 0u64;
    let start_ns = clock.now_ns();
    for (tag, buf) in bufs.drain(..).enumerate() {
        if !cfg.limit.allows(issued, 0) {
            pool.put(buf);
            continue;
        }
        pushed_ns[tag] = start_ns;
        queue
            .push(make(next_offset(), buf, tag as u64))
            .expect("queue has room for depth");
        issued += 1;
    }
    let mut now_ns = start_ns;
    while queue.outstanding() > 0 {
        queue.submit(1)?;
        while let Some(completion) = queue.pop() {
            now_ns = clock.now_ns();
            completion.result?;
            let tag = completion.request.tag;
            latency.record(now_ns - pushed_ns[tag as usize]);
            let buf = completion
                .request
                .into_buf()
                .expect("reads and writes have buffers");
            result.ops += 1;
            result.bytes += buf.len() as u64;
            if cfg.limit.allows(issued, now_ns - start_ns) {
                pushed_ns[tag as usize] = now_ns;
                queue
                    .push(make(next_offset(), buf, tag))
                    .expect("a popped slot has room");
                issued += 1;
                // Start it now rather than with the rest of this batch: see the
                // module notes on lock-step.
                queue.submit(0)?;
            } else {
                pool.put(buf);
            }
        }
    }
    assert_eq!(result.ops, issued);
    result.elapsed_ns = now_ns - start_ns;
    latency.summarise(&mut result);
    Ok(result)
}

/// Log-linear latency histogram: exact below 16 ns, then 16 buckets per power of two
/// (at most 1/16 = 6.25% relative error). Fixed size, so recording never allocates.
struct LatencyHistogram {
    counts: Box<[u64; Self::BUCKETS]>,
    total: u64,
    max_ns: u64,
}

impl LatencyHistogram {
    const SUB_BITS: u32 = 4;
    /// Index of u64::MAX is (63 - 3) * 16 + 15 = 975.
    const BUCKETS: usize = 976;

    fn new() -> LatencyHistogram {
        LatencyHistogram {
            counts: Box::new([0; Self::BUCKETS]),
            total: 0,
            max_ns: 0,
        }
    }

    fn bucket(ns: u64) -> usize {
        let sub = 1u64 << Self::SUB_BITS;
        if ns < sub {
            return ns as usize;
        }
        let exponent = 63 - ns.leading_zeros();
        let mantissa = (ns >> (exponent - Self::SUB_BITS)) & (sub - 1);
        ((exponent - Self::SUB_BITS + 1) as usize) * sub as usize + mantissa as usize
    }

    /// The smallest value in bucket `index`.
    fn bucket_floor(index: usize) -> u64 {
        let sub = 1usize << Self::SUB_BITS;
        if index < sub {
            return index as u64;
        }
        let exponent = (index / sub) as u32 + Self::SUB_BITS - 1;
        let mantissa = (index % sub) as u64;
        (1u64 << exponent) | (mantissa << (exponent - Self::SUB_BITS))
    }

    fn record(&mut self, ns: u64) {
        self.counts[Self::bucket(ns)] += 1;
        self.total += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    /// The floor of the bucket holding the `per_mille`th value.
    fn percentile(&self, per_mille: u64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = (self.total * per_mille).div_ceil(1000).max(1);
        let mut seen = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Self::bucket_floor(index).min(self.max_ns);
            }
        }
        self.max_ns
    }

    fn summarise(&self, result: &mut BenchResult) {
        result.latency_p50_ns = self.percentile(500);
        result.latency_p99_ns = self.percentile(990);
        result.latency_max_ns = self.max_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use device::memory::MemoryBackend;
    use platform::ManualClock;

    #[test]
    fn histogram_buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for ns in [
            0u64,
            1,
            15,
            16,
            17,
            31,
            32,
            33,
            1000,
            4096,
            123_456_789,
            u64::MAX,
        ] {
            let b = LatencyHistogram::bucket(ns);
            assert!(b >= last && b < LatencyHistogram::BUCKETS, "{ns} -> {b}");
            let floor = LatencyHistogram::bucket_floor(b);
            assert!(floor <= ns && ns - floor <= ns / 16, "{ns} floor {floor}");
            last = b;
        }
        let mut h = LatencyHistogram::new();
        (1..=1000u64).for_each(|i| h.record(i * 1000));
        let p50 = h.percentile(500);
        assert!((470_000..=500_000).contains(&p50), "{p50}");
        assert_eq!(h.max_ns, 1_000_000);
    }

    #[test]
    fn op_limits_are_exact_and_counted_by_the_device() {
        let dev = Device::new(Box::new(MemoryBackend::new(8 << 20, 512)));
        let clock = ManualClock::new(0);
        let r = random_read_iops(
            &dev,
            &clock,
            &BenchConfig::new(4096, 8, BenchLimit::Ops(100), 1),
        )
        .unwrap();
        assert_eq!((r.ops, r.bytes), (100, 409_600));
        let cfg = BenchConfig::new(1 << 20, 4, BenchLimit::Ops(8), 1);
        let w = sequential_write_bandwidth(&dev, &clock, &cfg).unwrap();
        assert_eq!(w.bytes, 8 << 20);
        let f = random_write_flush_iops(
            &dev,
            &clock,
            &BenchConfig::new(4096, 1, BenchLimit::Ops(5), 1),
        )
        .unwrap();
        assert_eq!(f.ops, 5);
        let tool = dev.counters().snapshot().cause(IoCause::Tool);
        assert_eq!(
            (tool.read_ops, tool.write_ops, tool.flush_ops),
            (100, 13, 5)
        );
        assert_eq!(tool.write_bytes, (8 << 20) + 5 * 4096);
        // The sequential pass wrote every byte with the random fill.
        assert!(dev
            .read(0, device::AlignedBuf::zeroed(8 << 20), IoCause::Tool)
            .unwrap()
            .iter()
            .any(|&b| b != 0));
    }

    #[test]
    fn duration_limit_stops_on_the_clock() {
        #[derive(Debug)]
        struct Ticking(ManualClock);
        impl Clock for Ticking {
            fn now_ns(&self) -> u64 {
                self.0.advance_ns(1000);
                self.0.now_ns()
            }
            fn wall_ns(&self) -> u64 {
                self.0.now_ns()
            }
        }
        let dev = Device::new(Box::new(MemoryBackend::new(1 << 20, 512)));
        let clock = Ticking(ManualClock::new(0));
        let r = random_read_iops(
            &dev,
            &clock,
            &BenchConfig::new(4096, 4, BenchLimit::DurationNs(100_000), 3),
        )
        .unwrap();
        assert!(r.ops > 50 && r.ops < 120, "{}", r.ops);
        assert!(r.elapsed_ns >= 100_000);
        assert!(r.latency_p50_ns > 0);
    }
}
