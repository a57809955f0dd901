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

/// Bring a new database's WAL to its steady size, as a queue that has run for a while has it:
/// one transaction of 1,100 pages (past the 1,000-page auto-checkpoint), dropped again, then a
/// checkpoint that restarts the WAL without truncating it. The timed transactions then
/// overwrite the WAL from its start inside the file's size, so each `fdatasync` writes and
/// flushes the frames and commits no growth of the file (on ext4 a journal commit each). A
/// new WAL grows with every transaction until its first checkpoint: about 1,000 transactions,
/// which a slow disk or an emulated guest does not reach within a case. `c` must stay open
/// while the others work: the last connection's close deletes the WAL.
pub fn warm(c: &Connection) -> Res<()> {
    c.execute_batch(
        "CREATE TABLE warm (b BLOB);
         INSERT INTO warm SELECT zeroblob(4000) FROM
           (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1100)
            SELECT i FROM n);
         DROP TABLE warm;",
    )?;
    c.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warming_leaves_a_wal_of_its_steady_size_and_no_rows() {
        let dir = std::env::temp_dir().join(format!("bench-sqlite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = open(&dir.join("q.db")).unwrap();
        warm(&c).unwrap();
        let wal = std::fs::metadata(dir.join("q.db-wal")).unwrap().len();
        assert!(wal >= 1_000 * 4096, "{wal} bytes of WAL");
        let jobs: i64 = c
            .query_row("SELECT count(*) FROM jobs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(jobs, 0);
        drop(c);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
