//! The mesh: many hosts measured on a schedule, the job perfSONAR's pScheduler and
//! pSConfig do. This crate is the sans-IO part: the mesh file ([`file`]), what it makes
//! ([`model`]: hosts, tests, groups, and the jobs, one test from one host to another), and
//! the scheduler that says when each job runs ([`schedule`]), and what each job runs
//! ([`plan`]: its profile, and the figures of a simulated schedule). The coordinator that runs
//! the jobs against the hosts' agents lives in linerate-campaign.

pub mod file;
mod host;
pub mod kinds;
pub mod model;
pub mod plan;
mod reading;
pub mod schedule;

pub use file::{parse, MeshError};
pub use kinds::Kind;
pub use model::*;
pub use plan::{job_plan, JobPlan, PlanSummary};
pub use schedule::{Action, Down, JobEnd, Past, Placed, Scheduler};

#[cfg(test)]
mod tests;
