//! The multi-tenant import workload: jobs of 100 to 1,000,000 records
//! (log-uniform), split into chunks of at most `chunk_records`, arriving
//! as a Poisson process from tenants drawn by Zipf (a few tenants import
//! most). A job's chunks all wait from its arrival, as an import's chunks
//! do once its file is split.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::figures::stats::Zipf;

/// The smallest and largest job, in records.
pub(crate) const JOB_RECORDS: (u64, u64) = (100, 1_000_000);

/// What shapes a workload.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    pub tenants: usize,
    /// Zipf exponent of the tenants' share of jobs.
    pub zipf: f64,
    pub jobs: usize,
    pub chunk_records: u64,
    /// Records a worker processes per second.
    pub records_per_second: f64,
    pub workers: usize,
    /// Offered work over capacity while jobs arrive.
    pub load: f64,
    pub seed: u64,
}

/// One chunk of a job.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Chunk {
    /// Its index in the workload's chunks, in order of arrival.
    pub id: usize,
    pub job: usize,
    pub tenant: usize,
    /// 1 for a job's first chunk.
    pub part: u32,
    pub records: u64,
    /// The records of its whole job.
    pub job_records: u64,
    /// When its job arrived, ms of virtual time.
    pub arrived_ms: i64,
}

impl Chunk {
    /// How long a worker takes over it, ms.
    pub(crate) fn work_ms(&self, shape: &Shape) -> i64 {
        ((self.records as f64 / shape.records_per_second) * 1000.0).ceil() as i64
    }
}

/// One job.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    pub tenant: usize,
    pub records: u64,
    pub arrived_ms: i64,
    /// Its chunks, in order, as indices into the workload's chunks.
    pub chunks: std::ops::Range<usize>,
}

/// The jobs and their chunks, in order of arrival.
#[derive(Clone, Debug)]
pub(crate) struct Workload {
    pub jobs: Vec<Job>,
    pub chunks: Vec<Chunk>,
}

impl Workload {
    pub(crate) fn generate(shape: &Shape) -> Workload {
        let mut rng = StdRng::seed_from_u64(shape.seed);
        let zipf = Zipf::new(shape.tenants, shape.zipf);
        let (lo, hi) = (JOB_RECORDS.0 as f64, JOB_RECORDS.1 as f64);
        let sizes: Vec<u64> =
            (0..shape.jobs).map(|_| (lo * (hi / lo).powf(rng.random::<f64>())).round() as u64).collect();
        // Arrivals spread so that the work offered is `load` times what the
        // workers can do in the time the jobs arrive over.
        let work_s = sizes.iter().sum::<u64>() as f64 / shape.records_per_second;
        let span_ms = work_s / (shape.workers as f64 * shape.load) * 1000.0;
        let mean_gap_ms = span_ms / shape.jobs as f64;
        let (mut jobs, mut chunks) = (Vec::new(), Vec::new());
        let mut now = 0.0f64;
        for (job, records) in sizes.into_iter().enumerate() {
            let tenant = zipf.key(rng.random::<f64>());
            let first = chunks.len();
            let parts = records.div_ceil(shape.chunk_records);
            for part in 0..parts {
                let left = records - part * shape.chunk_records;
                chunks.push(Chunk {
                    id: chunks.len(),
                    job,
                    tenant,
                    part: part as u32 + 1,
                    records: left.min(shape.chunk_records),
                    job_records: records,
                    arrived_ms: now as i64,
                });
            }
            jobs.push(Job { tenant, records, arrived_ms: now as i64, chunks: first..chunks.len() });
            now += -mean_gap_ms * (1.0 - rng.random::<f64>()).ln();
        }
        Workload { jobs, chunks }
    }
}
