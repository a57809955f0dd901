//! SQLite as a job queue: WAL, synchronous=FULL, one connection per worker; enqueue is an
//! INSERT, claim an UPDATE ... RETURNING of the oldest ready row, ack an UPDATE, each its own
//! transaction (or `batch` lifecycles of each kind per transaction).

use crate::run::Res;
use rusqlite::{params, Connection};

pub fn open(path: &std::path::Path) -> Res<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(std::time::Duration::from_secs(30))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY AUTOINCREMENT,
           state INTEGER NOT NULL, lease_until INTEGER, payload BLOB NOT NULL);
         CREATE INDEX IF NOT EXISTS ready ON jobs(id) WHERE state = 0;",
    )?;
    Ok(c)
}

fn claim(c: &Connection) -> Res<Option<i64>> {
    let mut st = c.prepare_cached(
        "UPDATE jobs SET state = 1, lease_until = ?1 WHERE id =
           (SELECT id FROM jobs WHERE state = 0 ORDER BY id LIMIT 1) RETURNING id, payload",
    )?;
    let mut rows = st.query(params![i64::MAX])?;
    Ok(match rows.next()? {
        Some(r) => {
            let _payload: Vec<u8> = r.get(1)?;
            Some(r.get(0)?)
        }
        None => None,
    })
}

/// `batch` lifecycles: enqueue all, claim all, ack all; one transaction per phase when
/// `batch` > 1, else each statement its own.
pub fn step(c: &mut Connection, payload: &[u8], batch: usize) -> Res<usize> {
    let tx = |c: &mut Connection, f: &mut dyn FnMut(&Connection) -> Res<()>| -> Res<()> {
        if batch > 1 {
            let t = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            f(&t)?;
            t.commit()?;
            Ok(())
        } else {
            f(c)
        }
    };
    tx(c, &mut |c| {
        for _ in 0..batch {
            c.prepare_cached("INSERT INTO jobs (state, payload) VALUES (0, ?1)")?
                .execute(params![payload])?;
        }
        Ok(())
    })?;
    let mut ids = Vec::with_capacity(batch);
    tx(c, &mut |c| {
        for _ in 0..batch {
            if let Some(id) = claim(c)? {
                ids.push(id);
            }
        }
        Ok(())
    })?;
    tx(c, &mut |c| {
        for id in &ids {
            c.prepare_cached("UPDATE jobs SET state = 2 WHERE id = ?1")?
                .execute(params![id])?;
        }
        Ok(())
    })?;
    Ok(ids.len())
}
