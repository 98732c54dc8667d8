//! A mesh row's columns, named once and read by one decoder whatever the database: the
//! SQLite store, its spool and the PostgreSQL archive select them in this order.

use linerate_model::mesh_row::{MeshRow, Outcome};

/// The columns of a row after its run id, in the order [`mesh_row`] reads them.
pub(crate) const MESH_COLUMNS: &str = "mesh, src, dst, test, direction, protocol, cycle, \
     started_at, ended_at, outcome, reason, blamed, headline, headline_text";

/// What the decoder needs of a database's row: a column's value by position.
pub(crate) trait Columns {
    type Error;
    fn text(&self, at: usize) -> Result<String, Self::Error>;
    fn maybe_text(&self, at: usize) -> Result<Option<String>, Self::Error>;
    fn integer(&self, at: usize) -> Result<i64, Self::Error>;
    fn real(&self, at: usize) -> Result<f64, Self::Error>;
    fn maybe_real(&self, at: usize) -> Result<Option<f64>, Self::Error>;
}

/// A mesh row from [`MESH_COLUMNS`] starting at column `first`, with its run id.
pub(crate) fn mesh_row<R: Columns>(
    r: &R,
    first: usize,
    run_id: Option<i64>,
) -> Result<MeshRow, R::Error> {
    let at = |i: usize| first + i;
    Ok(MeshRow {
        run_id,
        mesh: r.text(at(0))?,
        src: r.text(at(1))?,
        dst: r.text(at(2))?,
        test: r.text(at(3))?,
        direction: r.text(at(4))?,
        protocol: r.text(at(5))?,
        cycle: r.integer(at(6))? as u64,
        started_at: r.real(at(7))?,
        ended_at: r.real(at(8))?,
        outcome: Outcome::from_columns(&r.text(at(9))?, r.text(at(10))?, r.maybe_text(at(11))?),
        headline: r.maybe_real(at(12))?,
        headline_text: r.text(at(13))?,
    })
}

impl Columns for rusqlite::Row<'_> {
    type Error = rusqlite::Error;
    fn text(&self, at: usize) -> rusqlite::Result<String> {
        self.get(at)
    }
    fn maybe_text(&self, at: usize) -> rusqlite::Result<Option<String>> {
        self.get(at)
    }
    fn integer(&self, at: usize) -> rusqlite::Result<i64> {
        self.get(at)
    }
    fn real(&self, at: usize) -> rusqlite::Result<f64> {
        self.get(at)
    }
    fn maybe_real(&self, at: usize) -> rusqlite::Result<Option<f64>> {
        self.get(at)
    }
}

impl Columns for postgres::Row {
    type Error = postgres::Error;
    fn text(&self, at: usize) -> Result<String, postgres::Error> {
        self.try_get(at)
    }
    fn maybe_text(&self, at: usize) -> Result<Option<String>, postgres::Error> {
        self.try_get(at)
    }
    fn integer(&self, at: usize) -> Result<i64, postgres::Error> {
        self.try_get(at)
    }
    fn real(&self, at: usize) -> Result<f64, postgres::Error> {
        self.try_get(at)
    }
    fn maybe_real(&self, at: usize) -> Result<Option<f64>, postgres::Error> {
        self.try_get(at)
    }
}
